//! What the lifecycle machine knows of one slot: its [`State`] (one enum, with the worker's run
//! inside the states that have one), the operator's drain, the roll's standby mark (and the kept
//! release's, `--keep-previous`), whether the
//! supervisor's copy of the slot's sockets is open, and the crash policy's memory.
use std::time::Instant;

use ck_common::SlotState;
use serde::{Deserialize, Serialize};

use super::crash::{Breaker, Crash};
use crate::settings::restart_policy::RestartPolicy;

/// One worker process as the machine sees it (the OS handles live in the supervisor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// The worker's id in this instance (`CK_WORKER_ID`): events and timers carry it.
    pub id: u64,
    /// When it was spawned.
    #[serde(with = "crate::supervisor::lifecycle::instant_age")]
    pub started: Instant,
    /// When it first became ready, if it did.
    #[serde(with = "crate::supervisor::lifecycle::instant_age::option")]
    pub ready_at: Option<Instant>,
    /// Its listening sockets are the slot's: always with socket activation (ck made them);
    /// with `--adopt`, once they are adopted. Only then can it be ready.
    pub adopted: bool,
}

/// What a stopping slot becomes when its worker exits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum After {
    /// Nothing: ck is shutting down.
    Idle,
    /// Removed: scaled down, replaced by a rolling restart, or an aborted replacement.
    Retire,
    /// Restarted as after a crash that counts (the worker was killed for not becoming ready).
    Crash,
}

/// Where a slot's life stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// No worker, no socket: not started yet, or stopped by a shutdown.
    Idle,
    /// Worker spawned, not ready: its socket is in the group but not selected.
    Starting(Run),
    /// Worker ready: selected unless the slot is drained or a roll's standby.
    Ready(Run),
    /// Ready worker failing a health signal: not selected, socket open, still probed.
    Unhealthy(Run),
    /// The worker said `STOPPING=1`: not selected, socket open, still serving what it has.
    Draining(Run),
    /// Retired while it serves (a roll replaced it, a scale-down chose it): not selected,
    /// socket open, not signalled yet. The connections it holds finish first: it gets the stop
    /// signal once they are done ([`super::Input::Finished`]) or at the linger's end, so a
    /// server that dies on the signal (no graceful shutdown) fails nothing it was given.
    Leaving(Run),
    /// ck sent the worker SIGTERM (SIGKILL at the stop timeout): not selected, socket open.
    Stopping(Run, After),
    /// No worker; a restart is due (after a backoff). Socket closed.
    Waiting,
    /// No worker; a restart is due; the socket is kept open because it is the last one of its
    /// group: selected only as the last resort, handed to the replacement.
    Held,
    /// No worker; the circuit breaker is open: tried again after the cool-down. Socket closed.
    Broken,
}

impl State {
    /// The worker's run, in the states that have a worker.
    pub fn run(&self) -> Option<Run> {
        match *self {
            State::Starting(run)
            | State::Ready(run)
            | State::Unhealthy(run)
            | State::Draining(run)
            | State::Leaving(run)
            | State::Stopping(run, _) => Some(run),
            State::Idle | State::Waiting | State::Held | State::Broken => None,
        }
    }

    /// The same state with its run replaced (states without a run are returned as they are).
    pub fn with_run(self, run: Run) -> State {
        match self {
            State::Starting(_) => State::Starting(run),
            State::Ready(_) => State::Ready(run),
            State::Unhealthy(_) => State::Unhealthy(run),
            State::Draining(_) => State::Draining(run),
            State::Leaving(_) => State::Leaving(run),
            State::Stopping(_, after) => State::Stopping(run, after),
            other => other,
        }
    }
}

