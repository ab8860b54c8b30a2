//! What `ck status` says of UDP groups: each group's datagrams by route and its flow table, per
//! slot, read from the group's maps (`udp_stats`, `flows`), and the datagrams per second since a
//! reading of the same counters taken at the sampler's ticks ([`UdpRates`]).
use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use ck_common::{STATS_NO_SLOT, udp::route};

use crate::control::{UdpGroupReport, UdpSlotReport};
use crate::supervisor::groups::Groups;

/// Readings are taken at least this far apart: a rate is over one to two of these.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Every UDP group's per-slot datagram counts as read at a few recent sampler ticks, so that a
/// rate is known at the first `ck status`. Readings, not a rate: the rate is worked out from the
/// counters read when asked.
#[derive(Default)]
pub(in crate::supervisor) struct UdpRates {
    /// The two latest readings, oldest first, at least [`RATE_WINDOW`] apart.
    readings: VecDeque<Reading>,
}

/// Datagram counts by (group, slot) at one moment.
struct Reading {
    at: Instant,
    counts: BTreeMap<(String, u32), u64>,
}

impl UdpRates {
    /// Reads every UDP group's counts for `slots` at `now`, if the latest reading is at least
    /// [`RATE_WINDOW`] old (nothing without UDP groups).
    pub fn record(&mut self, groups: &Groups, slots: &[u32], now: Instant) {
        if !groups.any_udp()
            || self
                .readings
                .back()
                .is_some_and(|r| now.saturating_duration_since(r.at) < RATE_WINDOW)
        {
            return;
        }
        let mut counts = BTreeMap::new();
        for (group, maps) in groups
            .iter()
            .filter_map(|g| Some((g, g.bpf.as_ref()?.udp()?)))
        {
            for &slot in slots {
                counts.insert((group.name.clone(), slot), maps.stats(slot).total());
            }
        }
        self.readings.push_back(Reading { at: now, counts });
        while self.readings.len() > 2 {
            self.readings.pop_front();
        }
    }

    /// Datagrams per second of `group`'s `slot`, whose count is `count` at `now`, since the
    /// oldest reading kept (None: none, or too recent to tell). A count below the reading's was
    /// reset meanwhile (the slot reused): all of it is new.
    pub fn rate(&self, group: &str, slot: u32, count: u64, now: Instant) -> Option<f64> {
        let oldest = self.readings.front()?;
        let seconds = now.saturating_duration_since(oldest.at).as_secs_f64();
        if seconds < RATE_WINDOW.as_secs_f64() / 10.0 {
            return None;
        }
        let before = oldest
            .counts
            .get(&(group.to_string(), slot))
            .copied()
            .unwrap_or(0);
        let new = if count >= before {
            count - before
        } else {
            count
        };
        Some(new as f64 / seconds)
    }
}

/// Counts by route name.
fn by_name(routes: &[u64; route::COUNT]) -> BTreeMap<String, u64> {
    route::NAMES
        .iter()
        .zip(routes)
        .map(|(name, n)| (name.to_string(), *n))
        .collect()
}

/// The report of every UDP group whose program is loaded, for slots `slots` (`mode`: the
/// `--udp-mode` word; `rates`: the readings the rates come from, at `now`).
pub(in crate::supervisor) fn reports(
    groups: &Groups,
    slots: &[u32],
    mode: &str,
    rates: &UdpRates,
    now: Instant,
) -> Vec<UdpGroupReport> {
    groups
        .iter()
        .filter_map(|g| Some((g, g.bpf.as_ref()?.udp()?)))
        .map(|(group, maps)| {
            let flows = maps.flows_per_slot();
            let dropped = maps.stats(STATS_NO_SLOT);
            let mut total = dropped;
            let slots = slots
                .iter()
                .map(|&slot| {
                    let stats = maps.stats(slot);
                    total.add(&stats);
                    UdpSlotReport {
                        slot,
                        datagrams: stats.total(),
                        datagrams_per_s: rates.rate(&group.name, slot, stats.total(), now),
                        routes: by_name(&stats.routes),
                        flows: flows.get(&slot).copied().unwrap_or(0),
                    }
                })
                .collect::<Vec<UdpSlotReport>>();
            let slot_rates: Option<Vec<f64>> = slots.iter().map(|s| s.datagrams_per_s).collect();
            UdpGroupReport {
                group: group.name.clone(),
                mode: mode.to_string(),
                routes: by_name(&total.routes),
                dropped: dropped.total(),
                flows: flows.values().sum(),
                pending: maps.pending(),
                datagrams_per_s: slot_rates.map(|r| r.iter().sum()),
                slots,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rates with readings set by hand (recording needs loaded maps).
    fn rates(readings: Vec<(Instant, u64)>) -> UdpRates {
        UdpRates {
            readings: readings
                .into_iter()
                .map(|(at, n)| Reading {
                    at,
                    counts: BTreeMap::from([(("udp4-53".to_string(), 0), n)]),
                })
                .collect(),
        }
    }

    #[test]
    fn the_rate_is_over_the_oldest_reading_kept() {
        let t0 = Instant::now();
        let secs = |s: f64| t0 + Duration::from_secs_f64(s);
        assert_eq!(
            rates(vec![]).rate("udp4-53", 0, 10, t0),
            None,
            "no reading yet"
        );
        let r = rates(vec![(t0, 100), (secs(1.0), 300)]);
        assert_eq!(r.rate("udp4-53", 0, 500, secs(2.0)), Some(200.0));
        assert_eq!(
            r.rate("udp4-53", 0, 100, secs(0.05)),
            None,
            "too recent to tell"
        );
        // A slot missing from the reading counts from zero; a count that went down was reset.
        assert_eq!(r.rate("udp4-53", 7, 40, secs(2.0)), Some(20.0));
        assert_eq!(r.rate("udp4-53", 0, 30, secs(2.0)), Some(15.0));
    }
}
