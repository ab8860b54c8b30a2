//! The state a running ck hands to the image it re-executes (`ck upgrade`): a versioned,
//! serialized [`Handover`] (slots with their lifecycle, workers with pid, pidfd and notify
//! socket, pending timers, counters; with `--adopt` the member slots and where each adopted
//! socket lives in the workers) naming the descriptors kept open across `execve` (what a
//! candidate binary must share with it: `compat`).
use std::{
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, RawFd},
    path::PathBuf,
    time::{Instant, SystemTime},
};

use serde::{Deserialize, Serialize};

pub use crate::control::compat::{Compat, FORMAT};
use crate::os::fd_limit::FdLimit;
use crate::supervisor::{
    continuity::Parts, inputs::healths::Health, lifecycle::Life, lifecycle::Timer,
};

/// Everything the new image needs to carry on where the old one stopped.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover {
    /// The writer's compatibility (the reader checks the format again).
    pub compat: Compat,
    /// The binary ck was first started from (the default of the next `ck upgrade`).
    pub exe: PathBuf,
    /// When the old image called `execve` (wall clock: to log how long the exec took).
    pub exec_at: SystemTime,
    /// The instance lock's file.
    pub lock_fd: RawFd,
    /// The control socket's listener.
    pub control_fd: RawFd,
    /// `--metrics`' listener.
    pub metrics_fd: Option<RawFd>,
    /// When the instance started.
    #[serde(with = "crate::supervisor::lifecycle::instant_age")]
    pub started: Instant,
    /// The next worker id.
    pub next_worker_id: u64,
    /// The target worker count (`ck scale` changes it at run time; 0: none recorded).
    #[serde(default)]
    pub workers: u32,
    /// `--stop-signal` as the running ck has it (a reload may have changed it since the
    /// orphan guard started): the orphan guard stops the workers with it.
    #[serde(default)]
    pub stop_signal: Option<String>,
    /// Upgrades done so far (an upgrade's handover counts itself).
    pub upgrades: u32,
    /// Rolling restarts that ended well, and aborted.
    pub reloads: (u64, u64),
    /// Canaries promoted, and withdrawn (none from an image that did not count them).
    #[serde(default)]
    pub canaries: (u64, u64),
    /// `--spares`: spares that died unused in a row, and in how long the next may start.
    pub spare_failures: u32,
    /// Microseconds until the next spare may start.
    pub spare_due_us: Option<u64>,
    /// The open-file limit ck was first started with (for the workers).
    pub fd_limit: Option<FdLimit>,
    /// The instance's cgroup, and whether it has the memory controller.
    pub cgroup: Option<(PathBuf, bool)>,
    /// Cgroups of exited workers waiting to be empty.
    pub dead_cgroups: Vec<(PathBuf, bool)>,
    /// Every slot.
    pub slots: Vec<SlotHandover>,
    /// The lifecycle's timers that had not fired.
    pub timers: Vec<TimerHandover>,
}

/// One slot in a [`Handover`].
#[derive(Debug, Serialize, Deserialize)]
pub struct SlotHandover {
    /// Its index.
    pub index: u32,
    /// Its lifecycle.
    pub life: Life,
    /// Its sockets, in group order (empty while closed).
    pub sockets: Vec<RawFd>,
    /// A hot spare.
    pub spare: bool,
    /// Pid of the last worker.
    pub last_pid: u32,
    /// How the last worker ended.
    pub last_exit: Option<String>,
    /// What the last worker did wrong while starting, if ck could name it.
    #[serde(default)]
    pub boot_mistake: Option<crate::supervisor::slots::boot_mistake::BootMistake>,
    /// Failed probes (`ck_probe_failures_total`).
    pub probe_failures: u64,
    /// Its worker, if one runs.
    pub worker: Option<WorkerHandover>,
    /// Lines of its workers' output dropped so far.
    #[serde(default)]
    pub output_dropped: u64,
    /// `--adopt`: the root slot this member slot belongs to (a further listener of its
    /// worker's process tree).
    #[serde(default)]
    pub member_of: Option<u32>,
    /// `--adopt`, in the `--survive-supervisor` state file: where each of its adopted sockets
    /// (group order) is open in the worker's process tree, for the next ck's `pidfd_getfd`.
    #[serde(default)]
    pub adopted: Vec<AdoptedSocket>,
}

