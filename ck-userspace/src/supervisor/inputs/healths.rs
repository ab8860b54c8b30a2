//! Every worker's health signals, kept by the input sources that set them and keyed by slot:
//! [`Healths`] holds, for each slot, the signals of the worker it runs now (a new worker in the
//! slot starts healthy). The reports, the recycling check and the handover read them here.
use std::{collections::BTreeMap, time::Instant};

use crate::supervisor::slots::slot::Slot;

/// A worker's health as the supervisor sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// Missed its watchdog heartbeat.
    pub watchdog: bool,
    /// Failed `--probe-fails` probes in a row.
    pub probe: bool,
    /// Its accept queue stopped moving.
    pub stalled: bool,
    /// When it became unhealthy.
    #[serde(with = "crate::supervisor::lifecycle::instant_age::option")]
    pub since: Option<Instant>,
    /// Last `WATCHDOG=1`.
    #[serde(with = "crate::supervisor::lifecycle::instant_age::option")]
    pub last_watchdog: Option<Instant>,
    /// Consecutive failed probes.
    pub probe_fails: u32,
    /// Consecutive passed probes.
    pub probe_passes: u32,
    /// A probe is under way.
    pub probing: bool,
}

impl Health {
    /// No health signal says otherwise.
    pub fn is_healthy(&self) -> bool {
        !self.watchdog && !self.probe && !self.stalled
    }

    /// Why it is unhealthy, for logs and status.
    pub fn reasons(&self) -> String {
        let mut reasons = Vec::new();
        if self.watchdog {
            reasons.push("watchdog");
        }
        if self.probe {
            reasons.push("probe");
        }
        if self.stalled {
            reasons.push("stalled");
        }
        reasons.join("+")
    }
}

/// The health of each slot's current worker: slot -> (worker id, its health).
#[derive(Debug, Default)]
pub struct Healths {
    by_slot: BTreeMap<u32, (u64, Health)>,
}

impl Healths {
    /// Health that an earlier ck handed over: (slot, worker id, health) each.
    pub fn restored(saved: impl IntoIterator<Item = (u32, u64, Health)>) -> Healths {
        let by_slot = saved
            .into_iter()
            .map(|(index, id, health)| (index, (id, health)))
            .collect();
        Healths { by_slot }
    }

    /// Worker `id` of slot `index`'s health (healthy until a signal says otherwise).
    pub fn of(&self, index: u32, id: u64) -> Health {
        match self.by_slot.get(&index) {
            Some((worker, health)) if *worker == id => *health,
            _ => Health::default(),
        }
    }

    /// [`Healths::of`], to change: a worker the slot did not run before starts healthy.
    pub fn of_mut(&mut self, index: u32, id: u64) -> &mut Health {
        let entry = self.by_slot.entry(index).or_insert((id, Health::default()));
        if entry.0 != id {
            *entry = (id, Health::default());
        }
        &mut entry.1
    }

    /// The health of the worker `slot` runs now (None: it runs none).
    pub fn of_worker(&self, slot: &Slot) -> Option<Health> {
        Some(self.of(slot.index, running(slot)?))
    }

    /// [`Healths::of_worker`], to change.
    pub fn of_worker_mut(&mut self, slot: &Slot) -> Option<&mut Health> {
        Some(self.of_mut(slot.index, running(slot)?))
    }

    /// Forgets the slots whose worker is no longer the one `runs` names (slot -> the id of
    /// the worker it runs now, if any): a worker that is gone leaves nothing behind.
    pub fn keep_only(&mut self, runs: impl Fn(u32) -> Option<u64>) {
        self.by_slot
            .retain(|index, (id, _)| runs(*index) == Some(*id));
    }
}

/// The id of the worker `slot` runs now, if it runs one.
pub fn running(slot: &Slot) -> Option<u64> {
    slot.worker.as_ref().and(slot.worker_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_worker_in_a_slot_starts_healthy_and_a_gone_one_is_forgotten() {
        let mut healths = Healths::default();
        healths.of_mut(3, 7).stalled = true;
        assert!(!healths.of(3, 7).is_healthy());
        assert_eq!(healths.of(3, 7).reasons(), "stalled");
        // Another worker of the slot, and another slot: healthy.
        assert!(healths.of(3, 8).is_healthy());
        assert!(healths.of(4, 7).is_healthy());
        // Changing the new worker's health drops the old one's.
        healths.of_mut(3, 8).probe_fails = 1;
        assert!(healths.of(3, 7).is_healthy());
        assert_eq!(healths.of(3, 8).probe_fails, 1);
        healths.keep_only(|index| (index == 3).then_some(9));
        assert_eq!(healths.of(3, 8), Health::default());
        assert!(healths.by_slot.is_empty());
    }

    #[test]
    fn handed_over_health_is_the_workers_own() {
        let saved = Health {
            watchdog: true,
            ..Health::default()
        };
        let healths = Healths::restored([(0, 5, saved)]);
        assert_eq!(healths.of(0, 5), saved);
        assert!(healths.of(0, 6).is_healthy());
    }
}
