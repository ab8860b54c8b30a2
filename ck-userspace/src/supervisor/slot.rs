//! A slot and its worker as the supervisor tracks them, and the crash policy of a slot:
//! exponential backoff with jitter, reset after a stable run, and a circuit breaker.
use std::{
    collections::VecDeque,
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use socket2::Socket;

use super::health::Health;
use crate::restart_policy::RestartPolicy;
use tokio::task::JoinHandle;

/// Why the supervisor stopped a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Asked to stop (shutdown, scale down, replaced): its exit is expected.
    Asked(&'static str),
    /// Killed because it was not ready within `--ready-timeout`: its exit counts as a crash.
    NeverReady,
}

/// What a live worker is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Spawned, not ready.
    Starting,
    /// Ready (selected unless the slot is drained).
    Ready,
    /// Said `STOPPING=1`: not selected, socket open.
    Draining,
    /// Sent SIGTERM (or SIGKILL) by the supervisor.
    Stopping,
}

/// A running worker process.
pub struct Worker {
    /// Its pid.
    pub pid: u32,
    /// pidfd for signals.
    pub pidfd: OwnedFd,
    /// Unique id in this instance (`CK_WORKER_ID`): events and timers name the worker by it,
    /// since slot indices and their generations are reused.
    pub id: u64,
    /// When it was spawned.
    pub started: Instant,
    /// What it is doing.
    pub phase: Phase,
    /// It sent anything at all on `NOTIFY_SOCKET`.
    pub spoke_notify: bool,
    /// Its last `STATUS=` text.
    pub status: Option<String>,
    /// Why the supervisor stopped it, when it did.
    pub stop: Option<Stop>,
    /// The task reading its notify socket.
    pub notify_task: JoinHandle<()>,
    /// Health signals.
    pub health: Health,
}

/// Why a slot has no worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idle {
    /// Never started or stopped on purpose.
    Stopped,
    /// A restart is scheduled.
    Restarting,
    /// The breaker is open; a try is scheduled after the cool-down.
    Broken,
}

/// One slot: its sockets (one per group, open while a worker may use them) and its worker.
pub struct Slot {
    /// Index in the group.
    pub index: u32,
    /// One socket per group, in group order; empty while closed.
    pub sockets: Vec<Socket>,
    /// The worker, if one runs.
    pub worker: Option<Worker>,
    /// State when no worker runs.
    pub idle: Idle,
    /// `ck drain` holds the slot out of the active set.
    pub drained: bool,
    /// Restarts so far.
    pub restarts: u32,
    /// Workers spawned on this slot.
    pub generation: u32,
    /// Id of the last worker started on this slot (keys its restart timer).
    pub last_worker: u64,
    /// How the last worker ended.
    pub last_exit: Option<String>,
    /// Crash policy state.
    pub crashes: CrashPolicy,
    /// Leaving for good (scaled down or replaced by a rolling restart): removed, not restarted,
    /// when its worker exits.
    pub retiring: bool,
    /// A rolling restart's replacement, ready or not, kept out of the active set until its batch
    /// is flipped in.
    pub held: bool,
    /// Accept-queue depth last sampled (all groups).
    pub queue_depth: u32,
    /// Since when the queue has been non-empty and not shrinking.
    pub queue_rising_since: Option<Instant>,
}

impl Slot {
    /// A new, empty slot.
    pub fn new(index: u32, policy: RestartPolicy) -> Slot {
        Slot {
            index,
            sockets: Vec::new(),
            worker: None,
            idle: Idle::Stopped,
            drained: false,
            restarts: 0,
            generation: 0,
            last_worker: 0,
            last_exit: None,
            crashes: CrashPolicy::new(policy),
            retiring: false,
            held: false,
            queue_depth: 0,
            queue_rising_since: None,
        }
    }

    /// In the active set: a ready worker on a slot that is not drained.
    pub fn is_active(&self) -> bool {
        !self.drained
            && !self.held
            && !self.retiring
            && self
                .worker
                .as_ref()
                .is_some_and(|w| w.phase == Phase::Ready && w.health.is_healthy())
    }

    /// Has a live worker and an open socket (a fallback target when nothing is ready).
    pub fn is_live(&self) -> bool {
        self.worker.is_some() && !self.sockets.is_empty()
    }

