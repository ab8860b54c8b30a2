//! The event loop's side of `--metrics`: a [`Scrape`] read from the kernel where it holds the
//! truth (the program's counters per group and slot, the active set and slot records from the
//! maps, accept queues from `TCP_INFO`, cgroup usage), the readiness verdict of `/readyz`, and
//! the liveness answer of `/healthz`. Nothing slow happens here: sock_diag and `/proc` scans
//! run off the loop (see `metrics::server`).
use ck_common::STATS_NO_SLOT;

use crate::supervisor::{
    groups::Groups,
    lifecycle::active_set,
    lifecycle::crash::Breaker,
    reports::{Reports, View, reads},
    slots::SlotTable,
};
use crate::{
    metrics::{Call, GroupScrape, GroupSlot, Scrape, SlotScrape},
    os::sockets,
};

impl Reports {
    /// Answers one call of the metrics listener.
    pub(in crate::supervisor) fn metrics_call(&self, view: View<'_>, call: Call) {
        match call {
            Call::Scrape(reply) => {
                let _ = reply.send(self.scrape(view));
            }
            Call::Alive(reply) => {
                let _ = reply.send(());
            }
            Call::Ready(reply) => {
                let _ = reply.send(readiness(view));
            }
        }
    }

    fn scrape(&self, view: View<'_>) -> Scrape {
        let since = view
            .ops
            .quiet
            .seconds_since_last_connection(view.groups, view.table);
        let groups = view
            .groups
            .iter()
            .enumerate()
            .map(|(index, group)| GroupScrape {
                name: group.name.clone(),
                listen: group.addr.addr.to_string(),
                since_last_connection: since.get(index).copied().flatten(),
                dropped: group.bpf.as_ref().map(|b| b.stats(STATS_NO_SLOT).errors),
                slots: view
                    .table
                    .slots
                    .values()
                    .map(|slot| GroupSlot {
                        slot: slot.index,
                        stats: group.bpf.as_ref().map(|b| b.stats(slot.index)),
                        queue_depth: slot
                            .sockets
                            .get(index)
                            .and_then(|s| sockets::accept_queue_len(s).ok()),
                        resets: group
                            .bpf
                            .as_ref()
                            .and_then(|b| b.canary_watch().resets(slot.index)),
                        listen_drops: slot
                            .sockets
                            .get(index)
                            .filter(|_| !group.addr.is_udp())
                            .and_then(|s| sockets::listen_drops(s).ok())
                            .map(u64::from),
                    })
                    .collect(),
            })
            .collect();
        let active = reads::active_lists(view.groups, view.table, view.stopping).ready;
        let slots = view
            .table
            .slots
            .values()
            .map(|s| {
                let usage = view.table.usage(s.index);
                let pids = view.table.tree_pids(s.index);
                SlotScrape {
                    slot: s.index,
                    state: view.groups.state_word(s.index, s.life.shown()),
                    ready: active.contains(&s.index),
                    breaker_open: s.life.crash.breaker() != Breaker::Closed,
                    restarts: s.life.restarts,
                    probe_failures: s.probe_failures,
                    output_dropped: s.output_dropped.load(std::sync::atomic::Ordering::Relaxed),
                    memory_bytes: usage.map(|u| u.memory_bytes),
                    cpu_usec: usage.map(|u| u.cpu_usec),
                    pids,
                }
            })
            .collect();
        Scrape {
            groups,
            slots,
            reloads: view.ops.reloads,
            canaries: crate::metrics::CanaryCounts {
                share: reads::canary_share(view.ops, view.groups, view.table),
                ..view.ops.canaries
            },
            upgrades: u64::from(view.continuity.upgrades),
            ports: view.groups.iter().map(|g| g.addr.addr.port()).collect(),
            probe_base: view.cfg.health.probe_port_base,
            connections: reads::kernel_connections(view.cfg, view.groups, view.table).ok(),
            udp: super::udp_rates::reports(
                view.groups,
                &view.table.slots.keys().copied().collect::<Vec<_>>(),
                view.cfg.udp_mode.name(),
                &self.udp_rates,
                std::time::Instant::now(),
            ),
        }
    }
}

/// `/readyz`: ready while every group has at least one worker in its active set (read
/// from the group's `active` map), with the reason either way.
fn readiness(view: View<'_>) -> Result<String, String> {
    if view.stopping {
        return Err("ck is stopping".into());
    }
    if let Some(why) = view.ops.quiet.readiness(view.cfg, view.groups, view.table) {
        return Err(why);
    }
    let mut ready = Vec::new();
    let mut missing = Vec::new();
    for group in view.groups.iter() {
        let listed = match &group.bpf {
            Some(bpf) => bpf.read_active().map(|lists| lists.ready),
            // With no map (`--no-bpf`), or while an upgraded or taking-over ck loads the
            // program again (the pinned maps hold the set it computes), the computed set.
            None if view.cfg.no_bpf || view.continuity.bpf_resumed => {
                let set = active_set(view.table.lives(), view.stopping, false);
                Some(set.slots[..set.ready_len as usize].to_vec())
            }
            None => None,
        };
        match listed {
            None => missing.push(format!(
                "{}: BPF steering is still being set up",
                group.name
            )),
            Some(slots) if slots.is_empty() => missing.push(format!(
                "{}: no worker in the active set ({})",
                group.name,
                slot_words(view.groups, view.table)
            )),
            Some(slots) => ready.push(format!("{} slots {slots:?}", group.name)),
        }
    }
    match missing.is_empty() {
        true => Ok(format!("in the active set: {}", ready.join("; "))),
        // `ck drain --all` (or every slot drained one by one): the host is out of rotation.
        false if host_drained(view) => Err(format!(
            "drained: every worker's slot is drained (`ck undrain --all` puts the host \
             back); {}",
            missing.join("; ")
        )),
        false => Err(missing.join("; ")),
    }
}

/// Whether the whole host is out of rotation, from the active set the kernel holds now.
fn host_drained(view: View<'_>) -> bool {
    let ready = reads::active_lists(view.groups, view.table, view.stopping).ready;
    reads::host_drained(&ready, view.table)
}

/// `slot 0 draining (drained), slot 1 starting`: why no slot is selected.
fn slot_words(groups: &Groups, table: &SlotTable) -> String {
    if table.slots.is_empty() {
        return "no slot in use".into();
    }
    table
        .slots
        .values()
        .map(|s| {
            let drained = if s.life.drained { " (drained)" } else { "" };
            let state = groups.state_word(s.index, s.life.shown());
            format!("slot {} {state}{drained}", s.index)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
