//! `--survive-supervisor`: workers outlive a ck that dies (no `PR_SET_PDEATHSIG`; the program
//! stays attached to each group, the pinned maps keep steering with the last published
//! state). ck writes its state (the [`Handover`] of `ck upgrade`, without descriptors) to
//! `/run/ck/<name>.state` on every change (temporary file + rename); the next `ck run` of the
//! same name reads it and takes the fleet back: each worker's pid is checked against its start
//! time, its sockets copied back with `pidfd_getfd`, its notify socket bound again. An orphan
//! guard process (`ck orphan-guard`) stops the workers if no ck comes back in time.
use std::{
    io::Write as _,
    os::fd::AsRawFd as _,
    path::PathBuf,
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use anyhow::Context as _;
use socket2::Socket;

use crate::supervisor::{
    Supervisor,
    continuity::handover::{FORMAT, Handover, WorkerHandover},
    continuity::output_back::EndsFrom,
    continuity::resume::{ExitSeen, output_source},
    lifecycle::{Input, Life},
    slot::{Slot, Worker},
};
use crate::{
    os::cgroup::WorkerCgroup, os::instance, os::notify::NotifySocket, os::pidfd,
    settings::run_config::RunConfig,
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

/// A worker that could not be taken back but still runs (the same process): SIGTERM, so it
/// does not serve on unmanaged while a new worker takes its slot.
fn stop_stray(w: &WorkerHandover) {
    if w.start_ticks.is_some()
        && pidfd::start_ticks(w.pid) == w.start_ticks
        && let Ok(fd) = pidfd::open(w.pid)
    {
        tracing::warn!(pid = w.pid, "stopping it (SIGTERM): ck cannot manage it");
        let _ = pidfd::send_signal(&fd, nix::sys::signal::Signal::SIGTERM);
    }
}

impl Supervisor {
    /// Writes the state file if anything changed since the last write (only with
    /// `--survive-supervisor`).
    pub(in crate::supervisor) fn save_state(&mut self) {
        if !self.cfg.survive_supervisor || !self.state_dirty {
            return;
        }
        self.state_dirty = false;
        let prepared = self.prepare_handover(None, None, None);
        let path = state_path(&self.cfg.name);
        let tmp = path.with_extension("state.tmp");
        let written = serde_json::to_vec(&prepared.handover)
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

    /// Removes the state file (a clean stop: nothing to take over).
    pub(in crate::supervisor) fn remove_state(&self) {
        let _ = std::fs::remove_file(state_path(&self.cfg.name));
    }

    /// Takes back the fleet of a ck that died: every worker still running (the same process:
    /// pid and start time) with its sockets and notify socket; slots whose worker is gone
    /// start a new one.
    pub(in crate::supervisor) fn take_fleet_back(&mut self, state: Handover) -> anyhow::Result<()> {
        // `ck scale` may have changed the count since the command line was written.
        if state.workers > 0 {
            self.cfg.workers = state.workers;
        }
        let saved_ago = state.exec_at.elapsed().unwrap_or_default();
        let mut kept = Vec::new();
        let mut renew = Vec::new();
        for saved in state.slots {
            let index = saved.index;
            if saved.life.standby && !saved.spare || saved.life.member {
                continue;
            }
            let taken = saved.worker.as_ref().and_then(|w| {
                self.take_back(index, w)
                    .inspect_err(|e| {
                        tracing::warn!(slot = index, pid = w.pid, "not taken back: {e:#}");
                        stop_stray(w);
                    })
                    .ok()
            });
            match taken {
                Some((mut worker, sockets)) => {
                    let mut slot = Slot::new(index, saved.life);
                    slot.sockets = sockets;
                    slot.spare = saved.spare;
                    slot.last_pid = worker.pid;
                    slot.last_exit = saved.last_exit;
                    slot.probe_failures = saved.probe_failures;
                    slot.output_dropped = Arc::new(AtomicU64::new(saved.output_dropped));
                    // The pipes' read ends, from the worker's own copies.
                    worker.output = self.output_back(
                        output_source(index, worker.pid, &slot),
                        &slot.output_dropped,
                        saved.worker.as_ref().and_then(|w| w.output.as_ref()),
                        EndsFrom::Worker(&worker.pidfd),
                    );
                    slot.worker = Some(worker);
                    self.slots.insert(index, slot);
                    kept.push(index);
                }
                None => {
                    let life = Life {
                        generation: saved.life.generation,
                        restarts: saved.life.restarts,
                        ..Life::new(self.cfg.restart, saved.spare)
                    };
                    let mut slot = Slot::new(index, life);
                    slot.spare = saved.spare;
                    slot.last_pid = saved.last_pid;
                    slot.last_exit = Some("gone while ck was down".into());
                    self.slots.insert(index, slot);
                    renew.push(index);
                }
            }
        }
        for t in state.timers.iter().filter(|t| kept.contains(&t.slot)) {
            let left = Duration::from_micros(t.left_us).saturating_sub(saved_ago);
            self.set_timer(t.slot, t.epoch, t.timer, left);
        }
        tracing::info!(
            kept = kept.len(),
            renewed = renew.len(),
            state_age_ms = saved_ago.as_millis() as u64,
            "took back the fleet of a ck that died (--survive-supervisor)"
        );
        for index in renew {
            self.apply(index, Input::Start);
        }
        Ok(())
    }

    /// One worker taken back: the same process, its sockets (its fds 3.., checked to be
    /// listening on the groups' ports), its notify socket bound again, its exit watched.
    fn take_back(&self, index: u32, w: &WorkerHandover) -> anyhow::Result<(Worker, Vec<Socket>)> {
        let started = pidfd::start_ticks(w.pid).context("the process is gone")?;
        anyhow::ensure!(
            w.start_ticks == Some(started),
            "pid {} is another process now (started at tick {started}, not {:?})",
            w.pid,
            w.start_ticks
        );
        let pidfd = pidfd::open(w.pid).context("pidfd_open")?;
        let mut sockets = Vec::new();
        for (i, group) in self.groups.iter().enumerate() {
            let fd = 3 + i as i32;
            let socket = Socket::from(
                pidfd::get_fd(&pidfd, fd).with_context(|| format!("pidfd_getfd of its fd {fd}"))?,
            );
            let local = socket
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .with_context(|| format!("its fd {fd} is not an inet socket"))?;
            anyhow::ensure!(
                local.port() == group.addr.addr.port() && socket.is_listener().unwrap_or(false),
                "its fd {fd} is not listening on {} (it is {local})",
                group.addr.addr
            );
            sockets.push(socket);
        }
        let cgroup = w
            .cgroup
            .clone()
            .map(|(dir, memory)| WorkerCgroup::resume(dir, memory))
            .transpose()?;
        let notify_name = w.notify_name.clone().context("no notify socket recorded")?;
        let notify = NotifySocket::rebind(&notify_name)
            .with_context(|| format!("binding {notify_name} again"))?;
        tracing::info!(
            slot = index,
            pid = w.pid,
            fd = pidfd.as_raw_fd(),
            "worker taken back"
        );
        let worker = self.watch_again(
            index,
            w,
            pidfd,
            Some(notify.socket),
            cgroup,
            ExitSeen::Adopted,
        )?;
        Ok((worker, sockets))
    }
}
