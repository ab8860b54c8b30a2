//! Scaling (`ck scale N`, `SIGTTIN` +1, `SIGTTOU` -1) and slot opening, by the fleet core's
//! decisions ([`crate::supervisor::fleet::scale`]) through the fleet executor. Workers scaled away leave
//! gracefully (SIGTERM, then SIGKILL only after the stop timeout), never killed outright.
use ck_common::SlotInfo;

use crate::supervisor::{Supervisor, executor::fleet as run_fleet, fleet};

impl Supervisor {
    /// Opens a new serving slot and starts its worker. Errors when no slot is free or the
    /// worker could not be started.
    pub(in crate::supervisor) fn open_slot(&mut self) -> Result<u32, String> {
        run_fleet::open_slot(self).map_err(|e| e.to_string())
    }

    /// Slots that count towards the fleet size (not leaving, not a roll's standby).
    pub(in crate::supervisor) fn serving_slots(&self) -> Vec<u32> {
        self.table.serving()
    }

    /// Changes the fleet to `target` workers: new slots start workers; the slots that keep the
    /// least open leave first (see [`crate::supervisor::lifecycle::retire_order`]).
    pub(in crate::supervisor) fn scale_to(&mut self, target: u32) -> Result<String, String> {
        let rolling = self.ops.core.roll.is_some();
        if let Some(why) = fleet::scale::refusal(target, self.stopping, rolling) {
            return Err(why);
        }
        let current = self.serving_slots().len() as u32;
        tracing::info!(from = current, to = target, "scaling");
        run_fleet::scale_to(self, target).map_err(|e| match e {
            Ok(why) => why,
            Err(e) => e.to_string(),
        })?;
        self.cfg.workers = target;
        Ok(format!("scaling from {current} to {target} worker(s)"))
    }

    /// Forgets a slot the machine removed: its map record cleared and counters zeroed for the
    /// next user of the index (its sockets are already closed).
    pub(in crate::supervisor) fn forget_slot(&mut self, index: u32) {
        self.table.slots.remove(&index);
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
