//! Worker lifecycle: start (sockets, notify socket, spawn, timers), readiness, exit (out of the
//! active set, socket closed so its queue migrates, restart by the crash policy), stop and kill.
use std::{os::fd::AsRawFd as _, process::ExitStatus, time::Instant};

use anyhow::Context as _;
use nix::sys::signal::Signal;

use super::{
    Event, Supervisor, TimerKind,
    slot::{CrashDecision, Idle, Phase, Stop, Worker},
};
use crate::{
    config::ReadyMode,
    notify::{self, NotifyMsg, NotifySocket},
    sockets,
    spawn::{self, SpawnSpec},
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

impl Supervisor {
    /// Opens the slot's sockets if needed, puts them in the maps and starts a worker on them.
    pub(super) fn start_worker(&mut self, index: u32) -> anyhow::Result<()> {
        let worker_id = self.next_worker_id;
        self.next_worker_id += 1;
        let name = self.cfg.name.clone();
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        if slot.sockets.is_empty() {
            for group in &mut self.groups {
                let socket = sockets::open_member(group.addr)?;
                if let Some(bpf) = &mut group.bpf {
                    bpf.insert(index, &socket)?;
                    bpf.attach(&socket)?;
                }
                slot.sockets.push(socket);
            }
        }
        slot.generation += 1;
        slot.last_worker = worker_id;
        let generation = slot.generation;
        let notify = NotifySocket::bind(&name, index, worker_id)
            .context("binding the worker's NOTIFY_SOCKET")?;
        let spawned = spawn::spawn(SpawnSpec {
            app: &self.cfg.app,
            slot: index,
            worker_id,
            fds: slot.sockets.iter().map(|s| s.as_raw_fd()).collect(),
            fd_names: self.groups.iter().map(|g| g.name.clone()).collect(),
            notify_socket: notify.env_value.clone(),
            watchdog_usec: self.cfg.health.watchdog.map(|d| d.as_micros() as u64),
        })
        .with_context(|| format!("spawning {}", self.cfg.app.program.display()))?;
        let pid = spawned.pid;
        let events = self.events.clone();
        let mut child = spawned.child;
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = events.send(Event::Exited {
                slot: index,
                worker: worker_id,
                status,
            });
        });
        let events = self.events.clone();
        let notify_task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok(len) = notify.socket.recv(&mut buf).await {
                let msgs = notify::parse(&buf[..len]);
                if events
                    .send(Event::Notify {
                        slot: index,
                        worker: worker_id,
                        msgs,
                    })
                    .is_err()
                {
                    return;
                }
            }
        });
        slot.worker = Some(Worker {
            id: worker_id,
            pid,
            pidfd: spawned.pidfd,
            started: Instant::now(),
            phase: Phase::Starting,
            spoke_notify: false,
            status: None,
            stop: None,
            notify_task,
            health: Default::default(),
        });
        slot.idle = Idle::Stopped;
        tracing::info!(slot = index, pid, generation, "worker started");
        match self.cfg.ready {
            ReadyMode::Spawn => self.mark_ready(index, "ready on spawn (--ready spawn)"),
            // With probes, a silent worker is ready at its first passing probe instead.
            ReadyMode::Auto if self.cfg.health.probe.is_some() => {}
            ReadyMode::Auto => self.set_timer(
                index,
                worker_id,
                TimerKind::ReadyGrace,
                self.cfg.ready_grace,
            ),
            ReadyMode::Notify => {}
        }
        self.set_timer(
            index,
            worker_id,
            TimerKind::ReadyTimeout,
            self.cfg.ready_timeout,
        );
        self.publish();
        Ok(())
    }

    pub(super) fn mark_ready(&mut self, index: u32, reason: &str) {
        let Some(worker) = self.slots.get_mut(&index).and_then(|s| s.worker.as_mut()) else {
            return;
        };
        if !matches!(worker.phase, Phase::Starting | Phase::Draining) {
            return;
        }
        worker.phase = Phase::Ready;
        tracing::info!(
            slot = index,
            pid = worker.pid,
            boot_ms = worker.started.elapsed().as_millis() as u64,
            reason,
            "worker ready"
        );
        self.publish();
        self.roll_on_ready(index);
    }

    /// Looks up the live worker of `index` if it is worker `id`.
    fn worker_mut(&mut self, index: u32, id: u64) -> Option<&mut Worker> {
        self.slots
            .get_mut(&index)?
            .worker
            .as_mut()
            .filter(|w| w.id == id)
    }

    pub(super) fn on_notify(&mut self, index: u32, id: u64, msgs: Vec<NotifyMsg>) {
        for msg in msgs {
            let Some(worker) = self.worker_mut(index, id) else {
                return;
            };
            worker.spoke_notify = true;
            let pid = worker.pid;
            match msg {
                NotifyMsg::Ready => self.mark_ready(index, "READY=1"),
                NotifyMsg::Stopping => {
                    if worker.phase != Phase::Stopping {
                        worker.phase = Phase::Draining;
                        tracing::info!(slot = index, pid, reason = "STOPPING=1", "worker draining");
                        self.publish();
                    }
                }
                NotifyMsg::Status(text) => worker.status = Some(text),
                NotifyMsg::Watchdog => self.on_watchdog(index),
                NotifyMsg::Other => {}
            }
        }
    }

    pub(super) fn on_timer(&mut self, index: u32, id: u64, kind: TimerKind) {
        if kind == TimerKind::Restart {
            let Some(slot) = self.slots.get(&index) else {
                return;
            };
            if self.stopping || slot.worker.is_some() || slot.last_worker != id {
                return;
            }
            let restart = slot.restarts + 1;
            if let Some(slot) = self.slots.get_mut(&index) {
                slot.restarts = restart;
            }
            tracing::info!(slot = index, restart, "worker restarting");
            if let Err(e) = self.start_worker(index) {
                tracing::error!(slot = index, "restart failed: {e:#}");
                let last = self.slots.get(&index).map_or(id, |s| s.last_worker);
                self.after_crash(index, last, std::time::Duration::ZERO);
            }
            return;
        }
        let ready_grace = self.cfg.ready_grace;
        let ready_timeout = self.cfg.ready_timeout;
        let Some(worker) = self.worker_mut(index, id) else {
            return;
        };
        let pid = worker.pid;
        match kind {
            TimerKind::ReadyGrace => {
                if worker.phase == Phase::Starting && !worker.spoke_notify {
                    self.mark_ready(
                        index,
                        &format!(
                            "sent nothing on NOTIFY_SOCKET within {ready_grace:?}; taken as ready \
                             (use --ready notify to wait for READY=1)"
                        ),
                    );
                }
            }
            TimerKind::ReadyTimeout => {
                if worker.phase == Phase::Starting {
                    tracing::warn!(
                        slot = index,
                        pid,
                        reason = %format!("not ready within --ready-timeout {ready_timeout:?}"),
                        "worker replaced"
                    );
                    worker.stop = Some(Stop::NeverReady);
                    worker.phase = Phase::Stopping;
                    let _ = spawn::send_signal(&worker.pidfd, Signal::SIGKILL);
                }
            }
            TimerKind::Kill => {
                if worker.phase == Phase::Stopping {
                    tracing::warn!(
                        slot = index,
                        pid,
                        reason = "drain timeout",
                        "worker killed (SIGKILL)"
                    );
                    let _ = spawn::send_signal(&worker.pidfd, Signal::SIGKILL);
                }
            }
            TimerKind::Restart => {}
        }
    }

    pub(super) fn on_exit(&mut self, index: u32, id: u64, status: std::io::Result<ExitStatus>) {
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        let Some(worker) = slot.worker.take_if(|w| w.id == id) else {
            return;
        };
        worker.notify_task.abort();
        let reason = describe_exit(&status);
        let ran = worker.started.elapsed();
        let expected = matches!(worker.stop, Some(Stop::Asked(_)));
        slot.last_exit = Some(match worker.stop {
            Some(Stop::NeverReady) => format!("{reason} (never became ready)"),
            _ => reason.clone(),
        });
        // Out of the maps first, then close our copy of the socket: the kernel migrates what is
        // queued on it through the program to a live worker.
        self.publish();
        let slot = self.slots.get_mut(&index).expect("slot exists");
        slot.sockets.clear();
        let retiring = slot.retiring;
        tracing::info!(
            slot = index,
            pid = worker.pid,
            reason = %slot.last_exit.as_deref().unwrap_or(""),
            ran_ms = ran.as_millis() as u64,
            "worker exited"
        );
        if self.is_replacement(index) {
            let why = match worker.stop {
                Some(Stop::NeverReady) => format!(
                    "was not ready within --ready-timeout {:?}",
                    self.cfg.ready_timeout
                ),
                _ => format!("exited before it was ready ({reason})"),
            };
            self.abort_roll(index, why);
            self.remove_slot(index);
            return;
        }
        if retiring {
            tracing::info!(slot = index, "slot retired");
            self.remove_slot(index);
            return;
        }
        if self.stopping || expected {
            if let Some(slot) = self.slots.get_mut(&index) {
                slot.idle = Idle::Stopped;
            }
            return;
        }
        self.after_crash(index, id, ran);
    }

    /// Applies the crash policy to a slot whose worker died or could not start.
    fn after_crash(&mut self, index: u32, id: u64, ran: std::time::Duration) {
        // Cheap jitter from the clock's nanoseconds: enough to spread restarts of slots that
        // crashed together, no RNG dependency needed.
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| f64::from(d.subsec_nanos() % 1000) / 1000.0)
            .unwrap_or(0.5);
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        match slot.crashes.on_crash(Instant::now(), ran, jitter) {
            CrashDecision::RestartIn(delay) => {
                slot.idle = Idle::Restarting;
                tracing::info!(
                    slot = index,
                    delay_ms = delay.as_millis() as u64,
                    "restart scheduled"
                );
                self.set_timer(index, id, TimerKind::Restart, delay);
            }
            CrashDecision::BreakerOpen(cooldown) => {
                slot.idle = Idle::Broken;
                tracing::error!(
                    slot = index,
                    cooldown_s = cooldown.as_secs(),
                    "circuit breaker open: the worker keeps crashing; next try after the cool-down"
                );
                self.set_timer(index, id, TimerKind::Restart, cooldown);
            }
        }
        self.publish();
    }

    /// Asks the slot's worker to stop (SIGTERM), with SIGKILL after the drain timeout.
    pub(super) fn stop_worker(&mut self, index: u32, reason: &'static str) {
        let drain_timeout = self.cfg.drain_timeout;
        let Some(worker) = self.slots.get_mut(&index).and_then(|s| s.worker.as_mut()) else {
            return;
        };
        if worker.phase == Phase::Stopping {
            return;
        }
        worker.phase = Phase::Stopping;
        worker.stop = Some(Stop::Asked(reason));
        let (pid, id) = (worker.pid, worker.id);
        if let Err(e) = spawn::send_signal(&worker.pidfd, Signal::SIGTERM) {
            tracing::warn!(slot = index, pid, "SIGTERM failed: {e}");
        }
        tracing::info!(slot = index, pid, reason, "worker stopping (SIGTERM)");
        self.set_timer(index, id, TimerKind::Kill, drain_timeout);
    }

    /// SIGKILLs every live worker (a second stop request).
    pub(super) fn kill_all(&mut self) {
        for slot in self.slots.values() {
            if let Some(worker) = &slot.worker {
                let _ = spawn::send_signal(&worker.pidfd, Signal::SIGKILL);
            }
        }
    }
}
