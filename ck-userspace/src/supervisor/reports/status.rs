//! The report `ck status` prints, read from the kernel where the kernel holds the truth: the
//! active set and slot records from the maps, counters from `stats`, steering from the last
//! canary, foreign listeners from sock_diag, why the fleet is degraded (`degraded`), open
//! connections from the kernel's counts (else the sock_diag scan), accept-queue depths read
//! when asked (`TCP_INFO`).
use std::time::Instant;

use ck_common::MAX_SLOTS;

use crate::bpf::active::ActiveLists;
use crate::control::{GroupSteering, SlotReport, StatusReport};
use crate::supervisor::{
    groups::Groups,
    inputs::{foreign, listens::Listens},
    operations::Operations,
    reports::{Reports, View, reads},
    slots::SlotTable,
};

impl Reports {
    /// The report `ck status` prints.
    pub(in crate::supervisor) fn status(&self, view: View<'_>) -> StatusReport {
        let (connections, connection_count) =
            reads::open_connections(view.cfg, view.groups, view.table);
        let listens = Listens::now();
        let indices: Vec<u32> = view.table.slots.keys().copied().collect();
        let slots = view
            .table
            .slots
            .values()
            .map(|s| {
                let stats = view.groups.slot_stats(s.index);
                let usage = view.table.usage(s.index);
                let worker = s.worker.as_ref();
                SlotReport {
                    slot: s.index,
                    pid: worker.map(|w| w.pid),
                    state: view.groups.state_word(s.index, s.life.shown()),
                    drained: s.life.drained,
                    uptime_ms: s.uptime().map_or(0, |d| d.as_millis() as u64),
                    restarts: s.life.restarts,
                    generation: s.life.generation,
                    selected: stats.selected,
                    fallbacks: stats.fallbacks,
                    migrated: stats.migrated,
                    last_exit: s.last_exit.clone(),
                    status: worker.and_then(|w| w.status.clone()),
                    unhealthy: (view.inputs.healths.of_worker(s))
                        .filter(|h| !h.is_healthy())
                        .map(|h| h.reasons()),
                    queue_depth: s.live_queue_depth(),
                    connections: connections.get(&s.index).copied(),
                    probe_hits: stats.probe_hits,
                    breaker: s.life.crash.breaker().name().into(),
                    memory_bytes: usage.map(|u| u.memory_bytes),
                    cpu_ms: usage.map(|u| u.cpu_usec / 1000),
                    adopt_latency_us: worker.and_then(|w| w.adopt_latency_us),
                    member_of: s.life.member_of,
                    spare: s.life.spare,
                    canary: s.life.canary,
                    notify_refused: worker.map_or(0, |w| {
                        w.notify_refused.load(std::sync::atomic::Ordering::Relaxed)
                    }),
                    output_dropped: s.output_dropped.load(std::sync::atomic::Ordering::Relaxed),
                    nice: worker.and_then(|w| crate::os::priority::nice_of(w.pid).ok()),
                }
            })
            .collect();
        let ActiveLists {
            ready: active,
            booting,
            fallback,
        } = reads::active_lists(view.groups, view.table, view.stopping);
        let host_drained = reads::host_drained(&active, view.table);
        let steering = view
            .groups
            .iter()
            .filter(|g| g.bpf.is_some())
            .map(|g| GroupSteering {
                group: g.name.clone(),
                attached: g.steering.attached,
                checked_ms_ago: g.steering.at.map(|at| at.elapsed().as_millis() as u64),
            })
            .collect();
        StatusReport {
            name: view.cfg.name.clone(),
            pid: std::process::id(),
            bpf: view.groups.steering_verified(),
            no_bpf: view.cfg.no_bpf,
            steering,
            policy: view.cfg.policy,
            groups: view.groups.iter().map(|g| g.name.clone()).collect(),
            listen: view
                .groups
                .iter()
                .map(|g| g.addr.addr.to_string())
                .collect(),
            probe: view.cfg.health.probe.as_ref().map(|p| p.to_string()),
            probe_port_base: view.cfg.health.probe_port_base,
            pins: view.groups.bpf_loaded().then(|| {
                crate::bpf::pins::instance_dir(&view.cfg.name)
                    .display()
                    .to_string()
            }),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            active,
            booting,
            fallback,
            degraded: super::degraded::degraded(
                view.cfg,
                view.settings,
                view.groups,
                view.table,
                &listens,
            ),
            foreign: foreign::listeners(view.cfg, view.groups, view.table, &listens),
            min_workers: view.settings.min_workers,
            cgroup: view
                .table
                .cgroups
                .as_ref()
                .map(|c| c.dir().display().to_string()),
            memory_limit: view.table.memory_limit(view.cfg.worker_memory_max),
            adopt: view.cfg.adopt,
            dropped: view.groups.slot_stats(MAX_SLOTS).errors,
            stopping: view.stopping || view.ops.quiet.waiting(),
            reloading: view.ops.core.roll.is_some(),
            migration: view.groups.bpf_loaded() && crate::bpf::kernel_migrates(),
            queue_depth: reads::queue_depth(view.cfg, view.groups),
            queue_patience_us: reads::queue_patience_us(view.cfg, view.groups),
            conn_steering: reads::conn_steering(view.cfg, view.groups),
            exits_watched: view.inputs.exit_watch.as_ref().map(|w| w.watched()),
            nice: crate::os::priority::own_nice(),
            workers: view.cfg.workers,
            stop_signal: view.cfg.stop_signal.name().to_string(),
            drain_timeout_ms: view.cfg.drain_timeout.as_millis() as u64,
            keep_previous_ms: view.cfg.keep_previous.map(|d| d.as_millis() as u64),
            canary: view
                .ops
                .core
                .roll
                .as_ref()
                .and_then(|r| r.canary.as_ref())
                .map(|c| canary_line(c, view.ops, view.groups, view.table)),
            metrics: self.metrics_addr.map(|a| a.to_string()),
            slots,
            version: crate::VERSION.to_string(),
            upgrades: view.continuity.upgrades,
            last_upgrade: view.continuity.last_upgrade.clone(),
            connection_count,
            connection_hook: view.groups.tcp().find_map(|g| {
                crate::bpf::conns::ConnHook::pinned(&crate::bpf::pins::group_dir(
                    &view.cfg.name,
                    &g.name,
                ))
                .map(str::to_string)
            }),
            quiet_wait: view.ops.quiet.report(view.cfg, view.groups, view.table),
            host_drained,
            udp: super::udp_rates::reports(
                view.groups,
                &indices,
                view.cfg.udp_mode.name(),
                &self.udp_rates,
                Instant::now(),
            ),
        }
    }
}

/// `ck status`'s line on the canary of the reload in progress: its state, size and share, and
/// with limits, what the kernel counted for it so far against them.
fn canary_line(
    c: &crate::supervisor::fleet::canary::CanaryRoll,
    ops: &Operations,
    groups: &Groups,
    table: &SlotTable,
) -> String {
    let state = match c.judging() {
        true => "judged",
        false => "starting",
    };
    let by = match c.by_client() {
        true => "client",
        false => "connection",
    };
    // What the kernel's maps give it, beside what was asked.
    let given = match reads::canary_share(ops, groups, table) {
        Some(share) => format!(
            " ({:.1} % in the maps, the current release {:.1} %)",
            share * 100.0,
            (1.0 - share) * 100.0
        ),
        None => String::new(),
    };
    let mut line = format!(
        "{state}: {} worker(s), {} % of new connections by {by}{given}, for {} s",
        c.size,
        c.ask.percent,
        c.ask.for_ms as f64 / 1000.0
    );
    if c.ask.limits.any() {
        line.push_str(&format!(", withdrawn past {}", c.ask.limits.describe()));
    }
    if let Some(watch) = &ops.canary_watch {
        line.push_str(&format!("; so far {}", watch.so_far(groups, table)));
    }
    line
}
