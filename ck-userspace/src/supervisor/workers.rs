//! Workers as processes: spawning one on a slot (sockets opened and put in the maps, program
//! attached when the socket founds its group, notify reader, exit waiter), and turning what
//! workers do (notify messages, exits, readiness timers) into lifecycle inputs.
use std::{os::fd::AsRawFd as _, process::ExitStatus};

use anyhow::Context as _;
use nix::sys::signal::Signal;

use super::{
    Event, Supervisor,
    lifecycle::{After, Input, State, Timer},
    output,
    slot::Worker,
};
use crate::{
    os::notify::{self, NotifyMsg, NotifySocket},
    os::sockets,
    os::spawn::{self, SpawnSpec},
    settings::stop_signal::StopSignal,
};

/// Describes how a process ended: `exit 0`, `exit 3`, `signal SIGKILL`.
pub(crate) fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => match Signal::try_from(sig) {
                Ok(sig) => format!("signal {}", sig.as_str()),
                Err(_) => format!("signal {sig}"),
            },
            _ => "unknown".to_string(),
        },
        Err(e) => format!("wait failed: {e}"),
    }
}

/// Whether the process was killed by a signal that only others send (an operator, the OOM
/// killer, a chaos test): SIGKILL, SIGTERM, SIGINT, or the app's `--stop-signal` (an operator
/// stops nginx with SIGQUIT). Crashes of its own (exit codes, SIGSEGV, SIGABRT, ...) are not.
/// (A worker ck itself stopped is a clean stop whatever it died of: the machine knows it asked.)
pub(crate) fn killed_from_outside(
    status: &std::io::Result<ExitStatus>,
    stop_signal: StopSignal,
) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    let Ok(status) = status else {
        return false;
    };
    let Some(signal) = status.signal().and_then(|s| Signal::try_from(s).ok()) else {
        return false;
    };
    matches!(signal, Signal::SIGKILL | Signal::SIGTERM | Signal::SIGINT)
        || signal == stop_signal.signal()
}

