//! The new image's side of `ck upgrade`: reading the [`Handover`] the old image left in the
//! memfd named by `CK_HANDOVER_FD`, and rebuilding the slots from it (sockets, workers watched
//! again by pidfd, notify readers, pending timers; with `--adopt` member slots and the processes
//! holding adopted sockets watched again) so the event loop carries on where the old image
//! stopped. The program and pinned maps kept steering meanwhile.
use std::{
    os::fd::{OwnedFd, RawFd},
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use anyhow::Context as _;
use socket2::Socket;
use tokio::net::UnixDatagram;

use tokio::sync::mpsc::UnboundedSender;

use crate::supervisor::{
    continuity::handover::{FORMAT, Handover, WorkerHandover},
    continuity::output_back::{EndsFrom, output_back},
    event::Event,
    groups::Groups,
    inputs::{members::watch_member, notify::watch_notify},
    lifecycle::Timer,
    output,
    slots::slot::{Slot, Worker},
};
use crate::{os::cgroup::WorkerCgroup, os::notify, os::reexec, settings::run_config::RunConfig};

/// The handover left by the image ck re-executed from, if this image is one (`ck upgrade`).
pub(in crate::supervisor) fn take_handover() -> anyhow::Result<Option<Handover>> {
    let Some(value) = std::env::var_os(reexec::HANDOVER_ENV) else {
        return Ok(None);
    };
    let fd: RawFd = value
        .to_str()
        .and_then(|v| v.parse().ok())
        .with_context(|| {
            format!(
                "{} is not a descriptor number: {value:?}",
                reexec::HANDOVER_ENV
            )
        })?;
    let state = reexec::read_state(reexec::inherited(fd)?).context("reading the handover")?;
    let handover: Handover =
        serde_json::from_slice(&state).context("decoding the handover state")?;
    anyhow::ensure!(
        handover.compat.format == FORMAT,
        "the handover is format {}, this ck reads format {FORMAT}",
        handover.compat.format
    );
    Ok(Some(handover))
}

/// A fleet rebuilt from what an earlier ck left (`ck upgrade`'s handover, or a dead ck's state
/// file): the slots to put in the table, then what to watch, arm and start again.
pub(in crate::supervisor) struct Restored {
    /// The slots taken back, their workers watched again.
    pub slots: Vec<Slot>,
    /// Root slots whose adopted socket a process other than the worker holds: (slot, pid).
    pub holders: Vec<(u32, u32)>,
    /// Lifecycle timers to arm again: (slot, epoch, timer, delay).
    pub timers: Vec<(u32, u64, Timer, Duration)>,
    /// Slots whose worker is gone: opened anew and started again.
    pub renew: Vec<Renewal>,
    /// When spares are due again.
    pub spare_due: Option<Duration>,
    /// The worker count, when the record has one (`ck scale` may have changed it since the
    /// command line was written).
    pub workers: Option<u32>,
    /// How the upgrade went, for `ck status` (None: not an upgrade).
    pub last_upgrade: Option<String>,
}

/// A slot whose worker is gone while ck was down, to open anew and start.
pub(in crate::supervisor) struct Renewal {
    pub index: u32,
    /// A fresh life with the slot's generation and restarts.
    pub life: crate::supervisor::lifecycle::Life,
    /// The pid of the worker that is gone.
    pub last_pid: u32,
}

/// What taking workers back needs of the running ck: its configuration, its groups (to check a
/// socket taken back), the output readers and the event sender the workers' watchers send to.
pub(in crate::supervisor) struct Restorer<'a> {
    pub cfg: &'a RunConfig,
    pub groups: &'a Groups,
    pub hub: Option<&'a output::Hub>,
    pub events: &'a UnboundedSender<Event>,
}

/// Rebuilds the slots, workers and timers of `handover` (`ck upgrade`), in place of starting a
/// fleet. On an error, the slots rebuilt before it are in `Restored` all the same (with no
/// timer, spare or count from the handover), so that the shutdown that follows stops their
/// workers.
pub(in crate::supervisor) fn restore(
    r: &Restorer<'_>,
    handover: Handover,
) -> (Restored, anyhow::Result<()>) {
    let mut restored = Restored {
        slots: Vec::new(),
        holders: Vec::new(),
        timers: Vec::new(),
        renew: Vec::new(),
        spare_due: None,
        workers: None,
        last_upgrade: None,
    };
    let result = restore_into(r, handover, &mut restored);
    (restored, result)
}

