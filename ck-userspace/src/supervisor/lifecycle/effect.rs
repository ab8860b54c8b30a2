//! What a step asks of the world: [`Effect`]s, and the one fixed order the executor runs them in
//! ([`Effect::rank`], [`schedule`]).
use std::time::Duration;

use super::words::{Note, Sig, Timer};

/// What the executor must do, in the order of [`Effect::rank`] whatever the order here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Write a log line.
    Note(Note),
    /// `--adopt`: make the worker's adopted sockets the slot's: into every group's `sockets`
    /// map at the slot's index (attaching the program through one that founds its group);
    /// the sockets they replace are kept until [`Effect::CloseReplaced`].
    Install,
    /// Write the active set and every slot record to every group's maps.
    Publish,
    /// Signal the slot's worker.
    Signal(Sig),
    /// Close the supervisor's copy of the slot's sockets (its queue migrates).
    CloseSockets,
    /// Close the sockets an adoption replaced (a dead worker's held copies).
    CloseReplaced,
    /// Forget the slot (record cleared, counters zeroed).
    Remove,
    /// Open the slot's sockets if closed, spawn a worker, and answer with
    /// [`super::Input::Spawned`] or [`super::Input::SpawnFailed`].
    Spawn,
    /// Arm a timer that answers with [`super::Input::Timer`] after the delay.
    Arm(Timer, Duration, u64),
}

impl Effect {
    /// The fixed order of effects: install adopted sockets, publish the maps, then signal,
    /// then close sockets, then forget, then spawn, then arm timers. In the `sockets` map
    /// before listed, and out of the maps before anything is signalled or closed, hold by this
    /// order, not by call sites.
    pub fn rank(&self) -> u8 {
        match self {
            Effect::Note(_) => 0,
            Effect::Install => 1,
            Effect::Publish => 2,
            Effect::Signal(_) => 3,
            Effect::CloseSockets | Effect::CloseReplaced => 4,
            Effect::Remove => 5,
            Effect::Spawn => 6,
            Effect::Arm(..) => 7,
        }
    }
}

/// Puts effects in their fixed order (stable for equal ranks).
pub fn schedule<T>(effects: &mut [(T, Effect)]) {
    effects.sort_by_key(|(_, e)| e.rank());
}
