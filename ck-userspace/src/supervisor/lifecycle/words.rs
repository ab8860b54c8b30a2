//! The machine's vocabulary: the [`Input`]s it is fed, the [`Timer`]s it arms, the signals
//! ([`Sig`]) it sends and the [`Note`]s (log lines) it writes.
use std::time::Duration;

/// A timer the machine arms; it comes back as [`Input::Timer`] with the epoch it was armed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Timer {
    /// `--ready auto`: a worker silent on `NOTIFY_SOCKET` this long is looked at again (the
    /// supervisor answers with [`Input::Ready`] only if it cannot see whether it accepts).
    ReadyGrace,
    /// A worker not ready by now is killed and its exit counts as a boot crash.
    ReadyTimeout,
    /// A stopping worker still alive now gets SIGKILL.
    Kill,
    /// Start a worker on the slot (after a backoff or the breaker's cool-down).
    Restart,
    /// A leaving worker still holding connections (or unread datagrams, or QUIC handshakes)
    /// now gets the stop signal.
    Linger,
    /// `--keep-previous`: the window of a kept worker of the previous release ended: it leaves.
    KeptUntil,
}

/// Signals the machine sends to the slot's worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sig {
    /// Stop gracefully: `--stop-signal` (SIGTERM unless told otherwise).
    Term,
    /// Stop now.
    Kill,
}

/// Something that happened to a slot, or a decision about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Open the slot: spawn its first worker.
    Start,
    /// The executor spawned worker `id` (answer to [`Effect::Spawn`]).
    Spawned {
        /// The worker's id.
        id: u64,
    },
    /// `--adopt`: the supervisor holds a copy of the worker's own listening socket of every
    /// group: they become the slot's ([`Effect::Install`]); any the slot held before (a dead
    /// worker's) are closed after the publish, so what was queued on them migrates.
    Adopted,
    /// `--adopt`: the process holding the slot's adopted socket (a child of the worker, not the
    /// worker) exited: the slot gives the socket up and waits for the tree's next listener.
    Unadopted,
    /// Spawning failed; `socket_open` says whether the slot's sockets are open now.
    SpawnFailed {
        /// Whether the sockets are open.
        socket_open: bool,
    },
    /// The worker is ready (`READY=1`, the grace, a probe, `--ready spawn`).
    Ready {
        /// Why it counts as ready.
        why: String,
        /// Whether its health signals are all good now.
        healthy: bool,
    },
    /// The worker said `STOPPING=1`.
    WorkerDraining,
    /// The worker's health verdict changed.
    Health {
        /// The new verdict.
        healthy: bool,
        /// What changed it.
        why: String,
    },
    /// The worker exited; `outside`: killed by a signal only others send (SIGKILL, SIGTERM,
    /// SIGINT).
    Exited {
        /// Killed from outside.
        outside: bool,
    },
    /// The worker died and a ready spare took the slot's place (flipped in in the same batch):
    /// the slot leaves instead of restarting.
    Superseded,
    /// `ck drain` (true) or `ck undrain` (false).
    Drain(bool),
    /// A roll flips this standby replacement in; `ck rollback` flips a kept worker of the
    /// previous release back in.
    FlipIn,
    /// `ck reload --canary`: this standby replacement goes into the active set as a canary,
    /// beside the current release (see [`super::Life::canary`]).
    FlipInCanary,
    /// The canary's verdict: this canary worker joins the fleet for good.
    Promote,
    /// `--keep-previous`: a roll flipped this worker out; it stays alive, its socket open, out
    /// of the active set, for this window (a worker that never became ready retires instead).
    Keep(Duration),
    /// `--spares`: this ready spare takes the place of a dead worker's slot (which gets
    /// [`Input::Superseded`] in the same batch): flipped in, drained if that slot was.
    TakeOver {
        /// The dead worker's slot was drained (`ck drain` holds through the take-over).
        drained: bool,
    },
    /// The maps were replaced (the BPF program was loaded, or loaded again on pinned maps):
    /// write the active set and every record again.
    Republish,
    /// Leave for good (scale down, replaced by a roll, aborted replacement). A serving worker
    /// leaves once what it was given is done (see [`Settings::linger`]).
    Retire(String),
    /// What a leaving worker was given is done: its connections (none open, or those left stay
    /// open: keep-alive pools, streams, which its stop signal is the cue to close), and what
    /// its UDP sockets held at the flip (read; see `fleet::leave`).
    Finished(String),
    /// ck is shutting down.
    Shutdown(String),
    /// Kill the worker now (a second SIGINT).
    KillNow,
    /// `--udp-linger`: a stopping worker's slot has received no datagram (and held no TCP
    /// connection) for the linger: its flows are done, so it is killed now rather than at the
    /// stop timeout.
    Quiet(String),
    /// The group needs this slot to keep trying (`--min-workers`, after the fleet shrank):
    /// an open breaker turns half-open.
    Needed,
    /// `ck reload` (or SIGHUP) on a slot without a worker (waiting out a backoff, holding the
    /// group's last socket, or with its breaker open): a fresh worker now, its earlier boot
    /// crashes forgotten (the app may have been fixed).
    Revive,
    /// A timer armed in epoch `.1` fired.
    Timer(Timer, u64),
}

/// Why the machine writes a log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// A worker was started.
    Started,
    /// It is ready.
    Ready(String),
    /// Out of the active set, socket open (drain, `STOPPING=1`).
    Draining(String),
    /// Back in the active set after a drain.
    Undrained,
    /// A health signal failed.
    Unhealthy(String),
    /// Healthy again.
    Healthy(String),
    /// A standby replacement flipped in.
    FlippedIn,
    /// A standby replacement went in as a canary.
    CanaryIn,
    /// A canary worker was promoted.
    Promoted,
    /// Flipped out by a roll and kept for `ck rollback` for this window (`--keep-previous`).
    Kept(Duration),
    /// Out of the active set for good; the stop signal follows once what it was given is done.
    Leaving(String),
    /// SIGTERM sent.
    Stopping(String),
    /// Killed: not ready within `--ready-timeout`.
    NotReadyInTime(Duration),
    /// Killed: still running at the stop timeout (`--drain-timeout`).
    KilledAtStopTimeout,
    /// Killed: stopping, and its slot quiet for `--udp-linger`.
    KilledQuiet(String),
    /// It had served: replaced at once.
    RestartNow,
    /// A boot crash: restart after the backoff.
    RestartIn(Duration),
    /// Restarting now (the backoff or cool-down ended).
    Restarting,
    /// Restarting now, without waiting out a backoff or cool-down: `ck reload`.
    Revived,
    /// The breaker opened.
    BreakerOpen {
        /// Boot crashes that opened it.
        crashes: u32,
        /// The cool-down.
        cooldown: Duration,
    },
    /// The breaker would open but the group needs the slot: kept trying.
    HalfOpen {
        /// The delay of every try.
        every: Duration,
        /// `--min-workers`.
        min_workers: u32,
    },
    /// The last socket of its group: kept open for the replacement.
    Held,
    /// The worker's own listening socket was adopted.
    Adopted,
    /// The slot left the fleet.
    Retired,
    /// A standby replacement died: not restarted (the roll aborts).
    StandbyFailed,
}