impl Supervisor {
    /// Opens the slot's sockets if they are closed (putting them in the maps, and attaching the
    /// program to a socket that founds its group), then spawns a worker on them. Returns its id.
    pub(super) fn spawn_worker(&mut self, index: u32) -> anyhow::Result<u64> {
        let worker_id = self.next_worker_id;
        self.next_worker_id += 1;
        let founding = !self
            .slots
            .values()
            .any(|s| s.index != index && !s.sockets.is_empty());
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        // With --adopt the worker opens its own sockets; the slot gets them when they are
        // adopted (a held socket stays the slot's until then).
        if slot.sockets.is_empty() && !self.cfg.adopt {
            for group in &mut self.groups {
                let socket = sockets::bind_member(group.addr)?;
                // Tagged before it listens: the kernel counts its first connection too.
                if let Some(bpf) = &mut group.bpf {
                    bpf.tag(index, &socket);
                }
                sockets::listen_member(&socket, group.addr)?;
                if let Some(bpf) = &mut group.bpf {
                    bpf.place(index, &socket)?;
                    if founding {
                        // Attachment belongs to the group: a group founded anew has no program.
                        bpf.attach(&socket)?;
                        tracing::info!(group = %group.name, slot = index, "BPF program attached to the group");
                    }
                }
                slot.sockets.push(socket);
            }
        }
        let notify = NotifySocket::bind(&self.cfg.name, index, worker_id)
            .context("binding the worker's NOTIFY_SOCKET")?;
        let cgroup = self.worker_cgroup(worker_id)?;
        if let Some(cgroup) = &cgroup {
            self.bind_cgroup(cgroup, index);
        }
        let pipes = self
            .output
            .as_ref()
            .map(|_| capture_pipes())
            .transpose()
            .context("making the worker's output pipes")?;
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        let socket_fds = match self.cfg.adopt {
            true => 0,
            false => slot.sockets.len(),
        };
        // --survive-supervisor: the worker holds its pipes' read ends too (after its sockets),
        // so its writes block, and never fail, while no ck reads; the next ck copies them.
        let keep = self.cfg.survive_supervisor && pipes.is_some();
        // A replacement of a worker that died (its slot waits or holds its socket; not a spare):
        // the fleet is short of it until it boots.
        let replacing = matches!(
            slot.life.state,
            State::Waiting | State::Held | State::Broken
        ) && !slot.life.spare;
        let spawned = spawn::spawn(SpawnSpec {
            app: &self.cfg.app,
            slot: index,
            worker_id,
            fds: match self.cfg.adopt {
                true => Vec::new(),
                false => slot.sockets.iter().map(|s| s.as_raw_fd()).collect(),
            },
            fd_names: self.groups.iter().map(|g| g.name.clone()).collect(),
            notify_socket: notify.env_value.clone(),
            watchdog_usec: self.cfg.health.watchdog.map(|d| d.as_micros() as u64),
            cgroup: cgroup.as_ref(),
            adopt_port: self.cfg.adopt.then(|| self.cfg.listen[0].addr.port()),
            adopt_listen: match self.cfg.adopt {
                true => self.cfg.listen.iter().map(|a| a.addr).collect(),
                false => Vec::new(),
            },
            fd_limit: self.fd_limit,
            user: self.cfg.user.as_ref(),
            pdeathsig: !self.cfg.survive_supervisor,
            output: pipes.as_ref().map(|p| p.writes()).transpose()?,
            keep_fds: match (&pipes, keep) {
                (Some(p), true) => p.reads().to_vec(),
                _ => Vec::new(),
            },
        });
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                if let Some(cgroup) = cgroup {
                    self.unbind_cgroup(&cgroup);
                    cgroup.remove();
                }
                return Err(e)
                    .with_context(|| format!("spawning {}", self.cfg.app.program.display()));
            }
        };
        let pid = spawned.pid;
        let generation = slot.life.generation + 1;
        let output = match (pipes, &self.output) {
            (Some(pipes), Some(hub)) => {
                let first = 3 + socket_fds as i32;
                let ends = pipes.into_ends(keep.then_some([first, first + 1]))?;
                let from = output::Source {
                    slot: index,
                    pid,
                    // The `Spawned` input that follows this spawn counts the new generation.
                    generation,
                    stream: output::Stream::Stdout,
                };
                hub.read(&ends, from, &slot.output_dropped)
                    .context("reading the worker's output")?;
                Some(ends)
            }
            _ => None,
        };
        let events = self.events.clone();
        let waiter = spawned
            .pidfd
            .try_clone()
            .context("duplicating the worker's pidfd")?;
        let (exec, program) = (spawned.exec, self.cfg.app.program.clone());
        tokio::spawn(async move {
            // Read here, not in `spawn`: the loop does not wait for the child's exec. A child
            // that could not exec exits 127 (a boot crash).
            if let Err(e) = exec.result().await {
                tracing::error!(slot = index, pid, "spawning {}: {e}", program.display());
            }
            let status = crate::os::pidfd::wait_child(waiter, pid).await;
            let _ = events.send(Event::Exited {
                slot: index,
                worker: worker_id,
                status,
            });
        });
        let notify_socket = notify.socket.clone();
        let notify_name = notify.env_value.clone();
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let speakers = notify::Speakers {
            worker: pid,
            cgroup: cgroup.as_ref().map(|c| c.dir().to_path_buf()),
        };
        let notify_task = watch_notify(
            &self.events,
            index,
            worker_id,
            speakers,
            notify.socket.clone(),
            refused.clone(),
        );
        slot.last_pid = pid;
        let selected_base = self.slot_stats(index).selected;
        let requests_limit = self.requests_limit(super::world::jitter());
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        let mut worker = Worker::spawned(pid, spawned.pidfd, selected_base, replacing);
        worker.tasks.push(notify_task);
        worker.notify = Some(notify_socket);
        worker.cgroup = cgroup;
        worker.requests_limit = requests_limit;
        worker.notify_refused = refused;
        worker.notify_name = Some(notify_name);
        worker.output = output;
        slot.worker = Some(worker);
        self.state_dirty = true;
        self.watch_exit(index, pid);
        if founding && self.bpf_loaded() {
            self.check_steering_soon();
        }
        // A silent starter is checked for readiness within a few sample intervals, whatever
        // the pace of sampling: the next tick comes now.
        self.pacer.tick_now();
        Ok(worker_id)
    }

    /// The worker of `index` is ready for `why` (a roll waiting for it may flip: see the
    /// executor).
    pub(super) fn mark_ready(&mut self, index: u32, why: String) {
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        // --adopt: not before its socket is adopted; adoption asks again.
        let adopted = slot.life.state.run().is_some_and(|run| run.adopted);
        if let Some(worker) = slot.worker.as_mut().filter(|_| self.cfg.adopt && !adopted) {
            worker.said_ready = true;
            return;
        }
        if let Some(worker) = slot.worker.as_mut() {
            worker.accept_probe.end();
        }
        let healthy = slot.worker.as_ref().is_some_and(|w| w.health.is_healthy());
        self.apply(index, Input::Ready { why, healthy });
    }

    /// Looks up the live worker of `index` if it is worker `id`.
    pub(super) fn worker_mut(&mut self, index: u32, id: u64) -> Option<&mut Worker> {
        self.slots.get_mut(&index)?.worker_of_mut(id)
    }

    pub(super) fn on_notify(&mut self, index: u32, id: u64, msgs: Vec<NotifyMsg>) {
        for msg in msgs {
            let probe_decides = self.probe_decides(index);
            let Some(worker) = self.worker_mut(index, id) else {
                return;
            };
            worker.spoke_notify = true;
            // It speaks the protocol: READY=1 decides, its accept probe (if sent) is reset.
            worker.accept_probe.end();
            match msg {
                // --ready probe: the probe, not READY=1, makes a starting worker ready.
                NotifyMsg::Ready if probe_decides => {}
                NotifyMsg::Ready => self.mark_ready(index, "READY=1".into()),
                NotifyMsg::Stopping => {
                    self.apply(index, Input::WorkerDraining);
                }
                NotifyMsg::Status(text) => worker.status = Some(text),
                NotifyMsg::Watchdog => self.on_watchdog(index),
                NotifyMsg::Other => {}
            }
        }
    }

    pub(super) fn on_timer(&mut self, index: u32, epoch: u64, timer: Timer) {
        if timer == Timer::ReadyGrace {
            self.on_ready_grace(index, epoch);
        } else {
            self.apply(index, Input::Timer(timer, epoch));
        }
    }

    /// Slot `index`'s worker `id` exited with `status`, as `seen` says.
    pub(super) fn on_exit(
        &mut self,
        index: u32,
        id: u64,
        status: std::io::Result<ExitStatus>,
        seen: super::exits::ExitReport,
    ) {
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        let (Some(worker), Some(ran)) = (slot.worker_of(id), slot.uptime()) else {
            return;
        };
        let pid = worker.pid;
        if let Some(watch) = &mut self.exit_watch {
            watch.unwatch(pid);
        }
        let reason = describe_exit(&status);
        let never_ready = matches!(slot.life.state, State::Stopping(_, After::Crash));
        slot.last_exit = Some(if never_ready {
            format!("{reason} (never became ready)")
        } else {
            reason.clone()
        });
        tracing::info!(
            slot = index,
            pid,
            reason = %slot.last_exit.as_deref().unwrap_or(""),
            ran_ms = ran.as_millis() as u64,
            seen = seen.name(),
            "worker exited"
        );
        let outside = killed_from_outside(&status, self.cfg.stop_signal);
        // Words for the roll's abort, should the worker be one of its replacements.
        let why = if never_ready {
            format!(
                "was not ready within --ready-timeout {:?}",
                self.cfg.ready_timeout
            )
        } else {
            format!("exited before it was flipped in ({reason})")
        };
        super::executor::fleet::on_death(self, index, outside, why);
    }

    /// SIGKILLs every live worker (a second interrupt).
    pub(super) fn kill_all(&mut self) {
        let all = self.slots.keys().map(|i| (*i, Input::KillNow)).collect();
        self.apply_all(all);
    }
}

