//! Scaling (`ck scale N`, `SIGTTIN` +1, `SIGTTOU` -1) and slot allocation. Workers scaled away
//! are drained and stopped gracefully (SIGTERM, then SIGKILL only after the drain timeout),
//! never killed outright; slots that keep nothing open leave first ([`retire_order`]).
use ck_common::{MAX_SLOTS, SlotInfo};

use super::{
    Supervisor,
    lifecycle::{Input, Life, needed, retire_order},
    slot::Slot,
};
use crate::settings::run_config::MAX_WORKERS;

/// The last slot index is never given to a worker: its probe source port is the steering
/// canary's (see `steering`).
pub(super) const CANARY_SLOT: u32 = MAX_SLOTS - 1;

impl Supervisor {
    /// The lowest slot index not in use.
    pub(super) fn free_slot(&self) -> Option<u32> {
        (0..CANARY_SLOT).find(|i| !self.slots.contains_key(i))
    }

    /// Opens a new serving slot and starts its worker. Errors when no slot is free or the
    /// worker could not be started.
    pub(super) fn open_slot(&mut self) -> Result<u32, String> {
        let index = self.free_slot().ok_or("no free slot left")?;
        // `ck drain --all` holds for new slots too: the host stays out of rotation.
        let mut inputs = vec![(index, Input::Start)];
        if self.host_drained() {
            inputs.insert(0, (index, Input::Drain(true)));
        }
        let life = Life::new(self.cfg.restart, false);
        self.slots.insert(index, Slot::new(index, life));
        match self.apply_all(inputs).spawn_failure() {
            Some(e) => Err(format!("could not start a worker: {e:#}")),
            None => Ok(index),
        }
    }

    /// Slots that count towards the fleet size (not leaving, not a roll's standby).
    pub(super) fn serving_slots(&self) -> Vec<u32> {
        self.slots
            .values()
            .filter(|s| s.life.serving())
            .map(|s| s.index)
            .collect()
    }

    /// Changes the fleet to `target` workers: new slots start workers; the slots that keep the
    /// least open leave first (see [`retire_order`]).
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
        let current = self.serving_slots().len() as u32;
        tracing::info!(from = current, to = target, "scaling");
        if target > current {
            for _ in current..target {
                self.open_slot()?;
            }
        } else {
            let victims = retire_order(self.lives())
                .into_iter()
                .take((current - target) as usize)
                .map(|index| (index, Input::Retire("scaled down".into())))
                .collect();
            self.apply_all(victims);
            // A broken slot left among fewer slots may now be one the group needs.
            let needed = needed(self.lives(), self.settings.min_workers)
                .into_iter()
                .map(|index| (index, Input::Needed))
                .collect();
            self.apply_all(needed);
        }
        self.cfg.workers = target;
        Ok(format!("scaling from {current} to {target} worker(s)"))
    }

    /// Forgets a slot the machine removed: its map record cleared and counters zeroed for the
    /// next user of the index (its sockets are already closed).
    pub(super) fn forget_slot(&mut self, index: u32) {
        self.slots.remove(&index);
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
