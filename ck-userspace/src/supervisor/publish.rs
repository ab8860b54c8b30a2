//! Keeping the BPF maps true to the fleet (active set, slot records) and reporting the fleet's
//! state to `ck status`.
use ck_common::{ActiveSet, MAX_SLOTS, SlotInfo, SlotStats};

use super::Supervisor;
use crate::control::{SlotReport, StatusReport};

impl Supervisor {
    /// The active set as the fleet stands: ready slots first, then live non-ready ones (the
    /// fallback when nothing is ready). While stopping, the set is empty: new connections are
    /// refused rather than queued on a worker that is leaving.
    fn active_set(&self) -> ActiveSet {
        let mut set = ActiveSet::EMPTY;
        if self.stopping {
            return set;
        }
        let ready = self.slots.values().filter(|s| s.is_active());
        let fallback = self
            .slots
            .values()
            .filter(|s| s.is_live() && !s.is_active());
        let mut len = 0usize;
        for slot in ready {
            set.slots[len] = slot.index;
            len += 1;
        }
        set.ready_len = len as u32;
        for slot in fallback {
            set.slots[len] = slot.index;
            len += 1;
        }
        set.live_len = len as u32;
        set
    }

    /// Writes the active set and every slot record to every group's maps.
    pub(super) fn publish(&mut self) {
        let set = self.active_set();
        let active: Vec<u32> = set.slots[..set.ready_len as usize].to_vec();
        if active.is_empty() && !self.active.is_empty() && set.live_len > 0 {
            tracing::warn!(
                live = set.live_len,
                "no ready and healthy worker left: new connections fall back to every live worker"
            );
        }
        if active != self.active {
            tracing::debug!(?active, "active set");
            self.active = active;
        }
        let records: Vec<(u32, SlotInfo)> =
            self.slots.values().map(|s| (s.index, s.info())).collect();
        for group in &mut self.groups {
            let Some(bpf) = &mut group.bpf else { continue };
            for (index, info) in &records {
                if let Err(e) = bpf.write_slot(*index, info) {
                    tracing::error!(group = %group.name, "{e}");
                }
            }
            if let Err(e) = bpf.publish(&set) {
                tracing::error!(group = %group.name, "{e}");
            }
        }
    }

    /// Writes the records of `indices` (after their queue depth changed).
    pub(super) fn write_depths(&mut self, indices: &[u32]) {
        for index in indices {
            let Some(info) = self.slots.get(index).map(|s| s.info()) else {
                continue;
            };
            for bpf in self.groups.iter_mut().filter_map(|g| g.bpf.as_mut()) {
                let _ = bpf.write_slot(*index, &info);
            }
        }
    }

    pub(super) fn slot_stats(&self, index: u32) -> SlotStats {
        let mut total = SlotStats::default();
        for bpf in self.groups.iter().filter_map(|g| g.bpf.as_ref()) {
            total.add(&bpf.stats(index));
        }
        total
    }

    /// The report `ck status` prints.
    pub(super) fn status(&self) -> StatusReport {
        let slots = self
            .slots
            .values()
            .map(|s| {
                let stats = self.slot_stats(s.index);
                SlotReport {
                    slot: s.index,
                    pid: s.worker.as_ref().map(|w| w.pid),
                    state: s.state_name().to_string(),
                    drained: s.drained,
                    uptime_ms: s
                        .worker
                        .as_ref()
                        .map(|w| w.started.elapsed().as_millis() as u64)
                        .unwrap_or(0),
                    restarts: s.restarts,
                    generation: s.generation,
                    selected: stats.selected,
                    fallbacks: stats.fallbacks,
                    migrated: stats.migrated,
                    last_exit: s.last_exit.clone(),
                    status: s.worker.as_ref().and_then(|w| w.status.clone()),
                    unhealthy: s
                        .worker
                        .as_ref()
                        .filter(|w| !w.health.is_healthy())
                        .map(|w| w.health.reasons()),
                    queue_depth: s.queue_depth,
                    probe_hits: stats.probe_hits,
                    breaker: if s.idle == super::slot::Idle::Broken && s.worker.is_none() {
                        "open".into()
                    } else {
                        "closed".into()
                    },
                }
            })
            .collect();
        StatusReport {
            name: self.cfg.name.clone(),
            pid: std::process::id(),
            bpf: self.bpf_on(),
            policy: self.cfg.policy,
            groups: self.group_names(),
            listen: self
                .groups
                .iter()
                .map(|g| g.addr.addr.to_string())
                .collect(),
            probe: self.cfg.health.probe.as_ref().map(|p| p.to_string()),
            probe_port_base: self.cfg.health.probe_port_base,
            pins: self.bpf_on().then(|| {
                crate::bpf::pins::instance_dir(&self.cfg.name)
                    .display()
                    .to_string()
            }),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            active: self.active.clone(),
            dropped: self.slot_stats(MAX_SLOTS).errors,
            stopping: self.stopping,
            reloading: self.roll.is_some(),
            migration: self.bpf_on() && crate::bpf::kernel_migrates(),
            workers: self.cfg.workers,
            slots,
        }
    }
}
