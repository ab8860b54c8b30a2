//! `--survive-supervisor`: workers outlive a ck that dies (no `PR_SET_PDEATHSIG`; the program
//! stays attached to each group, the pinned maps keep steering with the last published
//! state). ck writes its state (the [`Handover`] of `ck upgrade`, without descriptors) to
//! `/run/ck/<name>.state` on every change (temporary file + rename); the next `ck run` of the
//! same name reads it and takes the fleet back: each worker's pid is checked against its start
//! time, its sockets copied back with `pidfd_getfd` (with `--adopt` from the descriptors the
//! state names in the worker's tree, checked by cookie; member slots with their root), its
//! notify socket bound again. An orphan
//! guard process (`ck orphan-guard`) stops the workers if no ck comes back in time.
use std::{io::Write as _, os::fd::AsRawFd as _, path::PathBuf, time::Duration};

use anyhow::Context as _;
use socket2::Socket;

use crate::supervisor::{
    continuity::handover::{FORMAT, Handover, SlotHandover, WorkerHandover},
    continuity::output_back::{EndsFrom, output_back},
    continuity::resume::{ExitSeen, Renewal, Restored, Restorer, output_source},
    lifecycle::Life,
    slots::slot::{Slot, Worker},
};
use crate::{
    os::cgroup::WorkerCgroup, os::instance, os::notify::NotifySocket, os::pidfd, os::sock_diag,
    settings::run_config::RunConfig, settings::stop_signal::StopSignal,
};

/// Where an instance's state is kept for the ck that takes over after a crash.
pub fn state_path(name: &str) -> PathBuf {
    instance::state_path(name)
}

/// The state a ck that died left, if any (the caller holds the instance lock, so the ck that
/// wrote it is gone).
pub(in crate::supervisor) fn read_state(name: &str) -> anyhow::Result<Option<Handover>> {
    let path = state_path(name);
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let state: Handover = serde_json::from_slice(&text).with_context(|| {
        format!(
            "{} is not a state this ck reads; remove it to start a new fleet",
            path.display()
        )
    })?;
    anyhow::ensure!(
        state.compat.format == FORMAT,
        "{} is format {}, this ck reads format {FORMAT}; remove it to start a new fleet",
        path.display(),
        state.compat.format
    );
    Ok(Some(state))
}

/// Starts the orphan guard of instance `cfg.name`, watching this process.
pub(in crate::supervisor) fn start_guard(cfg: &RunConfig) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding ck's own binary")?;
    // The guard detaches itself (double fork): this waits for its first process only.
    let status = std::process::Command::new(exe)
        .arg("orphan-guard")
        .args(["--name", &cfg.name])
        .args([
            "--timeout",
            &format!("{}ms", cfg.orphan_timeout.as_millis()),
        ])
        .args([
            "--drain-timeout",
            &format!("{}ms", cfg.drain_timeout.as_millis()),
        ])
        .args(["--stop-signal", &cfg.stop_signal.to_string()])
        .args(["--supervisor", &std::process::id().to_string()])
        .env_remove("NOTIFY_SOCKET")
        .env_remove(crate::os::reexec::HANDOVER_ENV)
        .stdin(std::process::Stdio::null())
        .status()
        .context("starting the orphan guard")?;
    anyhow::ensure!(
        status.success(),
        "the orphan guard did not start ({status})"
    );
    Ok(())
}

/// A worker that could not be taken back but still runs (the same process): the stop signal,
/// so it does not serve on unmanaged while a new worker takes its slot.
fn stop_stray(w: &WorkerHandover, stop: StopSignal) {
    if w.start_ticks.is_some()
        && pidfd::start_ticks(w.pid) == w.start_ticks
        && let Ok(fd) = pidfd::open(w.pid)
    {
        tracing::warn!(
            pid = w.pid,
            signal = stop.name(),
            "stopping it: ck cannot manage it"
        );
        let _ = pidfd::send_signal(&fd, stop.signal());
    }
}

/// Writes `handover` (without descriptors) to instance `name`'s state file: a temporary file,
/// then renamed over the last one.
pub(in crate::supervisor) fn write_state(name: &str, handover: &Handover) {
    let path = state_path(name);
    let tmp = path.with_extension("state.tmp");
    let written = serde_json::to_vec(handover)
        .map_err(std::io::Error::other)
        .and_then(|bytes| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&bytes)?;
            std::fs::rename(&tmp, &path)
        });
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), "writing the state file failed: {e}");
    }
}

