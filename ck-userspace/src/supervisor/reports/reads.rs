//! What the reports read from the kernel and the maps, one question each, each taking only the
//! parts it reads: open connections (the kernel's counts, else the sock_diag scan), the active
//! set, what the policy steers by, whether the host is drained, the canary's share.
use std::collections::BTreeMap;

use crate::bpf::{active::ActiveLists, conn_steering::ConnSteering, queue_depth::QueueDepth};
use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    groups::Groups, lifecycle::active_set, operations::Operations, slots::SlotTable,
};

/// Open connections per slot as the kernel counts them (every group's `ck_conns`, summed),
/// or why it does not count them here.
pub(in crate::supervisor) fn kernel_connections(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
) -> Result<BTreeMap<u32, u64>, String> {
    let why_not = groups.tcp().find_map(|g| match &g.bpf {
        Some(bpf) => bpf.conn_count_fallback().map(str::to_string),
        None if cfg.no_bpf => Some("--no-bpf".to_string()),
        None => Some("BPF program not loaded yet".to_string()),
    });
    if let Some(why) = why_not {
        return Err(why);
    }
    Ok(table
        .slots
        .keys()
        .map(|index| (*index, groups.kernel_connections_of(*index).unwrap_or(0)))
        .collect())
}

/// Open connections per slot, and how they were counted: `kernel` ([`kernel_connections`])
/// or `scan (WHY)` (sock_diag matched to the workers' fds: the fallback where the kernel does
/// not count, slower: a readlink per fd of each worker).
pub(super) fn open_connections(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
) -> (BTreeMap<u32, u64>, String) {
    match kernel_connections(cfg, groups, table) {
        Ok(counts) => (counts, "kernel".to_string()),
        Err(why) => {
            let ports: Vec<u16> = groups.iter().map(|g| g.addr.addr.port()).collect();
            let counts = crate::metrics::connections::per_worker(
                &ports,
                cfg.health.probe_port_base,
                &table.worker_trees(),
            );
            (counts, format!("scan ({why})"))
        }
    }
}

/// The active set as the kernel holds it (first group), or as ck computes it without BPF.
pub(in crate::supervisor) fn active_lists(
    groups: &Groups,
    table: &SlotTable,
    stopping: bool,
) -> ActiveLists {
    if let Some(lists) = groups.first().and_then(|g| g.bpf.as_ref()?.read_active()) {
        return lists;
    }
    let set = active_set(table.lives(), stopping, false);
    ActiveLists::of(&set, |_| None)
}

/// What `least-queue` steers by, read back from every group's `config` map (None with
/// another policy).
pub(super) fn queue_depth(cfg: &RunConfig, groups: &Groups) -> Option<String> {
    if !cfg.policy.reads_queue() {
        return None;
    }
    if cfg.no_bpf {
        return Some("none (--no-bpf: the kernel hashes)".into());
    }
    let mut depths = groups
        .iter()
        .map(|g| g.bpf.as_ref().map(|b| b.queue_depth()));
    let first_sampled = depths.find(|d| d.as_ref() != Some(&QueueDepth::Exact));
    Some(match first_sampled {
        None => QueueDepth::Exact.describe(),
        Some(Some(sampled)) => sampled.describe(),
        Some(None) => "not known yet (the BPF program is loading)".into(),
    })
}

/// `least-queue`'s patience as the first group's program holds it (None with another policy).
pub(super) fn queue_patience_us(cfg: &RunConfig, groups: &Groups) -> Option<u64> {
    if !cfg.policy.reads_queue() {
        return None;
    }
    let bpf = groups.first()?.bpf.as_ref()?;
    bpf.queue_patience()
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// What `least-conn` compares, read back from the groups' `config` maps (None with another
/// policy): the first group that does not sum the kernel's counts says why.
pub(super) fn conn_steering(cfg: &RunConfig, groups: &Groups) -> Option<String> {
    if cfg.policy != crate::settings::run_config::Policy::LeastConn {
        return None;
    }
    if cfg.no_bpf {
        return Some("none (--no-bpf: the kernel hashes)".into());
    }
    let mut all = groups.iter().map(|g| g.bpf.as_ref()?.conn_steering());
    let first_not_kernel = all.find(|s| s.as_ref() != Some(&ConnSteering::Kernel));
    Some(match first_not_kernel {
        None => ConnSteering::Kernel.describe(),
        Some(Some(other)) => other.describe(),
        Some(None) => "not known yet (the BPF program is loading)".into(),
    })
}

/// The whole host is out of rotation: `ready` (the ready list of the `active` map, as
/// [`active_lists`] read it) is empty, and every slot with a worker is drained.
pub(in crate::supervisor) fn host_drained(ready: &[u32], table: &SlotTable) -> bool {
    let mut workers = table
        .slots
        .values()
        .filter(|s| s.worker.is_some())
        .peekable();
    ready.is_empty() && workers.peek().is_some() && workers.all(|s| s.life.drained)
}

/// The share of new connections the kernel's maps give the canary judged now (None: none
/// is judged, or no group can tell).
pub(super) fn canary_share(ops: &Operations, groups: &Groups, table: &SlotTable) -> Option<f64> {
    let roll = ops.core.roll.as_ref()?;
    let canary = roll.canary.as_ref().filter(|c| c.judging())?;
    let slots: Vec<u32> = canary.pairs.iter().map(|(_, new)| *new).collect();
    groups.share_of(table, &slots)
}
