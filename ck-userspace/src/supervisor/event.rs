//! What the event loop hears ([`Event`]): every task (child waiters, notify readers, timers,
//! probes, the control server's calls go elsewhere) only sends one of these, and the loop
//! (`event_loop`) routes each to the part it concerns. A leaf: the parts that start such tasks
//! name it without naming the loop.

/// Something that happened, for the event loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// A worker process ended.
    Exited {
        slot: u32,
        worker: u64,
        status: std::io::Result<std::process::ExitStatus>,
    },
    /// A watched worker's last thread is exiting (the exit watch).
    Exiting(ck_common::exits::ExitEvent),
    /// The exit watch is loaded.
    ExitWatch(crate::bpf::exits::ExitWatch),
    /// A worker sent notify messages.
    Notify {
        slot: u32,
        worker: u64,
        msgs: Vec<crate::os::notify::NotifyMsg>,
    },
    /// A slot's worker became ready (a roll may flip its batch).
    BecameReady(u32),
    /// Slots changed during a roll (its old workers may all have been told to stop).
    RollCheck,
    /// `--spares`: time to boot spares again after one died unused.
    SpareDue,
    /// The boot window ends: starting workers are chosen no more (`fleet::spread`).
    SpreadEnds,
    /// `--slow-start`: a ramping slot's weight grew: write the active set again.
    SlowStartStep,
    /// `--slow-start`: the roll waited for its last batch's ramp: it goes on.
    RollNext,
    /// `ck reload --canary`: the window of the canary whose first worker has this id ended:
    /// its verdict.
    CanaryVerdict(u64),
    /// Time to compare the canary's kernel counts with its limits (`operations::canary_watch`).
    CanaryCheck,
    /// A worker turned unhealthy or drains (a canary's is withdrawn).
    Faltered {
        /// Its slot.
        slot: u32,
        /// Why.
        why: String,
    },
    /// A timer the lifecycle armed (in epoch `epoch`) fired.
    Timer {
        slot: u32,
        epoch: u64,
        timer: crate::supervisor::lifecycle::Timer,
    },
    /// A termination signal arrived.
    Signal(&'static str),
    /// Time to read the counters during a stop's quiet wait.
    QuietTick,
    /// SIGHUP: rolling restart (with `--config`, after reading the file again).
    Reload,
    /// SIGTTIN (+1) or SIGTTOU (-1): change the worker count by one.
    ScaleBy(i32),
    /// Time to sample accept queues and check heartbeats.
    Tick,
    /// Time to probe every worker.
    ProbeTick,
    /// A probe ended.
    ProbeResult {
        slot: u32,
        worker: u64,
        result: Result<crate::os::probe::ProbeAnswer, String>,
    },
    /// Time to check that every group's program steers (the canary).
    SteeringCheck,
    /// `--adopt`: time to look for listeners of the workers' trees not adopted yet.
    AdoptScan,
    /// Time to look at what listens: listeners on the fleet's ports that are not ck's, and
    /// what the workers listen on by themselves.
    ListenScan,
    /// Time to remove the cgroups of exited workers that are empty now.
    CgroupReap,
    /// Time to see which workers `--max-requests` / `--max-memory` recycle.
    RecycleCheck,
    /// `--adopt`: a process of the instance's cgroup started to listen.
    Listened(ck_common::ListenEvent),
    /// `--adopt`: the process of a member slot exited.
    MemberExited { slot: u32, worker: u64 },
    /// `--adopt`: the process holding a root slot's socket (not the worker) exited.
    HolderExited { slot: u32, worker: u64 },
    /// Time to send the service manager `WATCHDOG=1` (from the event loop: a stuck loop
    /// misses it).
    SystemdWatchdog,
    /// `ck upgrade` without a client: SIGUSR2.
    Upgrade,
    /// The candidate binary of an upgrade answered its check.
    UpgradeChecked(Result<crate::control::compat::Compat, String>),
    /// A steering canary came back (`connected`: the kernel, not the program, chose).
    Canary {
        group: usize,
        before: u64,
        connected: std::io::Result<bool>,
    },
}
