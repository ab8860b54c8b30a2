//! The report `ck status` prints, read from the kernel where the kernel holds the truth: the
//! active set and slot records from the maps, counters from `stats`, steering from the last
//! canary, foreign listeners from sock_diag, why the fleet is degraded (`degraded`), open
//! connections from the kernel's counts (else the sock_diag scan), accept-queue depths read
//! when asked (`TCP_INFO`).
use std::{collections::BTreeMap, time::Instant};

use ck_common::MAX_SLOTS;

use crate::bpf::{active::ActiveLists, conn_steering::ConnSteering, queue_depth::QueueDepth};
use crate::control::{GroupSteering, SlotReport, StatusReport};
use crate::supervisor::{
    inputs::{foreign, listens::Listens},
    lifecycle::active_set,
    reports::{Reports, View},
};

impl View<'_> {
    /// Open connections per slot as the kernel counts them (every group's `ck_conns`, summed),
    /// or why it does not count them here.
    pub(in crate::supervisor) fn kernel_connections(&self) -> Result<BTreeMap<u32, u64>, String> {
        let why_not = self.groups.tcp().find_map(|g| match &g.bpf {
            Some(bpf) => bpf.conn_count_fallback().map(str::to_string),
            None if self.cfg.no_bpf => Some("--no-bpf".to_string()),
            None => Some("BPF program not loaded yet".to_string()),
        });
        if let Some(why) = why_not {
            return Err(why);
        }
        Ok(self
            .table
            .slots
            .keys()
            .map(|index| {
                (
                    *index,
                    self.groups.kernel_connections_of(*index).unwrap_or(0),
                )
            })
            .collect())
    }

    /// Open connections per slot, and how they were counted: `kernel` ([`kernel_connections`])
    /// or `scan (WHY)` (sock_diag matched to the workers' fds: the fallback where the kernel does
    /// not count, slower: a readlink per fd of each worker).
    ///
    /// [`kernel_connections`]: View::kernel_connections
    fn open_connections(&self) -> (BTreeMap<u32, u64>, String) {
        match self.kernel_connections() {
            Ok(counts) => (counts, "kernel".to_string()),
            Err(why) => {
                let ports: Vec<u16> = self.groups.iter().map(|g| g.addr.addr.port()).collect();
                let counts = crate::metrics::connections::per_worker(
                    &ports,
                    self.cfg.health.probe_port_base,
                    &self.table.worker_trees(),
                );
                (counts, format!("scan ({why})"))
            }
        }
    }

    /// The active set as the kernel holds it (first group), or as ck computes it without BPF.
    pub(in crate::supervisor) fn active_lists(&self) -> ActiveLists {
        if let Some(lists) = self
            .groups
            .first()
            .and_then(|g| g.bpf.as_ref()?.read_active())
        {
            return lists;
        }
        let set = active_set(self.table.lives(), self.stopping, false);
        ActiveLists::of(&set, |_| None)
    }

    /// What `least-queue` steers by, read back from every group's `config` map (None with
    /// another policy).
    fn queue_depth(&self) -> Option<String> {
        if !self.cfg.policy.reads_queue() {
            return None;
        }
        if self.cfg.no_bpf {
            return Some("none (--no-bpf: the kernel hashes)".into());
        }
        let mut depths = self
            .groups
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
    fn queue_patience_us(&self) -> Option<u64> {
        if !self.cfg.policy.reads_queue() {
            return None;
        }
        let bpf = self.groups.first()?.bpf.as_ref()?;
        bpf.queue_patience()
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }

    /// What `least-conn` compares, read back from the groups' `config` maps (None with another
    /// policy): the first group that does not sum the kernel's counts says why.
    fn conn_steering(&self) -> Option<String> {
        if self.cfg.policy != crate::settings::run_config::Policy::LeastConn {
            return None;
        }
        if self.cfg.no_bpf {
            return Some("none (--no-bpf: the kernel hashes)".into());
        }
        let mut all = self.groups.iter().map(|g| g.bpf.as_ref()?.conn_steering());
        let first_not_kernel = all.find(|s| s.as_ref() != Some(&ConnSteering::Kernel));
        Some(match first_not_kernel {
            None => ConnSteering::Kernel.describe(),
            Some(Some(other)) => other.describe(),
            Some(None) => "not known yet (the BPF program is loading)".into(),
        })
    }

    /// The whole host is out of rotation: the `active` map lists no ready slot, and every slot
    /// with a worker is drained.
    pub(in crate::supervisor) fn host_drained(&self) -> bool {
        let ready = self.active_lists().ready;
        let mut workers = self
            .table
            .slots
            .values()
            .filter(|s| s.worker.is_some())
            .peekable();
        ready.is_empty() && workers.peek().is_some() && workers.all(|s| s.life.drained)
    }
}

impl Reports {
    /// The report `ck status` prints.
    pub(in crate::supervisor) fn status(&self, view: View<'_>) -> StatusReport {
        let (connections, connection_count) = view.open_connections();
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
                    unhealthy: worker
                        .and(s.worker_id())
                        .map(|id| view.inputs.healths.of(s.index, id))
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
        } = view.active_lists();
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
            degraded: view.degraded(&listens),
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
            queue_depth: view.queue_depth(),
            queue_patience_us: view.queue_patience_us(),
            conn_steering: view.conn_steering(),
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
                .map(|c| canary_line(c, &view)),
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
            host_drained: view.host_drained(),
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

impl View<'_> {
    /// The share of new connections the kernel's maps give the canary judged now (None: none
    /// is judged, or no group can tell).
    pub(super) fn canary_share(&self) -> Option<f64> {
        let roll = self.ops.core.roll.as_ref()?;
        let canary = roll.canary.as_ref().filter(|c| c.judging())?;
        let slots: Vec<u32> = canary.pairs.iter().map(|(_, new)| *new).collect();
        self.groups.share_of(self.table, &slots)
    }
}

/// `ck status`'s line on the canary of the reload in progress: its state, size and share, and
/// with limits, what the kernel counted for it so far against them.
fn canary_line(c: &crate::supervisor::fleet::canary::CanaryRoll, view: &View<'_>) -> String {
    let state = match c.judging() {
        true => "judged",
        false => "starting",
    };
    let by = match c.by_client() {
        true => "client",
        false => "connection",
    };
    // What the kernel's maps give it, beside what was asked.
    let given = match view.canary_share() {
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
    if let Some(watch) = &view.ops.canary_watch {
        line.push_str(&format!(
            "; so far {}",
            watch.so_far(view.groups, view.table)
        ));
    }
    line
}