/// A new worker's stdout and stderr pipes.
struct CapturePipes {
    stdout: crate::os::pipe::OutputPipe,
    stderr: crate::os::pipe::OutputPipe,
}

fn capture_pipes() -> std::io::Result<CapturePipes> {
    Ok(CapturePipes {
        stdout: crate::os::pipe::OutputPipe::new()?,
        stderr: crate::os::pipe::OutputPipe::new()?,
    })
}

impl CapturePipes {
    /// Copies of the write ends, for the child's fds 1 and 2 (ck's own close with `self`).
    fn writes(&self) -> std::io::Result<[std::os::fd::OwnedFd; 2]> {
        Ok([
            self.stdout.write.try_clone()?,
            self.stderr.write.try_clone()?,
        ])
    }

    /// The read ends' numbers in ck.
    fn reads(&self) -> [std::os::fd::RawFd; 2] {
        [self.stdout.read.as_raw_fd(), self.stderr.read.as_raw_fd()]
    }

    /// ck's read ends (the write ends close here: the worker holds its own).
    fn into_ends(self, in_worker: Option<[i32; 2]>) -> std::io::Result<output::OutputEnds> {
        use std::os::fd::AsFd as _;
        let inodes = [
            crate::os::pipe::inode(self.stdout.read.as_fd())?,
            crate::os::pipe::inode(self.stderr.read.as_fd())?,
        ];
        Ok(output::OutputEnds {
            ends: [self.stdout.read, self.stderr.read],
            inodes,
            in_worker,
        })
    }
}

