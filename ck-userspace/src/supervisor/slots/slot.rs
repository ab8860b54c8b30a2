//! A slot as the supervisor holds it: the lifecycle machine's [`Life`] beside the OS resources
//! the machine's effects act on (the slot's sockets, its worker's pidfd and notify reader).
use std::{os::fd::OwnedFd, time::Instant};

use socket2::Socket;
use tokio::task::JoinHandle;

use crate::supervisor::lifecycle::Life;

/// A running worker process.
pub struct Worker {
    /// Its pid.
    pub pid: u32,
    /// pidfd for signals.
    pub pidfd: OwnedFd,
    /// It sent anything at all on `NOTIFY_SOCKET`.
    pub spoke_notify: bool,
    /// Its last `STATUS=` text.
    pub status: Option<String>,
    /// Tasks that watch it (its notify reader; for a member, its exit): stopped with it.
    pub tasks: Vec<JoinHandle<()>>,
    /// Its notify socket (to see whether a message waits that the task has not read yet); none
    /// for a member, which ck did not start.
    pub notify: Option<std::sync::Arc<tokio::net::UnixDatagram>>,
    /// Its cgroup (None where the host has no usable cgroup2).
    pub cgroup: Option<crate::os::cgroup::WorkerCgroup>,
    /// `--adopt`: it said READY=1 before its sockets were adopted.
    pub said_ready: bool,
    /// `--adopt`: time from its `listen()` to the adoption of its (last) socket.
    pub adopt_latency_us: Option<u64>,
    /// The slot's `selected` counter when it started (connections it was sent = now - this).
    pub selected_base: u64,
    /// `--max-requests`: its own limit.
    pub requests_limit: Option<u64>,
    /// `--max-memory`: samples in a row above the limit.
    pub over_memory: u32,
    /// Notify messages ignored because their sender was not of its tree (counted by its
    /// notify reader).
    pub notify_refused: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Set by its notify reader as it takes a message of the worker's tree off the socket,
    /// before the supervisor sees it (`spoke_notify`): a worker that spoke is never taken for a
    /// silent one in between.
    pub notify_heard: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// When it started (`pidfd::start_ticks`): a ck that takes it back after a crash checks the
    /// pid still names it.
    pub start_ticks: Option<u64>,
    /// Its `NOTIFY_SOCKET` (`@` + abstract name): a ck that takes it back binds it again.
    pub notify_name: Option<String>,
    /// `--adopt`: the process of its tree holding the slot's adopted socket, when that is not
    /// the worker itself (a forked child, watched: see `supervisor::members`).
    pub holder: Option<u32>,
    /// `--worker-output capture`: ck's read ends of its stdout and stderr pipes (read by the
    /// output readers, handed over by `ck upgrade`).
    pub output: Option<crate::supervisor::output::OutputEnds>,
    /// `--ready auto`: the accept probe that shows when a silent starter accepts.
    pub accept_probe: crate::os::probe::accept::AcceptProbe,
    /// Spawned in place of a worker that died: while it starts, the rest of the fleet steps
    /// back (`--boot-boost`, see `supervisor::boot_priority`).
    pub replacing: bool,
    /// ck stepped it back while a replacement boots (else it runs at the fleet's priority).
    pub stepped_back: bool,
}

impl Worker {
    /// A worker process `pid`, watched through `pidfd`, of which nothing else is known yet
    /// (its id and start are the lifecycle's: [`crate::supervisor::lifecycle::Run`]).
    pub(in crate::supervisor) fn base(pid: u32, pidfd: OwnedFd) -> Worker {
        Worker {
            pid,
            pidfd,
            spoke_notify: false,
            status: None,
            tasks: Vec::new(),
            notify: None,
            cgroup: None,
            said_ready: false,
            adopt_latency_us: None,
            selected_base: 0,
            requests_limit: None,
            over_memory: 0,
            notify_refused: Default::default(),
            notify_heard: Default::default(),
            // Names the process for a ck that takes the fleet back after a crash, and for the
            // orphan guard.
            start_ticks: crate::os::pidfd::start_ticks(pid),
            notify_name: None,
            holder: None,
            output: None,
            accept_probe: Default::default(),
            replacing: false,
            stepped_back: false,
        }
    }

    /// A worker ck just spawned: `pid`, its `pidfd`, the slot's `selected` count now, and
    /// whether it replaces one that died (`--boot-boost`); the caller adds its handles.
    pub fn spawned(pid: u32, pidfd: OwnedFd, selected_base: u64, replacing: bool) -> Worker {
        let mut worker = Worker::base(pid, pidfd);
        worker.selected_base = selected_base;
        worker.replacing = replacing;
        worker
    }

