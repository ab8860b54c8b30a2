//! The supervisor as the executor's [`World`]: the machine's effects on the real OS (the BPF
//! maps, pidfds, sockets, cgroups, timers, log lines), and [`Supervisor::apply`] /
//! [`Supervisor::apply_all`], through which every part of the supervisor feeds the machine.
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use socket2::Socket;

use super::{
    event::Event,
    event_loop::Supervisor,
    executor::{self, Outcome, World, decisions::FleetEvent},
    fleet::{self, Core, Shape, slow_start, spread},
    groups::Join,
    lifecycle::{self, Input, Life, Note, Settings, Sig, Timer},
    slots::slot::Slot,
};

impl Supervisor {
    /// Feeds one input to one slot; says which spawns failed.
    pub(super) fn apply(&mut self, index: u32, input: Input) -> Outcome<anyhow::Error> {
        self.apply_all(vec![(index, input)])
    }

    /// Feeds several inputs and runs all their effects together (see [`executor::run`]).
    pub(super) fn apply_all(&mut self, inputs: Vec<(u32, Input)>) -> Outcome<anyhow::Error> {
        executor::run(self, inputs)
    }
}

impl World for Supervisor {
    type SpawnError = anyhow::Error;

    fn lives(&self) -> impl Iterator<Item = (u32, &lifecycle::Life)> + Clone {
        self.table.lives()
    }