    /// The state name shown by `ck status` and logs.
    pub fn state_name(&self) -> &'static str {
        match (&self.worker, self.idle) {
            (Some(w), _) => match w.phase {
                Phase::Starting => "starting",
                Phase::Ready if self.drained => "draining",
                Phase::Ready if !w.health.is_healthy() => "unhealthy",
                Phase::Ready if self.held => "standby",
                Phase::Ready => "ready",
                Phase::Draining => "draining",
                Phase::Stopping => "stopping",
            },
            (None, Idle::Stopped) => "stopped",
            (None, Idle::Restarting) => "restarting",
            (None, Idle::Broken) => "broken",
        }
    }

    /// The record written to the `slots` map.
    pub fn info(&self) -> ck_common::SlotInfo {
        ck_common::SlotInfo {
            state: self.state_code(),
            pid: self.worker.as_ref().map_or(0, |w| w.pid),
            generation: self.generation,
            weight: 1,
            queue_depth: self.queue_depth,
            flags: 0,
        }
    }

    /// The state code written to the `slots` map.
    pub fn state_code(&self) -> u32 {
        use ck_common::state;
        match self.state_name() {
            "starting" | "standby" => state::STARTING,
            "unhealthy" => state::UNHEALTHY,
            "ready" => state::READY,
            "draining" | "stopping" => state::DRAINING,
            _ => state::STOPPED,
        }
    }
}

/// What to do after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashDecision {
    /// Restart after this delay.
    RestartIn(Duration),
    /// Too many crashes: breaker open, try again after this cool-down.
    BreakerOpen(Duration),
}

/// Backoff and circuit breaker of one slot.
#[derive(Debug)]
pub struct CrashPolicy {
    policy: RestartPolicy,
    next_delay: Duration,
    recent: VecDeque<Instant>,
}

impl CrashPolicy {
    /// A fresh policy state with these settings.
    pub fn new(policy: RestartPolicy) -> CrashPolicy {
        CrashPolicy {
            policy,
            next_delay: policy.initial,
            recent: VecDeque::new(),
        }
    }

    /// Records a crash at `now` of a worker that ran for `ran`, and decides what happens next.
    /// `random` in [0, 1) draws the jitter that spreads restarts of slots that crashed together.
    pub fn on_crash(&mut self, now: Instant, ran: Duration, random: f64) -> CrashDecision {
        let p = self.policy;
        if ran >= p.stable_after {
            self.next_delay = p.initial;
        }
        self.recent.push_back(now);
        while let Some(first) = self.recent.front() {
            if now.duration_since(*first) > p.window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() >= p.crash_limit as usize {
            self.recent.clear();
            self.next_delay = p.initial;
            return CrashDecision::BreakerOpen(p.cooldown);
        }
        let delay = self
            .next_delay
            .mul_f64(1.0 + p.jitter * random.clamp(0.0, 1.0));
        self.next_delay = self.next_delay.mul_f64(p.multiplier).min(p.max);
        CrashDecision::RestartIn(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults: 100 ms doubling to 10 s, stable after 10 s, 5 crashes in 30 s, 30 s cool-down.
    const P: RestartPolicy = RestartPolicy::DEFAULT;

    #[test]
    fn backoff_doubles_and_caps() {
        let mut p = CrashPolicy::new(P);
        let t0 = Instant::now();
        let mut delays = Vec::new();
        for i in 0..4 {
            // Crashes far apart in time: the breaker never trips.
            let now = t0 + P.window * (2 * i + 1);
            match p.on_crash(now, Duration::ZERO, 0.0) {
                CrashDecision::RestartIn(d) => delays.push(d),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(delays[0], P.initial);
        assert_eq!(delays[1], P.initial * 2);
        assert_eq!(delays[3], P.initial * 8);
        for i in 0..20 {
            p.on_crash(t0 + P.window * (20 + 2 * i), Duration::ZERO, 0.0);
        }
        assert_eq!(p.next_delay, P.max);
    }

    #[test]
    fn stable_run_resets_backoff() {
        let mut p = CrashPolicy::new(P);
        let t0 = Instant::now();
        p.on_crash(t0, Duration::ZERO, 0.0);
        p.on_crash(t0 + P.window * 2, Duration::ZERO, 0.0);
        let d = p.on_crash(t0 + P.window * 4, P.stable_after, 0.0);
        assert_eq!(d, CrashDecision::RestartIn(P.initial));
    }

    #[test]
    fn breaker_trips_after_limit_in_window() {
        let mut p = CrashPolicy::new(P);
        let t0 = Instant::now();
        for i in 0..(P.crash_limit as usize) - 1 {
            let d = p.on_crash(t0 + Duration::from_millis(i as u64), Duration::ZERO, 0.5);
            assert!(matches!(d, CrashDecision::RestartIn(_)));
        }
        let d = p.on_crash(t0 + Duration::from_millis(10), Duration::ZERO, 0.5);
        assert_eq!(d, CrashDecision::BreakerOpen(P.cooldown));
    }
}