    /// `--adopt`: a further listener `pid` of a worker's tree, steered as a member slot,
    /// adopted `latency_us` after its `listen()`.
    pub fn member(
        pid: u32,
        pidfd: OwnedFd,
        selected_base: u64,
        latency_us: Option<u64>,
        task: JoinHandle<()>,
    ) -> Worker {
        let mut worker = Worker::base(pid, pidfd);
        worker.selected_base = selected_base;
        worker.adopt_latency_us = latency_us;
        worker.tasks.push(task);
        worker
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// One slot: its lifecycle, its sockets (one per group, open while `life.socket_open`) and its
/// worker (present while `life.state` has a run).
pub struct Slot {
    /// Index in the group.
    pub index: u32,
    /// The lifecycle machine's state of this slot.
    pub life: Life,
    /// One socket per group, in group order; empty while closed.
    pub sockets: Vec<Socket>,
    /// `--adopt`: the worker's sockets adopted so far, by group, until every group has one and
    /// the machine's `Install` (after `Adopted`) makes them the slot's `sockets`.
    pub adopting: Vec<Option<Socket>>,
    /// Sockets an adoption replaced, closed by the machine's `CloseReplaced` after the publish.
    pub replaced: Vec<Socket>,
    /// The worker, if one runs.
    pub worker: Option<Worker>,
    /// Pid of the last worker (for log lines after it exited).
    pub last_pid: u32,
    /// How the last worker ended.
    pub last_exit: Option<String>,
    /// What the last worker did wrong, if it ended on its own while starting and ck can name
    /// it (read from the kernel as it exited).
    pub boot_mistake: Option<crate::supervisor::slots::boot_mistake::BootMistake>,
    /// Accept-queue depth last sampled (all groups): what the sampled fallback steers by and
    /// `ck maps` shows.
    pub queue_depth: u32,
    /// Since when the queue has been non-empty and not moving (`queue_motion`).
    pub queue_rising_since: Option<Instant>,
    /// Connections the program had sent the slot (`selected` + `probe_hits`, all groups) at the
    /// last sample (None: not counted, or no sample yet).
    pub sent_seen: Option<u64>,
    /// Probes of its workers that failed once they were past starting
    /// (`ck_probe_failures_total`).
    pub probe_failures: u64,
    /// Lines of its workers' output dropped because ck's own output could not keep up
    /// (counted by the output readers; `ck_worker_output_dropped_lines_total`).
    pub output_dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// While it leaves: what its leave has seen so far (`fleet::leave`); while it stops with
    /// UDP groups, what its datagrams did.
    pub leave_watch: Option<crate::supervisor::fleet::leave::Watch>,
    /// The accept probe of a worker that died before it took it: where the slot's socket stays
    /// open (`Held`), it waits in its queue for the next worker, so it is kept open (not ended)
    /// until that worker's accept probe takes it over, the worker is ready (its first accept
    /// took the oldest connection of the queue), or the sockets close (the program does not
    /// re-home a probe). Then it ends politely: the worker that takes it finds a live client.
    pub queued_probe: Option<crate::os::probe::conn::ProbeConn>,
}

impl Slot {
    /// A new slot around `life`, with nothing open.
    pub fn new(index: u32, life: Life) -> Slot {
        Slot {
            index,
            life,
            sockets: Vec::new(),
            adopting: Vec::new(),
            replaced: Vec::new(),
            worker: None,
            last_pid: 0,
            last_exit: None,
            boot_mistake: None,
            queue_depth: 0,
            queue_rising_since: None,
            sent_seen: None,
            probe_failures: 0,
            output_dropped: Default::default(),
            leave_watch: None,
            queued_probe: None,
        }
    }

    /// `--adopt`: a member slot of root slot `root`, whose further listener `socket` is held by
    /// `worker`'s process (the lifecycle's `Adopted` installs it).
    pub fn member(index: u32, life: Life, socket: Socket, worker: Worker) -> Slot {
        let mut slot = Slot::new(index, life);
        slot.adopting = vec![Some(socket)];
        slot.last_pid = worker.pid;
        slot.worker = Some(worker);
        slot
    }

    /// The accept-queue depth now (all groups; `TCP_INFO` of ck's copy of each socket), for
    /// `ck status`: the last sample can be a stall period old.
    pub fn live_queue_depth(&self) -> u32 {
        self.sockets
            .iter()
            .map(|s| crate::os::sockets::accept_queue_len(s).unwrap_or(0))
            .sum()
    }

    /// The record written to the `slots` map.
    pub fn info(&self) -> ck_common::SlotInfo {
        ck_common::SlotInfo {
            state: self.life.shown().code(),
            pid: self.worker.as_ref().map_or(0, |w| w.pid),
            generation: self.life.generation,
            weight: 1,
            queue_depth: self.queue_depth,
            flags: 0,
        }
    }

    /// The worker, if it is worker `id` (events and timers name a worker by its id, since
    /// slot indices are reused).
    pub fn worker_of(&self, id: u64) -> Option<&Worker> {
        let current = self.life.state.run().is_some_and(|run| run.id == id);
        self.worker.as_ref().filter(|_| current)
    }

    /// [`Slot::worker_of`], to change.
    pub fn worker_of_mut(&mut self, id: u64) -> Option<&mut Worker> {
        let current = self.life.state.run().is_some_and(|run| run.id == id);
        self.worker.as_mut().filter(|_| current)
    }

    /// The id of the worker running here, if any.
    pub fn worker_id(&self) -> Option<u64> {
        self.life.state.run().map(|run| run.id)
    }

    /// How long the worker running here has run.
    pub fn uptime(&self) -> Option<std::time::Duration> {
        self.life.state.run().map(|run| run.started.elapsed())
    }

    /// The pid of the worker, or of the last one.
    pub fn pid(&self) -> u32 {
        self.worker.as_ref().map_or(self.last_pid, |w| w.pid)
    }
}
