//! Health: accept-queue sampling (stall detection, and `least-queue`'s sampled fallback where
//! its program cannot read the exact depth), watchdog heartbeats, probes through the slot's own
//! socket, and replacement of workers that stay unhealthy. An unhealthy worker leaves the active
//! set with its socket open, and comes back when healthy again.
//!
//! Pace: only the sampled fallback needs millisecond-fresh depths (`--sample-interval` under
//! traffic, [`IDLE_SAMPLING_FACTOR`] times slower idle). Otherwise queues are sampled every
//! `--stall-timeout` / [`STALL_SAMPLES`], at least [`MIN_STALL_PERIOD`], while connections
//! arrive or wait: a stall is then seen within a tenth of its timeout late. While nothing
//! arrives and nothing waits, once every [`quiet_period`] (a second by default): an idle ck
//! wakes about once a second. `--ready auto`'s detection of silent starting workers keeps its
//! own fast pace (every [`READY_CHECK_EVERY`] sample interval, 1 ms) while such a worker
//! boots, without sampling, so readiness is seen within about a millisecond of the worker's
//! first `accept`; so does the count of a leaving worker's connections (`leaving`).
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    groups::Groups,
    inputs::{Found, Inputs, detect, healths, healths::Healths, queue_motion},
    lifecycle::{Input, State},
    slots::SlotTable,
};

/// Which signal changed.
#[derive(Clone, Copy, Debug)]
pub(in crate::supervisor) enum Signal {
    Watchdog,
    Probe,
    Stall,
}

/// Sets or clears one health signal of `index`'s worker; the input that tells the lifecycle
/// when the worker's verdict (healthy or not) changes.
pub(in crate::supervisor) fn set(
    healths: &mut Healths,
    table: &SlotTable,
    index: u32,
    signal: Signal,
    bad: bool,
    detail: &str,
) -> Option<Input> {
    let health = healths.of_worker_mut(table.slots.get(&index)?)?;
    let was_healthy = health.is_healthy();
    let flag = match signal {
        Signal::Watchdog => &mut health.watchdog,
        Signal::Probe => &mut health.probe,
        Signal::Stall => &mut health.stalled,
    };
    if *flag == bad {
        return None;
    }
    *flag = bad;
    let healthy = health.is_healthy();
    if bad {
        health.since.get_or_insert_with(Instant::now);
    } else if healthy {
        health.since = None;
    }
    (healthy != was_healthy).then(|| Input::Health {
        healthy,
        why: format!("{signal:?}: {detail}"),
    })
}

/// What a sample of the accept queues found.
pub(in crate::supervisor) struct Sampled {
    /// Health signals that changed, by slot.
    pub found: Vec<(u32, Found)>,
    /// Slots whose queue depth changed (their records are written again).
    pub depth_changed: Vec<u32>,
    /// Nothing queued anywhere and no connection sent since the last sample.
    pub quiet: bool,
}

impl Inputs {
    /// Samples every slot's accept queue (`TCP_INFO` of ck's copy of each socket), detects
    /// stalls and missed heartbeats (the supervisor feeds what it found to the machine).
    pub(in crate::supervisor) fn sample(
        &mut self,
        table: &mut SlotTable,
        groups: &Groups,
        cfg: &RunConfig,
        now: Instant,
    ) -> Sampled {
        let stall_timeout = cfg.health.stall_timeout;
        let watchdog = cfg.health.watchdog;
        // The health of workers that are gone goes with them.
        (self.healths).keep_only(|index| table.slots.get(&index).and_then(healths::running));
        let mut depth_changed = Vec::new();
        let mut changes = Vec::new();
        // Nothing queued anywhere and no connection sent since the last sample.
        let mut quiet = true;
        // A queue that did not move since the last sample has been still since that sample.
        let still_since = self.pacer.sampled(now);
        // Connections the program sent each slot so far: with the depths, how many left its
        // queue since the last sample (`queue_motion`).
        // Read only where stall detection runs and the program counts.
        let counted = stall_timeout.is_some() && !cfg.no_bpf;
        let sent: BTreeMap<u32, u64> = match counted {
            true => table
                .slots
                .keys()
                .map(|&index| {
                    let stats = groups.slot_stats(index);
                    (index, stats.selected + stats.probe_hits)
                })
                .collect(),
            false => BTreeMap::new(),
        };
        for slot in table.slots.values_mut() {
            let sent = sent.get(&slot.index).copied();
            let depth = slot.live_queue_depth();
            let previous = slot.queue_depth;
            let arrivals = sent.map(|sent| sent.saturating_sub(slot.sent_seen.unwrap_or(sent)));
            slot.sent_seen = sent;
            quiet &= depth == 0 && arrivals.unwrap_or(0) == 0;
            if depth != previous {
                slot.queue_depth = depth;
                depth_changed.push(slot.index);
            }
            let Some(health) = self.healths.of_worker(slot) else {
                slot.queue_rising_since = None;
                continue;
            };
            // A starting worker is not expected to accept yet (its accept probe, or a
            // connection the fallback queued, waits for its boot): its stall clock starts when
            // it is ready.
            let starting = matches!(slot.life.state, State::Starting(_));
            if let Some(timeout) = stall_timeout {
                if depth > 0 && !queue_motion::moved(previous, depth, arrivals) && !starting {
                    let from = queue_motion::still_since(previous, still_since, now);
                    let since = *slot.queue_rising_since.get_or_insert(from);
                    if !health.stalled && now.duration_since(since) >= timeout {
                        changes.push((
                            slot.index,
                            Found::Health {
                                signal: Signal::Stall,
                                bad: true,
                                detail: format!(
                                    "{depth} connection(s) queued and not accepted for \
                                     {timeout:?}"
                                ),
                            },
                        ));
                    }
                } else {
                    slot.queue_rising_since = None;
                    if health.stalled {
                        changes.push((
                            slot.index,
                            Found::Health {
                                signal: Signal::Stall,
                                bad: false,
                                detail: format!("queue moving ({previous} -> {depth})"),
                            },
                        ));
                    }
                }
            }
            if let (Some(limit), Some(last)) = (watchdog, health.last_watchdog)
                && !health.watchdog
                && now.duration_since(last) > limit
            {
                changes.push((
                    slot.index,
                    Found::Health {
                        signal: Signal::Watchdog,
                        bad: true,
                        detail: format!("no WATCHDOG=1 for {limit:?}"),
                    },
                ));
            }
        }
        Sampled {
            found: changes,
            depth_changed,
            quiet,
        }
    }

    /// The sampled fallback's period (see `pace::Pacer::fallback_period`).
    pub(in crate::supervisor) fn fallback_period(
        &mut self,
        table: &SlotTable,
        groups: &Groups,
        cfg: &RunConfig,
        now: Instant,
    ) -> Duration {
        let watching = detect::watching(cfg, table);
        let queued = table.slots.values().any(|s| s.queue_depth > 0);
        let interval = cfg.health.sample_interval;
        let slots = &table.slots;
        let selected = || slots.keys().map(|&i| groups.slot_stats(i).selected).sum();
        let pacer = &mut self.pacer;
        pacer.fallback_period(now, queued, watching, selected, interval)
    }
}
