//! Scaling (`ck scale N`, `SIGTTIN` +1, `SIGTTOU` -1), slot allocation and slot retirement.
//! A worker scaled away is drained and stopped gracefully (SIGTERM, then SIGKILL only after the
//! drain timeout), never killed outright.
use ck_common::{MAX_SLOTS, SlotInfo};

use super::{Supervisor, slot::Slot};
use crate::config::MAX_WORKERS;

impl Supervisor {
    /// A slot with this instance's crash policy.
    pub(super) fn new_slot(&self, index: u32) -> Slot {
        Slot::new(index, self.cfg.restart)
    }

    /// The lowest slot index not in use.
    pub(super) fn free_slot(&self) -> Option<u32> {
        (0..MAX_SLOTS).find(|i| !self.slots.contains_key(i))
    }

    /// Workers that count towards the fleet size (not leaving, not a roll's standby).
    pub(super) fn serving_slots(&self) -> Vec<u32> {
        self.slots
            .values()
            .filter(|s| !s.retiring && !s.held)
            .map(|s| s.index)
            .collect()
    }

    /// Changes the fleet to `target` workers: new slots start workers; the highest slots are
    /// drained and stopped.
    pub(super) fn scale_to(&mut self, target: u32) -> Result<String, String> {
        if self.stopping {
            return Err("ck is stopping".into());
        }
        if self.roll.is_some() {
            return Err("a rolling restart is in progress; scale after it ends".into());
        }
        if !(1..=MAX_WORKERS).contains(&target) {
            return Err(format!(
                "{target} workers is out of range: give a number from 1 to {MAX_WORKERS}"
            ));
        }
        let serving = self.serving_slots();
        let current = serving.len() as u32;
        tracing::info!(from = current, to = target, "scaling");
        if target > current {
            for _ in current..target {
                let Some(index) = self.free_slot() else {
                    return Err("no free slot left".into());
                };
                let slot = self.new_slot(index);
                self.slots.insert(index, slot);
                if let Err(e) = self.start_worker(index) {
                    self.remove_slot(index);
                    return Err(format!("could not start a worker: {e:#}"));
                }
            }
        } else {
            for index in serving.iter().rev().take((current - target) as usize) {
                self.mark_retiring(*index, "scaled down");
                self.stop_worker(*index, "scaled down");
            }
            self.publish();
        }
        self.cfg.workers = target;
        Ok(format!("scaling from {current} to {target} worker(s)"))
    }

    /// Marks a slot as leaving: out of the active set at the next publish; removed when its
    /// worker exits (at once if it has none).
    pub(super) fn mark_retiring(&mut self, index: u32, reason: &'static str) {
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        slot.retiring = true;
        if slot.worker.is_none() {
            tracing::info!(slot = index, reason, "slot retired");
            self.remove_slot(index);
        }
    }

    /// Forgets a slot: out of the maps, socket closed, record cleared.
    pub(super) fn remove_slot(&mut self, index: u32) {
        self.slots.remove(&index);
        self.publish();
        for group in &mut self.groups {
            if let Some(bpf) = &mut group.bpf {
                bpf.remove(index);
                bpf.reset_stats(index);
                if let Err(e) = bpf.write_slot(index, &SlotInfo::default()) {
                    tracing::error!(group = %group.name, "{e}");
                }
            }
        }
    }
}