/// Where an adopted socket is open in a worker's process tree (the state file names no
/// descriptor of ck's own: a ck that died had its copies closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdoptedSocket {
    /// The process holding it.
    pub pid: u32,
    /// When that process started (`pidfd::start_ticks`): the pid names it only with this.
    pub start_ticks: Option<u64>,
    /// Its descriptor number in that process.
    pub fd: RawFd,
    /// The socket's cookie (`SO_COOKIE`): the descriptor must still be this very socket.
    pub cookie: u64,
}

/// One worker in a [`Handover`].
#[derive(Debug, Serialize, Deserialize)]
pub struct WorkerHandover {
    /// Its id (`CK_WORKER_ID`).
    pub id: u64,
    /// Its pid.
    pub pid: u32,
    /// Its pidfd.
    pub pidfd: RawFd,
    /// Its notify socket.
    pub notify: Option<RawFd>,
    /// When it was spawned.
    #[serde(with = "crate::supervisor::lifecycle::instant_age")]
    pub started: Instant,
    /// It spoke on `NOTIFY_SOCKET`.
    pub spoke_notify: bool,
    /// Its last `STATUS=`.
    pub status: Option<String>,
    /// Its health signals.
    pub health: Health,
    /// Its cgroup, and whether that has the memory controller.
    pub cgroup: Option<(PathBuf, bool)>,
    /// The slot's `selected` counter when it started.
    pub selected_base: u64,
    /// `--max-requests`: its own limit.
    pub requests_limit: Option<u64>,
    /// Spawned in place of a worker that died (`--boot-boost`).
    #[serde(default)]
    pub replacing: bool,
    /// ck stepped it back while a replacement boots.
    #[serde(default)]
    pub stepped_back: bool,
    /// `--max-memory`: samples in a row above the limit.
    pub over_memory: u32,
    /// Notify messages refused so far.
    pub notify_refused: u64,
    /// When it started (`pidfd::start_ticks`).
    #[serde(default)]
    pub start_ticks: Option<u64>,
    /// Its `NOTIFY_SOCKET` value.
    #[serde(default)]
    pub notify_name: Option<String>,
    /// `--adopt`: the process of its tree holding the slot's socket when that is not the
    /// worker itself (watched: its exit gives the socket up).
    #[serde(default)]
    pub holder: Option<u32>,
    /// `--worker-output capture`: its output pipes.
    #[serde(default)]
    pub output: Option<OutputHandover>,
}

/// A worker's captured stdout and stderr in a [`Handover`].
#[derive(Debug, Serialize, Deserialize)]
pub struct OutputHandover {
    /// ck's read ends (stdout, stderr), kept across the exec (meaningless in the state file).
    pub fds: [RawFd; 2],
    /// The pipes' inodes.
    pub inodes: [u64; 2],
    /// `--survive-supervisor`: the worker's own copies of the read ends, which a ck taking it
    /// back copies with `pidfd_getfd`.
    pub in_worker: Option<[RawFd; 2]>,
}

/// A lifecycle timer that had not fired, in a [`Handover`].
#[derive(Debug, Serialize, Deserialize)]
pub struct TimerHandover {
    /// The slot.
    pub slot: u32,
    /// The epoch it was armed in.
    pub epoch: u64,
    /// Which timer.
    pub timer: Timer,
    /// Microseconds left.
    pub left_us: u64,
}

/// A lifecycle timer armed and not fired yet (so that a handover can arm it again).
#[derive(Clone, Copy, Debug)]
pub(in crate::supervisor) struct Armed {
    /// The slot.
    pub slot: u32,
    /// The epoch it was armed in.
    pub epoch: u64,
    /// Which timer.
    pub timer: Timer,
    /// When it fires.
    pub at: Instant,
}

fn left_us(at: Instant) -> u64 {
    at.saturating_duration_since(Instant::now()).as_micros() as u64
}

/// The handover with the descriptors it names, which must stay open across the exec.
pub(in crate::supervisor) struct Prepared<'a> {
    /// The state.
    pub handover: Handover,
    /// Every descriptor the state names.
    pub fds: Vec<BorrowedFd<'a>>,
}