/// Removes instance `name`'s state file (a clean stop: nothing to take over).
pub(in crate::supervisor) fn remove_state(name: &str) {
    let _ = std::fs::remove_file(state_path(name));
}

/// Takes back the fleet of a ck that died: every worker still running (the same process:
/// pid and start time) with its sockets and notify socket, and with `--adopt` the member
/// slots of the roots taken back; slots whose worker is gone start a new one.
pub(in crate::supervisor) fn take_fleet_back(r: &Restorer<'_>, state: Handover) -> Restored {
    let saved_ago = state.exec_at.elapsed().unwrap_or_default();
    let mut kept = Vec::new();
    let mut renew = Vec::new();
    let stop = r.cfg.stop_signal;
    let mut holders = Vec::new();
    let mut slots = Vec::new();
    // Roots first: a member is taken back only with its root.
    let (members, roots): (Vec<_>, Vec<_>) =
        state.slots.into_iter().partition(|s| s.member_of.is_some());
    for mut saved in roots {
        let index = saved.index;
        // A state file from before spares were the lifecycle's own fact.
        saved.life.spare |= saved.spare;
        // A roll's replacement not flipped in is not taken back; a spare and a kept release
        // (`--keep-previous`) are.
        let replacement = saved.life.standby && !saved.life.spare && saved.life.kept.is_none();
        if replacement || saved.life.member_of.is_some() {
            continue;
        }
        let taken = saved.worker.as_ref().and_then(|w| {
            r.take_back(&saved, w)
                .inspect_err(|e| {
                    tracing::warn!(slot = index, pid = w.pid, "not taken back: {e:#}");
                    stop_stray(w, stop);
                })
                .ok()
        });
        match taken {
            Some((mut worker, sockets)) => {
                // The process of its tree holding its socket, if not the worker itself
                // (watched with one group, as at adoption).
                let holder = saved.adopted.first().map(|a| a.pid);
                let holder = holder.filter(|_| r.groups.len() == 1);
                if let Some(holder) = holder.filter(|h| *h != worker.pid) {
                    holders.push((index, holder));
                }
                let mut slot = Slot::restore(&saved, sockets);
                slot.last_pid = worker.pid;
                // The pipes' read ends, from the worker's own copies.
                worker.output = output_back(
                    r.hub,
                    output_source(index, worker.pid, &slot),
                    &slot.output_dropped,
                    saved.worker.as_ref().and_then(|w| w.output.as_ref()),
                    EndsFrom::Worker(&worker.pidfd),
                );
                slot.worker = Some(worker);
                slots.push(slot);
                kept.push(index);
            }
            // A kept worker that died while ck was down is gone from the rollback.
            None if saved.life.kept.is_some() => {}
            None => {
                let fresh = match saved.life.spare {
                    true => Life::spare(r.cfg.restart),
                    false => Life::new(r.cfg.restart, false),
                };
                let life = Life {
                    generation: saved.life.generation,
                    restarts: saved.life.restarts,
                    ..fresh
                };
                renew.push(Renewal {
                    index,
                    life,
                    last_pid: saved.last_pid,
                });
            }
        }
    }
    let mut members_kept = 0;
    for saved in members {
        let (index, root) = (saved.index, saved.member_of.expect("partitioned"));
        let Some(w) = saved.worker.as_ref() else {
            continue;
        };
        let taken = match kept.contains(&root) {
            true => r.take_back(&saved, w),
            false => Err(anyhow::anyhow!("its root slot {root} was not taken back")),
        };
        match taken {
            Ok((worker, sockets)) => {
                let mut slot = Slot::restore(&saved, sockets);
                slot.life.member_of = Some(root);
                slot.last_pid = worker.pid;
                slot.worker = Some(worker);
                slots.push(slot);
                kept.push(index);
                members_kept += 1;
            }
            Err(e) => {
                tracing::warn!(
                    slot = index,
                    pid = w.pid,
                    root,
                    "member not taken back: {e:#}"
                );
                stop_stray(w, stop);
            }
        }
    }
    let timers = state
        .timers
        .iter()
        .filter(|t| kept.contains(&t.slot))
        .map(|t| {
            let left = Duration::from_micros(t.left_us).saturating_sub(saved_ago);
            (t.slot, t.epoch, t.timer, left)
        })
        .collect();
    tracing::info!(
        kept = kept.len(),
        members = members_kept,
        renewed = renew.len(),
        state_age_ms = saved_ago.as_millis() as u64,
        "took back the fleet of a ck that died (--survive-supervisor)"
    );
    Restored {
        slots,
        holders,
        timers,
        renew,
        spare_due: None,
        // `ck scale` may have changed the count since the command line was written.
        workers: (state.workers > 0).then_some(state.workers),
        last_upgrade: None,
    }
}