/// Counts a notify message from outside worker `pid`'s tree, and logs the first of them and
/// then every power of two (a flood must not flood the log).
fn refuse_notify(slot: u32, pid: u32, sender: Option<u32>, refused: &std::sync::atomic::AtomicU64) {
    let n = refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            slot,
            pid,
            sender = sender.map_or("unknown".into(), |p| p.to_string()),
            refused = n,
            "notify message ignored: its sender is not the worker or a process of its tree"
        );
    }
}

/// Starts the task that reads worker `worker_id`'s notify socket and turns what its tree
/// sends into [`Event::Notify`] (counting in `refused` what others send).
pub(super) fn watch_notify(
    events: &tokio::sync::mpsc::UnboundedSender<Event>,
    index: u32,
    worker_id: u64,
    speakers: notify::Speakers,
    socket: std::sync::Arc<tokio::net::UnixDatagram>,
    refused: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let events = events.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((len, sender)) = notify::recv(&socket, &mut buf).await {
            if !speakers.allow(sender) {
                refuse_notify(index, speakers.worker, sender, &refused);
                continue;
            }
            let msgs = notify::parse(&buf[..len]);
            let event = Event::Notify {
                slot: index,
                worker: worker_id,
                msgs,
            };
            if events.send(event).is_err() {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    fn killed_by(signal: Signal) -> std::io::Result<ExitStatus> {
        Ok(ExitStatus::from_raw(signal as i32))
    }

    #[test]
    fn the_stop_signal_counts_as_from_outside_beside_kill_term_and_int() {
        let quit: StopSignal = "QUIT".parse().unwrap();
        for signal in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
            assert!(killed_from_outside(&killed_by(signal), StopSignal::TERM));
            assert!(killed_from_outside(&killed_by(signal), quit));
        }
        assert!(killed_from_outside(&killed_by(Signal::SIGQUIT), quit));
        assert!(!killed_from_outside(
            &killed_by(Signal::SIGQUIT),
            StopSignal::TERM
        ));
        assert!(!killed_from_outside(&killed_by(Signal::SIGSEGV), quit));
        assert!(!killed_from_outside(
            &Ok(ExitStatus::from_raw(3 << 8)),
            quit
        ));
    }
}