fn restore_into(
    r: &Restorer<'_>,
    handover: Handover,
    restored: &mut Restored,
) -> anyhow::Result<()> {
    let mut workers = 0;
    for saved in handover.slots {
        let index = saved.index;
        let sockets = saved
            .sockets
            .iter()
            .map(|fd| reexec::inherited(*fd).map(Socket::from))
            .collect::<std::io::Result<Vec<_>>>()
            .with_context(|| format!("slot {index}: taking its sockets back"))?;
        let mut slot = Slot::restore(&saved, sockets);
        if let Some(w) = saved.worker {
            let pidfd = reexec::inherited(w.pidfd)
                .with_context(|| format!("slot {index}: taking the pidfd of {} back", w.pid))?;
            let notify = w
                .notify
                .map(|fd| reexec::inherited(fd).and_then(notify::inherit))
                .transpose()
                .with_context(|| format!("slot {index}: taking the notify socket back"))?;
            let cgroup = w
                .cgroup
                .clone()
                .map(|(dir, memory)| WorkerCgroup::resume(dir, memory))
                .transpose()?;
            // A member's process is not ck's child: its exit shows on its pidfd.
            let exit = match saved.member_of {
                Some(_) => ExitSeen::Member,
                None => ExitSeen::Child,
            };
            let mut worker = r.watch_again(index, &w, pidfd, notify, cgroup, exit)?;
            worker.output = output_back(
                r.hub,
                output_source(index, w.pid, &slot),
                &slot.output_dropped,
                w.output.as_ref(),
                EndsFrom::Exec,
            );
            slot.worker = Some(worker);
            if let Some(holder) = w.holder {
                restored.holders.push((index, holder));
            }
            workers += 1;
        }
        restored.slots.push(slot);
    }
    restored.timers = handover
        .timers
        .iter()
        .map(|t| (t.slot, t.epoch, t.timer, Duration::from_micros(t.left_us)))
        .collect();
    restored.spare_due = handover.spare_due_us.map(Duration::from_micros);
    restored.workers = (handover.workers > 0).then_some(handover.workers);
    let exec_ms = handover
        .exec_at
        .elapsed()
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    tracing::info!(
        from = %handover.compat.ck,
        to = crate::VERSION,
        workers,
        slots = restored.slots.len(),
        upgrades = handover.upgrades,
        exec_to_resumed_ms = exec_ms,
        "ck upgraded in place: workers kept, steering kept"
    );
    restored.last_upgrade = Some(format!(
        "ok: ck {} -> {} ({workers} worker(s) kept, resumed {exec_ms:.1} ms after the exec)",
        handover.compat.ck,
        crate::VERSION
    ));
    Ok(())
}

/// How the exit of a worker watched again is seen.
#[derive(Clone, Copy)]
pub(in crate::supervisor) enum ExitSeen {
    /// Still ck's child (an upgrade): its status is reaped with `waitpid`.
    Child,
    /// Taken back from a ck that died: its exit shows on the pidfd; its status is init's.
    Adopted,
    /// A member slot's process (`--adopt`, never ck's child): its exit shows on the pidfd and
    /// is the member's `MemberExited`.
    Member,
}

impl Restorer<'_> {
    /// The [`Worker`] of a handed-over record `w` on slot `index`, watched again: its notify
    /// socket read (messages checked against its pid and cgroup), its exit sent as an event.
    pub(in crate::supervisor) fn watch_again(
        &self,
        index: u32,
        w: &WorkerHandover,
        pidfd: OwnedFd,
        notify: Option<Arc<UnixDatagram>>,
        cgroup: Option<WorkerCgroup>,
        exit: ExitSeen,
    ) -> anyhow::Result<Worker> {
        let refused = Arc::new(AtomicU64::new(w.notify_refused));
        let heard = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks = Vec::new();
        if let Some(socket) = &notify {
            let speakers = notify::Speakers {
                worker: w.pid,
                cgroup: cgroup.as_ref().map(|c| c.dir().to_path_buf()),
            };
            tasks.push(watch_notify(
                self.events,
                index,
                w.id,
                speakers,
                socket.clone(),
                refused.clone(),
                heard.clone(),
            ));
        }
        let waiter = pidfd.try_clone().context("duplicating a pidfd")?;
        let (events, id, pid) = (self.events.clone(), w.id, w.pid);
        match exit {
            ExitSeen::Member => tasks.push(watch_member(self.events, index, id, waiter)),
            ExitSeen::Child | ExitSeen::Adopted => {
                tokio::spawn(async move {
                    let status = match exit {
                        ExitSeen::Adopted => {
                            crate::os::pidfd::exited(waiter).await.and_then(|()| {
                                Err(std::io::Error::other(
                                    "exited; taken back from a ck that died, so its exit \
                                     status is not ck's to read",
                                ))
                            })
                        }
                        _ => crate::os::pidfd::wait_child(waiter, pid).await,
                    };
                    let _ = events.send(Event::Exited {
                        slot: index,
                        worker: id,
                        status,
                    });
                });
            }
        }
        let mut worker = Worker::restored(w, pidfd);
        worker.tasks = tasks;
        worker.notify = notify;
        worker.cgroup = cgroup;
        worker.notify_refused = refused;
        worker.notify_heard = heard;
        Ok(worker)
    }
}

/// Who writes the output of worker `pid` of `slot`, for its readers.
pub(in crate::supervisor) fn output_source(
    index: u32,
    pid: u32,
    slot: &Slot,
) -> crate::supervisor::output::Source {
    crate::supervisor::output::Source {
        slot: index,
        pid,
        generation: slot.life.generation,
        stream: crate::supervisor::output::Stream::Stdout,
    }
}