impl Restorer<'_> {
    /// One worker (or member) of slot record `saved` taken back: the same process, its sockets
    /// (a socket-activation worker's fds 3..; with `--adopt`, the descriptors the record names
    /// in its tree, each still the same socket), checked to listen on the groups' ports, its
    /// notify socket bound again (not a member's: ck did not start it), its exit watched.
    fn take_back(
        &self,
        saved: &SlotHandover,
        w: &WorkerHandover,
    ) -> anyhow::Result<(Worker, Vec<Socket>)> {
        let index = saved.index;
        let started = pidfd::start_ticks(w.pid).context("the process is gone")?;
        anyhow::ensure!(
            w.start_ticks == Some(started),
            "pid {} is another process now (started at tick {started}, not {:?})",
            w.pid,
            w.start_ticks
        );
        let pidfd = pidfd::open(w.pid).context("pidfd_open")?;
        let sockets = match self.cfg.adopt {
            true => self.adopted_back(saved)?,
            false => (0..self.groups.len())
                .map(|position| {
                    let fd = 3 + position as i32;
                    let socket = Socket::from(
                        pidfd::get_fd(&pidfd, fd)
                            .with_context(|| format!("pidfd_getfd of its fd {fd}"))?,
                    );
                    self.groups
                        .check_listening(position, &socket, &format!("its fd {fd}"))?;
                    Ok(socket)
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
        };
        let cgroup = w
            .cgroup
            .clone()
            .map(|(dir, memory)| WorkerCgroup::resume(dir, memory))
            .transpose()?;
        let (notify, exit) = match saved.member_of {
            Some(_) => (None, ExitSeen::Member),
            None => {
                let name = w.notify_name.clone().context("no notify socket recorded")?;
                let notify =
                    NotifySocket::rebind(&name).with_context(|| format!("binding {name} again"))?;
                (Some(notify.socket), ExitSeen::Adopted)
            }
        };
        tracing::info!(
            slot = index,
            pid = w.pid,
            fd = pidfd.as_raw_fd(),
            member_of = ?saved.member_of,
            "worker taken back"
        );
        let worker = self.watch_again(index, w, pidfd, notify, cgroup, exit)?;
        Ok((worker, sockets))
    }

    /// `--adopt`: the sockets of slot record `saved` copied back from the processes holding
    /// them (none while its worker's were not adopted yet: ck adopts them as they come).
    fn adopted_back(&self, saved: &SlotHandover) -> anyhow::Result<Vec<Socket>> {
        if !saved.life.state.run().is_some_and(|run| run.adopted) {
            anyhow::ensure!(
                !saved.life.socket_open,
                "it waited for a new listener with the socket of a process that exited, which \
                 closed with ck"
            );
            return Ok(Vec::new());
        }
        anyhow::ensure!(
            saved.adopted.len() == self.groups.len(),
            "the state file does not say where its adopted sockets are open (written by a ck \
             without --survive-supervisor?)"
        );
        let mut sockets = Vec::new();
        for (position, at) in saved.adopted.iter().enumerate() {
            let what = format!("fd {} of pid {}", at.fd, at.pid);
            anyhow::ensure!(
                at.start_ticks.is_some() && pidfd::start_ticks(at.pid) == at.start_ticks,
                "pid {}, which held its socket, is gone",
                at.pid
            );
            let holder = pidfd::open(at.pid).with_context(|| format!("pidfd_open {}", at.pid))?;
            let socket = Socket::from(
                pidfd::get_fd(&holder, at.fd).with_context(|| format!("pidfd_getfd of {what}"))?,
            );
            anyhow::ensure!(
                sock_diag::cookie(&socket).ok() == Some(at.cookie),
                "{what} is another socket now"
            );
            self.groups.check_listening(position, &socket, &what)?;
            sockets.push(socket);
        }
        Ok(sockets)
    }
}
