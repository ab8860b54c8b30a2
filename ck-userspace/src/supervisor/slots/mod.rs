//! The slot table: the slots and their workers, and what a worker's process is given (its
//! cgroup, the output hub, the open-file limit). The rule: a `Slot` comes to be only through
//! `World::open` (the fleet executor opens slots, and the supervisor reopens those whose
//! worker is gone while ck was down), `Slot::restore` (continuity takes a slot
//! back) or `Slot::member` (`--adopt`'s further listeners), a `Worker` only through
//! `Worker::spawned`, `Worker::member` or `Worker::restored` (the restoring constructors live
//! with the handover's records, in `continuity::restore`); a slot's state changes only through
//! the lifecycle machine. The table holds its own types and the pure core's only: spawning a
//! worker is the supervisor's `spawn`, and nothing here takes the supervisor.

pub(super) mod boot_mistake;
pub(super) mod cgroups;
pub(super) mod slot;
pub(super) mod trees;

use std::collections::BTreeMap;

use crate::supervisor::{fleet, output};
use slot::{Slot, Worker};

/// The slots and their workers.
pub(in crate::supervisor) struct SlotTable {
    /// Every slot, by index.
    pub slots: BTreeMap<u32, Slot>,
    /// The id the next worker gets (`CK_WORKER_ID`).
    pub next_worker_id: u64,
    /// The instance's cgroup (workers each get one under it), where the host allows.
    pub cgroups: Option<crate::os::cgroup::InstanceCgroup>,
    /// Cgroups of exited workers, killed and waiting to be empty to be removed.
    pub dead_cgroups: Vec<crate::os::cgroup::WorkerCgroup>,
    /// The open-file limit ck was started with (the workers get it back; ck raised its own).
    pub fd_limit: Option<crate::os::fd_limit::FdLimit>,
    /// `--worker-output capture`: the readers and writer of the workers' output.
    pub output: Option<output::Hub>,
}

impl SlotTable {
    /// Every slot's life, in index order.
    pub fn lives(
        &self,
    ) -> impl Iterator<Item = (u32, &crate::supervisor::lifecycle::Life)> + Clone {
        self.slots.iter().map(|(index, slot)| (*index, &slot.life))
    }

    /// The lowest slot index not in use.
    pub fn free_slot(&self) -> Option<u32> {
        fleet::free_slot(&fleet::lives(self.lives()))
    }

    /// Slots that count towards the fleet size (not leaving, not a roll's standby).
    pub fn serving(&self) -> Vec<u32> {
        fleet::serving(&fleet::lives(self.lives()))
    }

    /// The worker running on slot `index`, if any.
    pub fn worker(&self, index: u32) -> Option<&Worker> {
        self.slots.get(&index)?.worker.as_ref()
    }

    /// The worker running on slot `index`, if any, to change.
    pub fn worker_mut(&mut self, index: u32) -> Option<&mut Worker> {
        self.slots.get_mut(&index)?.worker.as_mut()
    }

    /// The live worker of slot `index` if it is worker `id`, to change.
    pub fn worker_of_mut(&mut self, index: u32, id: u64) -> Option<&mut Worker> {
        self.slots.get_mut(&index)?.worker_of_mut(id)
    }

    /// Whether some slot is leaving (health ticks come every `groups::held::CHECK_EVERY`
    /// meanwhile).
    pub fn any_leaving(&self) -> bool {
        self.slots.values().any(|s| {
            matches!(
                s.life.state,
                crate::supervisor::lifecycle::State::Leaving(_)
            )
        })
    }

    /// Whether some slot's worker is stopping (with UDP groups, health ticks come every
    /// `groups::held::LINGER_CHECK_EVERY` meanwhile).
    pub fn any_stopping(&self) -> bool {
        self.slots.values().any(|s| {
            matches!(
                s.life.state,
                crate::supervisor::lifecycle::State::Stopping(..)
            )
        })
    }
}
