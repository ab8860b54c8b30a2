//! What `ck status` says of UDP groups: each group's datagrams by route and its flow table, per
//! slot, read from the group's maps (`udp_stats`, `flows`).
use std::collections::BTreeMap;

use ck_common::{STATS_NO_SLOT, udp::route};

use crate::control::{UdpGroupReport, UdpSlotReport};
use crate::supervisor::groups::Groups;

/// Counts by route name.
fn by_name(routes: &[u64; route::COUNT]) -> BTreeMap<String, u64> {
    route::NAMES
        .iter()
        .zip(routes)
        .map(|(name, n)| (name.to_string(), *n))
        .collect()
}

/// The report of every UDP group whose program is loaded, for slots `slots` (`mode`: the
/// `--udp-mode` word).
pub(in crate::supervisor) fn reports(
    groups: &Groups,
    slots: &[u32],
    mode: &str,
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
                        routes: by_name(&stats.routes),
                        flows: flows.get(&slot).copied().unwrap_or(0),
                    }
                })
                .collect();
            UdpGroupReport {
                group: group.name.clone(),
                mode: mode.to_string(),
                routes: by_name(&total.routes),
                dropped: dropped.total(),
                flows: flows.values().sum(),
                pending: maps.pending(),
                slots,
            }
        })
        .collect()
}
