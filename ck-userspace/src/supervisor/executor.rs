//! The executor of the lifecycle machine: feeds inputs to [`lifecycle::step`] and runs the
//! effects it returns in their fixed order (publish, signal, close, forget, spawn, arm), one
//! publish per batch. Nothing else in the supervisor changes a slot's state, publishes, signals
//! a worker or closes a socket.
use std::time::Instant;

use nix::sys::signal::Signal;

use super::{
    Supervisor,
    lifecycle::{self, Effect, Fleet, Input, Note, Sig},
};

impl Supervisor {
    /// Feeds one input to one slot.
    pub(super) fn apply(&mut self, index: u32, input: Input) {
        self.apply_all(vec![(index, input)]);
    }

    /// Feeds several inputs (a roll's flip, a scale-down, the shutdown) and runs all their
    /// effects together: one publish covers every change, before any signal or close.
    pub(super) fn apply_all(&mut self, inputs: Vec<(u32, Input)>) {
        let now = Instant::now();
        let mut effects = Vec::new();
        for (index, input) in inputs {
            let fleet = Fleet::of(index, self.lives(), now, jitter(), self.stopping);
            let Some(slot) = self.slots.get_mut(&index) else {
                continue;
            };
            let exited = matches!(input, Input::Exited { .. } | Input::Superseded);
            let buried = if exited {
                // The process is gone: drop its handles (the notify reader stops) and copies
                // of sockets not adopted yet (never in the maps), and kill whatever it left in
                // its cgroup.
                slot.adopting.clear();
                slot.worker.take().and_then(|mut w| w.cgroup.take())
            } else {
                None
            };
            let out = lifecycle::step(&mut slot.life, input, &fleet, &self.settings);
            effects.extend(out.into_iter().map(|effect| (index, effect)));
            if let Some(cgroup) = buried {
                self.bury_cgroup(cgroup);
            }
        }
        lifecycle::schedule(&mut effects);
        self.state_dirty = true;
        let mut published = false;
        let mut became_ready = Vec::new();
        let mut stopping = Vec::new();
        for (index, effect) in effects {
            match effect {
                Effect::Note(note) => {
                    if matches!(note, Note::Ready(_)) {
                        became_ready.push(index);
                    }
                    if matches!(note, Note::Stopping(_)) {
                        stopping.push(index);
                    }
                    self.log_note(index, note);
                }
                Effect::Publish if published => {}
                Effect::Publish => {
                    self.publish();
                    published = true;
                }
                Effect::Signal(sig) => self.signal(index, sig),
                Effect::CloseSockets => {
                    if let Some(slot) = self.slots.get_mut(&index) {
                        slot.sockets.clear();
                    }
                }
                Effect::CloseReplaced => {
                    if let Some(slot) = self.slots.get_mut(&index) {
                        slot.replaced.clear();
                    }
                }
                Effect::Remove => self.forget_slot(index),
                Effect::Spawn => {
                    let answer = match self.spawn_worker(index) {
                        Ok(id) => Input::Spawned { id },
                        Err(e) => {
                            tracing::error!(slot = index, "starting a worker failed: {e:#}");
                            let slot = self.slots.get_mut(&index).expect("spawning slot exists");
                            slot.last_exit = Some(format!("spawn failed: {e:#}"));
                            let socket_open = !slot.sockets.is_empty();
                            self.spawn_failure.get_or_insert(e);
                            Input::SpawnFailed { socket_open }
                        }
                    };
                    self.apply(index, answer);
                }
                Effect::Arm(timer, delay, epoch) => self.set_timer(index, epoch, timer, delay),
            }
        }
        // A stopping worker's further listeners (--adopt, forking servers) stop with it.
        if !stopping.is_empty() {
            self.retire_members(&stopping);
        }
        // A roll waiting for a replacement flips its batch once all of it is ready: from the
        // event loop, not from inside this batch (which a roll may itself have started).
        for index in became_ready {
            let _ = self.events.send(super::Event::BecameReady(index));
        }
    }

    /// Every slot's life, for the machine's views.
    pub(super) fn lives(&self) -> impl Iterator<Item = (u32, &lifecycle::Life)> + Clone {
        self.slots.iter().map(|(index, slot)| (*index, &slot.life))
    }