    fn life_mut(&mut self, index: u32) -> Option<&mut lifecycle::Life> {
        self.table.slots.get_mut(&index).map(|slot| &mut slot.life)
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn random(&self) -> f64 {
        jitter()
    }

    fn stopping(&self) -> bool {
        self.stopping
    }

    fn maps_pending(&self) -> bool {
        // Cleared once the loaded program takes the pinned maps over (`steer.rs`).
        self.continuity.bpf_resumed
    }

    fn exited(&mut self, index: u32) {
        let Some(slot) = self.table.slots.get_mut(&index) else {
            return;
        };
        // The process is gone: drop its handles (the notify reader stops) and copies of
        // sockets not adopted yet (never in the maps), and kill whatever it left in its cgroup.
        slot.adopting.clear();
        let Some(mut worker) = slot.worker.take() else {
            return;
        };
        // Its accept probe, if it never took it, may wait in the queue for the next worker.
        if let Some(conn) = worker.accept_probe.take_conn() {
            slot.queued_probe = Some(conn);
        }
        if let Some(cgroup) = worker.cgroup.take() {
            self.groups.unbind_cgroup(&cgroup);
            self.table.bury_cgroup(cgroup);
        }
    }

    fn note(&mut self, index: u32, note: Note) {
        let signal = self.cfg.stop_signal.name();
        super::reports::notes::log(&self.table, index, note, signal);
    }

    /// Every group gets the worker's socket in the slot's place in its `sockets` map (the
    /// program attached through it if it founds its group), then they are the slot's sockets;
    /// those it held before wait in `replaced` for `CloseReplaced`.
    fn install(&mut self, index: u32) {
        let founding: Vec<bool> = (0..self.groups.len())
            .map(|position| {
                !self
                    .table
                    .slots
                    .values()
                    .any(|s| s.index != index && s.sockets.get(position).is_some())
            })
            .collect();
        let Some(slot) = self.table.slots.get_mut(&index) else {
            return;
        };
        let sockets: Vec<Socket> = slot.adopting.drain(..).flatten().collect();
        for ((group, socket), founds) in self.groups.iter_mut().zip(&sockets).zip(founding) {
            if let Err(e) = group.join(index, socket, Join::Fresh, founds) {
                tracing::error!(group = %group.name, "{e}");
            }
        }
        slot.replaced = std::mem::replace(&mut slot.sockets, sockets);
    }

    fn publish(&mut self) {
        let now = self.now();
        let lives = self.table.lives();
        let (set, until) = spread::chosen_set(&mut self.ops.core.spread, lives, self.stopping, now);
        let lives = fleet::lives(self.table.lives());
        let ramps = &self.ops.core.ramps;
        let mut weighted = slow_start::weigh(&set, &lives, ramps, now, self.cfg.slow_start);
        // A canary judged takes its share of the list (slow start does not apply meanwhile).
        let canary = self.ops.core.roll.as_ref().and_then(|r| r.canary.as_ref());
        let canary = canary.filter(|c| c.judging());
        let by_client = canary.is_some_and(|c| c.by_client());
        if let Some(listed) = canary.and_then(|c| fleet::canary::weigh(&set, &lives, c.ask.percent))
        {
            weighted = slow_start::Weighted::listing(listed);
        }
        self.groups.publish(&self.table, &set, &weighted, by_client);
        self.reports.published(&set);
        // A slot ramps up (`--slow-start`): its weight grows, so the set is written again soon.
        if weighted.ramping && !std::mem::replace(&mut self.ops.slow_start_due, true) {
            super::tasks::send_after(&self.events, slow_start::STEP, Event::SlowStartStep);
        }
        // The boot window ends while starting workers are chosen: publish again then.
        if let Some(until) = until {
            super::tasks::send_after(&self.events, until - now, Event::SpreadEnds);
        }
    }

    fn signal(&mut self, index: u32, sig: Sig) {
        let Some(worker) = self.table.worker(index) else {
            return;
        };
        let signal = match sig {
            Sig::Term => self.cfg.stop_signal.signal(),
            Sig::Kill => Signal::SIGKILL,
        };
        // SIGKILL takes the whole tree the worker started, not only its first process.
        if let (Sig::Kill, Some(cgroup)) = (sig, &worker.cgroup)
            && cgroup.kill().is_ok()
        {
            return;
        }
        // The connections it holds as it gets its stop signal, read from the kernel's counters
        // now: what a server that closes its idle keep-alive connections on the signal may
        // cost a client that never retries (one request each at most).
        let open = self.groups.kernel_connections_of(index);
        match crate::os::pidfd::send_signal(&worker.pidfd, signal) {
            Err(e) => tracing::warn!(
                slot = index,
                pid = worker.pid,
                "{} failed: {e}",
                signal.as_str()
            ),
            Ok(()) if sig == Sig::Term => tracing::info!(
                slot = index,
                pid = worker.pid,
                signal = signal.as_str(),
                // Left out where the kernel does not count them (`--no-bpf`).
                open_connections = open,
                "stop signal sent"
            ),
            Ok(()) => {}
        }
    }

    fn close_sockets(&mut self, index: u32) {
        if let Some(slot) = self.table.slots.get_mut(&index) {
            slot.sockets.clear();
            slot.queued_probe = None;
        }
    }

    fn close_replaced(&mut self, index: u32) {
        if let Some(slot) = self.table.slots.get_mut(&index) {
            slot.replaced.clear();
        }
    }

    /// The slot's record cleared and counters zeroed for the next user of the index (its
    /// sockets are already closed).
    fn forget(&mut self, index: u32) {
        self.table.slots.remove(&index);
        self.groups.forget(index);
    }

    fn spawn(&mut self, index: u32) -> anyhow::Result<u64> {
        let spawned = self
            .table
            .spawn_worker(index, &self.cfg, &mut self.groups, &self.events)
            .inspect_err(|e| {
                tracing::error!(slot = index, "starting a worker failed: {e:#}");
                if let Some(slot) = self.table.slots.get_mut(&index) {
                    slot.last_exit = Some(format!("spawn failed: {e:#}"));
                }
            })?;
        self.continuity.state_dirty = true;
        self.inputs.watch_exit(index, spawned.pid);
        if spawned.founding && self.groups.bpf_loaded() {
            self.check_steering_soon();
        }
        // A silent starter is checked for readiness within a few sample intervals, whatever
        // the pace of sampling: the next tick comes now.
        self.inputs.pacer.tick_now();
        Ok(spawned.id)
    }

    fn socket_open(&self, index: u32) -> bool {
        self.table
            .slots
            .get(&index)
            .is_some_and(|slot| !slot.sockets.is_empty())
    }

    fn arm(&mut self, index: u32, timer: Timer, delay: Duration, epoch: u64) {
        self.set_timer(index, epoch, timer, delay);
    }

    fn open(&mut self, index: u32, life: Life) {
        self.table.slots.insert(index, Slot::new(index, life));
    }

    fn core(&self) -> &Core {
        &self.ops.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.ops.core
    }

    fn fleet(&mut self) -> (&mut Core, fleet::Lives<'_>) {
        let lives = self
            .table
            .slots
            .iter()
            .map(|(i, s)| (*i, &s.life))
            .collect();
        (&mut self.ops.core, lives)
    }

    fn shape(&self) -> Shape {
        crate::supervisor::machine_config::shape(&self.cfg)
    }

    fn fleet_event(&mut self, event: FleetEvent) {
        match event {
            FleetEvent::SpareStarting(index) => tracing::info!(slot = index, "starting a spare"),
            FleetEvent::ReplacementStarting { old, slot } => {
                tracing::info!(old_slot = old, slot, "starting replacement")
            }
            FleetEvent::TookOver { spare, dead } => tracing::info!(
                slot = spare,
                replaced = dead,
                "a spare takes the place of the dead worker"
            ),
            FleetEvent::SpareDue => {
                let _ = self.events.send(Event::SpareDue);
            }
            FleetEvent::SpareLost(delay) => self.spare_lost(delay),
            FleetEvent::RollStarted { workers } => tracing::info!(
                workers,
                batch = self.cfg.reload_batch,
                "rolling restart started"
            ),
            FleetEvent::RollEnded { roll, result } => self.ops.roll_ended(*roll, result),
            FleetEvent::CanaryEnded { promoted: true } => self.ops.canaries.promoted += 1,
            FleetEvent::CanaryEnded { promoted: false } => self.ops.canaries.withdrawn += 1,
            FleetEvent::CanaryJudged { window, canary } => {
                tracing::info!(
                    window_ms = window.as_millis() as u64,
                    reason = "ck reload --canary",
                    "canary judged: verdict at the window's end"
                );
                super::tasks::send_after(&self.events, window, Event::CanaryVerdict(canary));
                self.watch_canary();
            }
            FleetEvent::RollWaits(left) => {
                tracing::info!(
                    wait_ms = left.as_millis() as u64,
                    reason = "--slow-start",
                    "rolling restart waits for the last batch's ramp"
                );
                super::tasks::send_after(&self.events, left, Event::RollNext);
            }
        }
    }

    fn batch_done(&mut self, ready: Vec<u32>, stopping: Vec<u32>) {
        self.continuity.state_dirty = true;
        // A replacement began or ended its boot: the rest of the fleet steps back or returns.
        super::operations::boot_priority::apply(&mut self.table, self.cfg.boot_boost);
        // A stopping worker's further listeners (--adopt, forking servers) stop with it.
        if !stopping.is_empty() {
            self.retire_members(&stopping);
        }
        // A roll waiting for a replacement flips its batch once all of it is ready: from the
        // event loop, not from inside this batch (which a roll may itself have started). A
        // ready worker has taken (or will take first) its slot's queued probe: it ends now.
        for index in ready {
            if let Some(slot) = self.table.slots.get_mut(&index) {
                slot.queued_probe = None;
            }
            let _ = self.events.send(Event::BecameReady(index));
        }
        // A roll's old worker told to stop (or gone) may end the roll (from the loop, as above).
        if self.ops.core.roll.is_some() {
            let _ = self.events.send(Event::RollCheck);
        }
    }

    fn faltered(&mut self, index: u32, why: String) {
        if self.ops.core.roll.is_some() {
            let _ = self.events.send(Event::Faltered { slot: index, why });
        }
    }

    fn selected(&self, index: u32) -> u64 {
        self.groups.slot_stats(index).selected
    }
}

impl Supervisor {
    /// Sends a timer event for `slot` after `delay`, tagged with the slot's epoch.
    pub(super) fn set_timer(&mut self, slot: u32, epoch: u64, timer: Timer, delay: Duration) {
        self.continuity.note_timer(slot, epoch, timer, delay);
        super::tasks::send_after(&self.events, delay, Event::Timer { slot, epoch, timer });
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