/// Everything the lifecycle machine decides on for one slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Life {
    /// The state.
    pub state: State,
    /// `ck drain` holds the slot out of the active set (survives the worker's restarts).
    pub drained: bool,
    /// A rolling restart's replacement not flipped in yet: never selected, not counted as
    /// serving, not restarted if it dies.
    pub standby: bool,
    /// `--spares`: a hot spare, a standby that takes a dead worker's place (until it does).
    #[serde(default)]
    pub spare: bool,
    /// `--keep-previous`: since when this worker of the release a roll replaced is kept: a
    /// standby, its socket open, not serving, not restarted if it dies, until `ck rollback`
    /// flips it back in ([`super::Input::FlipIn`]) or the window ends
    /// ([`super::Timer::KeptUntil`]) and it leaves like any retired worker.
    #[serde(default, with = "crate::supervisor::lifecycle::instant_age::option")]
    pub kept: Option<Instant>,
    /// `ck reload --canary P`: a worker of the release under judgement, selected for its
    /// share of new connections beside the current release; not serving (it does not count
    /// in the fleet's size) and not restarted if it dies (the canary is withdrawn) until the
    /// verdict promotes it ([`super::Input::Promote`]).
    #[serde(default)]
    pub canary: bool,
    /// `--adopt`: a further listener of the process tree of this root slot's worker (a
    /// forking server), tied to the process holding it: selected like any slot, but not
    /// counted as serving and never restarted (its process is the worker's business); removed
    /// when it exits.
    #[serde(rename = "member", with = "member_wire")]
    pub member_of: Option<u32>,
    /// The supervisor's copy of the slot's sockets is open (the executor keeps the OS true to
    /// this flag).
    pub socket_open: bool,
    /// Backoff and breaker memory.
    pub crash: Crash,
    /// Id of the last worker started here: timers armed for an older one are stale.
    pub epoch: u64,
    /// Workers started on this slot.
    pub generation: u32,
    /// Restarts after an exit.
    pub restarts: u32,
}

impl Life {
    /// A slot that has never run anything.
    pub fn new(policy: RestartPolicy, standby: bool) -> Life {
        Life {
            state: State::Idle,
            drained: false,
            standby,
            spare: false,
            kept: None,
            canary: false,
            member_of: None,
            socket_open: false,
            crash: Crash::new(policy),
            epoch: 0,
            generation: 0,
            restarts: 0,
        }
    }

    /// A hot spare (see [`Life::spare`]).
    pub fn spare(policy: RestartPolicy) -> Life {
        Life {
            spare: true,
            ..Life::new(policy, true)
        }
    }

    /// A member slot of root slot `root` (see [`Life::member_of`]).
    pub fn member(policy: RestartPolicy, root: u32) -> Life {
        Life {
            member_of: Some(root),
            ..Life::new(policy, false)
        }
    }

    /// In the fleet for good: not leaving, not a roll's standby. Only serving slots count
    /// when deciding whether a socket is the last of its group or the breaker may open.
    pub fn serving(&self) -> bool {
        !self.standby && !self.canary && self.member_of.is_none() && !self.leaving()
    }

    /// Retired and not gone yet: its connections finishing, or its worker stopping.
    pub fn leaving(&self) -> bool {
        matches!(
            self.state,
            State::Leaving(_) | State::Stopping(_, After::Retire)
        )
    }

    /// Selected for new connections: a ready worker, not drained, not standby, socket open.
    pub fn selectable(&self) -> bool {
        matches!(self.state, State::Ready(_)) && !self.drained && !self.standby && self.socket_open
    }

    /// A worker of the fleet starting with its socket open: chosen beside the ready ones
    /// while the fleet boots (`fleet::spread`).
    pub fn booting(&self) -> bool {
        matches!(self.state, State::Starting(_))
            && self.serving()
            && !self.drained
            && self.socket_open
    }

    /// Keeps trying to run a worker (its breaker is not open).
    pub fn trying(&self) -> bool {
        self.serving() && self.crash.breaker() != Breaker::Open
    }

    /// The state as shown to people and written to the `slots` map.
    pub fn shown(&self) -> SlotState {
        match self.state {
            State::Idle => SlotState::Stopped,
            State::Ready(_) if self.kept.is_some() => SlotState::Kept,
            State::Ready(_) if self.standby => SlotState::Standby,
            State::Starting(_) => SlotState::Starting,
            State::Ready(_) if self.drained => SlotState::Draining,
            State::Ready(_) => SlotState::Ready,
            State::Unhealthy(_) => SlotState::Unhealthy,
            State::Draining(_) | State::Leaving(_) => SlotState::Draining,
            State::Stopping(..) => SlotState::Stopping,
            State::Waiting => SlotState::Restarting,
            State::Held => SlotState::Held,
            State::Broken => SlotState::Broken,
        }
    }
}

/// On the wire (the handover, the state file) a member is `member: true`, as ck has always
/// written it; its root slot travels beside the life (`SlotHandover::member_of`) and is put
/// back where the slot is restored. Until then the root reads as [`UNKNOWN_ROOT`].
mod member_wire {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(member_of: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(member_of.is_some())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
        Ok(bool::deserialize(d)?.then_some(super::UNKNOWN_ROOT))
    }
}

/// The root of a member slot read from the wire, until the slot is restored with its root.
pub const UNKNOWN_ROOT: u32 = u32::MAX;
