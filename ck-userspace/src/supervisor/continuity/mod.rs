//! How a fleet outlives the ck process that runs it: `ck upgrade` (re-exec in place with a
//! handover), `--survive-supervisor` (a state file, the take-back by the next `ck run`, and the
//! orphan guard), and where a run starts from (fresh, a handover, a dead ck's state). The rule:
//! a fleet taken back is built as a `resume::Restored` value (its slots, then what to watch,
//! arm and start) from a handover and what the running ck lends (`resume::Restorer`); a
//! handover is written from a read-only view. The supervisor's top (`carry_on`) puts them in
//! place; nothing here takes the supervisor.
pub(super) mod handover;
pub(super) mod origin;
pub mod orphan_guard;
pub(super) mod output_back;
pub(super) mod restore;
pub(super) mod resume;
pub(super) mod survive;
pub(super) mod upgrade;

use std::time::{Duration, Instant};

use crate::supervisor::lifecycle::Timer;

/// What outlives one image of ck.
pub(in crate::supervisor) struct Continuity {
    /// The binary ck was first started from (the default of `ck upgrade`).
    pub exe: std::path::PathBuf,
    /// Upgrades in place so far.
    pub upgrades: u32,
    /// The upgrade under way.
    pub upgrade: Option<upgrade::Upgrade>,
    /// How the last upgrade went (for `ck status`).
    pub last_upgrade: Option<String>,
    /// Lifecycle timers armed and not fired yet (handed over by an upgrade).
    pub timers: Vec<handover::Armed>,
    /// The program being loaded is for maps an earlier image pinned and filled (`ck upgrade`,
    /// or a ck that died, with `--survive-supervisor`).
    pub bpf_resumed: bool,
    /// The state changed since the state file was last written (`--survive-supervisor`).
    pub state_dirty: bool,
}

/// What continuity reads of the running supervisor to write a handover or judge an upgrade:
/// the parts it reads, borrowed read-only (`Supervisor::parts`).
#[derive(Clone, Copy)]
pub(in crate::supervisor) struct Parts<'a> {
    pub cfg: &'a crate::settings::run_config::RunConfig,
    /// ck is shutting down.
    pub stopping: bool,
    pub table: &'a crate::supervisor::slots::SlotTable,
    /// The workers' health signals (kept by the inputs).
    pub healths: &'a crate::supervisor::inputs::healths::Healths,
    pub groups: &'a crate::supervisor::groups::Groups,
    pub ops: &'a crate::supervisor::operations::Operations,
    pub continuity: &'a Continuity,
}

impl Continuity {
    /// Notes a lifecycle timer armed for `delay` (see [`handover::Armed`]).
    pub fn note_timer(&mut self, slot: u32, epoch: u64, timer: Timer, delay: Duration) {
        self.timers.push(handover::Armed {
            slot,
            epoch,
            timer,
            at: Instant::now() + delay,
        });
    }

    /// Forgets a timer that fired.
    pub fn timer_fired(&mut self, slot: u32, epoch: u64, timer: Timer) {
        if let Some(i) = self
            .timers
            .iter()
            .position(|a| a.slot == slot && a.epoch == epoch && a.timer == timer)
        {
            self.timers.swap_remove(i);
        }
    }

    /// Whether a checked upgrade waits for the loop to exec it.
    pub fn exec_due(&self) -> bool {
        self.upgrade.as_ref().is_some_and(|u| u.checked.is_some())
    }
}