/// The state to hand over, with the descriptors it names. `lock`, `control` and
/// `metrics` are the run's own (held by the event loop, not by the supervisor); without
/// them (the `--survive-supervisor` state file) their numbers are -1. `started`: when the
/// instance started.
pub(in crate::supervisor) fn prepare<'a>(
    view: Parts<'a>,
    started: Instant,
    lock: Option<BorrowedFd<'a>>,
    control: Option<BorrowedFd<'a>>,
    metrics: Option<BorrowedFd<'a>>,
) -> Prepared<'a> {
    let mut fds: Vec<BorrowedFd<'a>> = [lock, control, metrics].into_iter().flatten().collect();
    let cgroup_of =
        |c: &crate::os::cgroup::WorkerCgroup| (c.dir().to_path_buf(), c.memory_controller());
    let mut slots = Vec::new();
    for slot in view.table.slots.values() {
        let worker = slot.worker.as_ref().map(|w| {
            fds.push(w.pidfd.as_fd());
            if let Some(n) = &w.notify {
                fds.push(n.as_fd());
            }
            WorkerHandover {
                id: slot.worker_id().unwrap_or_default(),
                pid: w.pid,
                pidfd: w.pidfd.as_raw_fd(),
                notify: w.notify.as_ref().map(|n| n.as_raw_fd()),
                started: slot
                    .life
                    .state
                    .run()
                    .map_or_else(Instant::now, |r| r.started),
                spoke_notify: w.spoke_notify,
                status: w.status.clone(),
                health: Health {
                    probing: false,
                    ..view.healths.of_worker(slot).unwrap_or_default()
                },
                cgroup: w.cgroup.as_ref().map(cgroup_of),
                selected_base: w.selected_base,
                requests_limit: w.requests_limit,
                replacing: w.replacing,
                stepped_back: w.stepped_back,
                over_memory: w.over_memory,
                notify_refused: w.notify_refused.load(std::sync::atomic::Ordering::Relaxed),
                start_ticks: w.start_ticks,
                notify_name: w.notify_name.clone(),
                holder: w.holder,
                output: w.output.as_ref().map(|o| {
                    fds.extend(o.ends.iter().map(|e| e.as_fd()));
                    OutputHandover {
                        fds: [o.ends[0].as_raw_fd(), o.ends[1].as_raw_fd()],
                        inodes: o.inodes,
                        in_worker: o.in_worker,
                    }
                }),
            }
        });
        // Only the state file needs them: an upgrade keeps ck's own copies open.
        let adopted = match (view.cfg.survive_supervisor, slot.life.state.run()) {
            (true, Some(run)) if run.adopted => slot.adopted_locations(),
            _ => Vec::new(),
        };
        fds.extend(slot.sockets.iter().map(|s| s.as_fd()));
        slots.push(SlotHandover {
            index: slot.index,
            life: slot.life.clone(),
            sockets: slot.sockets.iter().map(|s| s.as_raw_fd()).collect(),
            spare: slot.life.spare,
            last_pid: slot.last_pid,
            last_exit: slot.last_exit.clone(),
            boot_mistake: slot.boot_mistake.clone(),
            probe_failures: slot.probe_failures,
            worker,
            member_of: slot.life.member_of,
            adopted,
            output_dropped: slot
                .output_dropped
                .load(std::sync::atomic::Ordering::Relaxed),
        });
    }
    let handover = Handover {
        compat: Compat::this(),
        exe: view.continuity.exe.clone(),
        exec_at: SystemTime::now(),
        lock_fd: lock.map_or(-1, |fd| fd.as_raw_fd()),
        control_fd: control.map_or(-1, |fd| fd.as_raw_fd()),
        metrics_fd: metrics.map(|m| m.as_raw_fd()),
        started,
        next_worker_id: view.table.next_worker_id,
        workers: view.cfg.workers,
        stop_signal: Some(view.cfg.stop_signal.to_string()),
        upgrades: view.continuity.upgrades,
        reloads: (view.ops.reloads.ok, view.ops.reloads.aborted),
        canaries: (view.ops.canaries.promoted, view.ops.canaries.withdrawn),
        spare_failures: view.ops.core.spares.failures,
        spare_due_us: view.ops.core.spares.due.map(left_us),
        fd_limit: view.table.fd_limit,
        cgroup: view
            .table
            .cgroups
            .as_ref()
            .map(|c| (c.dir().to_path_buf(), c.memory_controller())),
        dead_cgroups: view.table.dead_cgroups.iter().map(cgroup_of).collect(),
        slots,
        timers: view
            .continuity
            .timers
            .iter()
            .map(|a| TimerHandover {
                slot: a.slot,
                epoch: a.epoch,
                timer: a.timer,
                left_us: left_us(a.at),
            })
            .collect(),
    };
    Prepared { handover, fds }
}

#[cfg(test)]
mod tests;
