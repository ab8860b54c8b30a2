//! The new image's side of `ck upgrade`: reading the [`Handover`] the old image left in the
//! memfd named by `CK_HANDOVER_FD`, and rebuilding the slots from it (sockets, workers watched
//! again by pidfd, notify readers, pending timers; with `--adopt` member slots and the processes
//! holding adopted sockets watched again) so the event loop carries on where the old image
//! stopped. The program and pinned maps kept steering meanwhile.
use std::{
    os::fd::{OwnedFd, RawFd},
    sync::{Arc, atomic::AtomicU64},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use socket2::Socket;
use tokio::net::UnixDatagram;

use crate::supervisor::{
    Event, Supervisor,
    continuity::handover::{FORMAT, Handover, WorkerHandover},
    continuity::output_back::EndsFrom,
    inputs::notify::watch_notify,
    slots::slot::{Slot, Worker},
    tasks,
};
use crate::{os::cgroup::WorkerCgroup, os::notify, os::reexec};

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

impl Supervisor {
    /// Rebuilds the slots, workers and timers of `handover`, in place of starting a fleet.
    pub(in crate::supervisor) fn resume(&mut self, handover: Handover) -> anyhow::Result<()> {
        // `ck scale` may have changed the count since the command line was written.
        if handover.workers > 0 {
            self.cfg.workers = handover.workers;
        }
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
            let mut holder = None;
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
                let mut worker = self.watch_again(index, &w, pidfd, notify, cgroup, exit)?;
                worker.output = self.output_back(
                    output_source(index, w.pid, &slot),
                    &slot.output_dropped,
                    w.output.as_ref(),
                    EndsFrom::Exec,
                );
                slot.worker = Some(worker);
                holder = w.holder;
                workers += 1;
            }
            self.table.slots.insert(index, slot);
            if let Some(holder) = holder {
                self.watch_holder(index, holder);
            }
        }
        for t in handover.timers {
            self.set_timer(t.slot, t.epoch, t.timer, Duration::from_micros(t.left_us));
        }
        if let Some(us) = handover.spare_due_us {
            let delay = Duration::from_micros(us);
            self.ops.core.spares.due = Some(Instant::now() + delay);
            tasks::send_after(&self.events, delay, Event::SpareDue);
        }
        let exec_ms = handover
            .exec_at
            .elapsed()
            .map_or(0.0, |d| d.as_secs_f64() * 1e3);
        tracing::info!(
            from = %handover.compat.ck,
            to = crate::VERSION,
            workers,
            slots = self.table.slots.len(),
            upgrades = self.continuity.upgrades,
            exec_to_resumed_ms = exec_ms,
            "ck upgraded in place: workers kept, steering kept"
        );
        self.continuity.last_upgrade = Some(format!(
            "ok: ck {} -> {} ({workers} worker(s) kept, resumed {exec_ms:.1} ms after the exec)",
            handover.compat.ck,
            crate::VERSION
        ));
        Ok(())
    }
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

impl Supervisor {
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
                &self.events,
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
            ExitSeen::Member => tasks.push(self.watch_member(index, id, waiter)),
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