    fn signal(&self, index: u32, sig: Sig) {
        let Some(worker) = self.slots.get(&index).and_then(|s| s.worker.as_ref()) else {
            return;
        };
        let signal = match sig {
            Sig::Term => Signal::SIGTERM,
            Sig::Kill => Signal::SIGKILL,
        };
        // SIGKILL takes the whole tree the worker started, not only its first process.
        if let (Sig::Kill, Some(cgroup)) = (sig, &worker.cgroup)
            && cgroup.kill().is_ok()
        {
            return;
        }
        if let Err(e) = crate::os::pidfd::send_signal(&worker.pidfd, signal) {
            tracing::warn!(
                slot = index,
                pid = worker.pid,
                "{} failed: {e}",
                signal.as_str()
            );
        }
    }

    /// Writes the machine's note as one lifecycle log line with the slot and pid.
    fn log_note(&self, index: u32, note: Note) {
        let Some(slot) = self.slots.get(&index) else {
            return;
        };
        let pid = slot.pid();
        let generation = slot.life.generation;
        match note {
            Note::Started => tracing::info!(slot = index, pid, generation, "worker started"),
            Note::Ready(reason) => {
                let boot_ms = slot
                    .worker
                    .as_ref()
                    .map_or(0, |w| w.started.elapsed().as_millis() as u64);
                tracing::info!(
                    slot = index,
                    pid,
                    boot_ms,
                    reason = reason.as_str(),
                    "worker ready"
                );
            }
            Note::Draining(reason) => tracing::info!(
                slot = index,
                pid,
                reason = reason.as_str(),
                "worker draining"
            ),
            Note::Undrained => tracing::info!(
                slot = index,
                pid,
                reason = "ck undrain",
                "worker back in the active set"
            ),
            Note::Unhealthy(reason) => tracing::warn!(
                slot = index,
                pid,
                reason = reason.as_str(),
                "worker unhealthy: out of the active set, socket open"
            ),
            Note::Healthy(reason) => tracing::info!(
                slot = index,
                pid,
                reason = reason.as_str(),
                "worker healthy again"
            ),
            Note::FlippedIn => tracing::info!(slot = index, pid, "replacement flipped in"),
            Note::Stopping(reason) => tracing::info!(
                slot = index,
                pid,
                reason = reason.as_str(),
                "worker stopping (SIGTERM)"
            ),
            Note::NotReadyInTime(timeout) => tracing::warn!(
                slot = index,
                pid,
                reason = %format!("not ready within --ready-timeout {timeout:?}"),
                "worker replaced (SIGKILL)"
            ),
            Note::KilledAtDrainTimeout => tracing::warn!(
                slot = index,
                pid,
                reason = "drain timeout",
                "worker killed (SIGKILL)"
            ),
            Note::RestartNow => tracing::info!(
                slot = index,
                reason = "it had been serving: replaced at once",
                "worker restarting"
            ),
            Note::RestartIn(delay) => tracing::info!(
                slot = index,
                delay_ms = delay.as_millis() as u64,
                reason = "exited before it was ready or right after: boot-crash backoff",
                "restart scheduled"
            ),
            Note::Restarting => tracing::info!(
                slot = index,
                restart = slot.life.restarts,
                "worker restarting"
            ),
            Note::BreakerOpen { crashes, cooldown } => tracing::error!(
                slot = index,
                crashes,
                cooldown_s = cooldown.as_secs_f64(),
                "circuit breaker open: the worker keeps crashing at start; next try after the cool-down"
            ),
            Note::HalfOpen { every, min_workers } => tracing::error!(
                slot = index,
                every_s = every.as_secs_f64(),
                min_workers,
                "fleet degraded: the worker keeps crashing at start, but the breaker stays half-open \
                 (--min-workers): retrying at the maximum backoff"
            ),
            Note::Held => tracing::info!(
                slot = index,
                "last socket of its group kept open: connections queue for the replacement"
            ),
            Note::Retired => tracing::info!(slot = index, pid, "slot retired"),
            Note::Adopted => tracing::info!(
                slot = index,
                pid,
                listen_to_adopted_us = slot.worker.as_ref().and_then(|w| w.adopt_latency_us),
                "worker's listening socket adopted"
            ),
            Note::StandbyFailed => {
                tracing::warn!(slot = index, pid, "replacement failed: not restarted")
            }
        }
    }
}

/// Cheap jitter from the clock's nanoseconds: enough to spread restarts of slots that crashed
/// together, no RNG dependency needed.
pub(super) fn jitter() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| f64::from(d.subsec_nanos() % 1000) / 1000.0)
        .unwrap_or(0.5)
}
