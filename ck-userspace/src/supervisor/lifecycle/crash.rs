//! The crash policy of one slot: backoff and circuit breaker exist for boot loops, not for
//! workers that were serving.
//!
//! - A worker that *served* (ready for `--restart-stable`, or ready and then killed from outside
//!   by SIGKILL/SIGTERM/SIGINT) is replaced at once; its exit resets the backoff and the crash
//!   count and closes the breaker.
//! - A *boot crash* (exit before ready, or by itself within `--restart-stable` of becoming
//!   ready) waits an exponential backoff with jitter; `--crash-limit` boot crashes within
//!   `--crash-window` ask for the breaker to open for `--crash-cooldown`. Whether it may open
//!   (`--min-workers`) is the lifecycle's decision, not this module's.
use std::{collections::VecDeque, time::Duration, time::Instant};

use serde::{Deserialize, Serialize};

use crate::settings::restart_policy::RestartPolicy;

/// A slot's circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Breaker {
    /// Restarts allowed.
    Closed,
    /// Too many boot crashes: no restart until the cool-down ends.
    Open,
    /// It would be open, but the group needs this slot (`--min-workers`): restarts go on at
    /// the maximum backoff, and the fleet is reported degraded.
    HalfOpen,
}

impl Breaker {
    /// The word `ck status` shows.
    pub fn name(self) -> &'static str {
        match self {
            Breaker::Closed => "closed",
            Breaker::Open => "open",
            Breaker::HalfOpen => "half-open",
        }
    }
}

/// What to do after an exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Restart at once.
    Now,
    /// Restart after this backoff.
    After(Duration),
    /// Open the breaker for this cool-down (if the group can spare the slot).
    Open(Duration),
}

/// Backoff and breaker memory of one slot.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Crash {
    policy: RestartPolicy,
    next_delay: Duration,
    #[serde(with = "crate::supervisor::lifecycle::instant_age::deque")]
    recent: VecDeque<Instant>,
    breaker: Breaker,
}

impl Crash {
    /// A fresh memory with these settings.
    pub fn new(policy: RestartPolicy) -> Crash {
        Crash {
            policy,
            next_delay: policy.initial,
            recent: VecDeque::new(),
            breaker: Breaker::Closed,
        }
    }

    /// The settings.
    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// The breaker's position.
    pub fn breaker(&self) -> Breaker {
        self.breaker
    }

    /// Boot crashes counted in the current window.
    pub fn recent(&self) -> usize {
        self.recent.len()
    }

    /// Whether a worker that exited `outside` (killed by a signal only others send) had
    /// served: ready for `stable_after`, or ready and killed from outside.
    pub fn served(&self, ready_for: Option<Duration>, outside: bool) -> bool {
        ready_for.is_some_and(|ready| ready >= self.policy.stable_after || outside)
    }

    /// A worker that served exited: restart at once, forget earlier crashes.
    pub fn on_served_exit(&mut self) -> Verdict {
        self.next_delay = self.policy.initial;
        self.recent.clear();
        self.breaker = Breaker::Closed;
        Verdict::Now
    }

    /// A boot crash at `now`. `random` in [0, 1) draws the jitter that spreads restarts of
    /// slots that crashed together.
    pub fn on_boot_crash(&mut self, now: Instant, random: f64) -> Verdict {
        let p = self.policy;
        self.recent.push_back(now);
        while self
            .recent
            .front()
            .is_some_and(|first| now.duration_since(*first) > p.window)
        {
            self.recent.pop_front();
        }
        if self.breaker == Breaker::HalfOpen || self.recent.len() >= p.crash_limit as usize {
            return Verdict::Open(p.cooldown);
        }
        let delay = self
            .next_delay
            .mul_f64(1.0 + p.jitter * random.clamp(0.0, 1.0));
        self.next_delay = self.next_delay.mul_f64(p.multiplier).min(p.max);
        Verdict::After(delay)
    }

    /// The breaker opens: the window starts afresh for the try after the cool-down.
    pub fn open(&mut self) {
        self.recent.clear();
        self.breaker = Breaker::Open;
    }

    /// The breaker would open but the slot must keep trying: returns the delay (the maximum
    /// backoff).
    pub fn half_open(&mut self) -> Duration {
        self.recent.clear();
        self.breaker = Breaker::HalfOpen;
        self.next_delay = self.policy.max;
        self.policy.max
    }

    /// Every earlier boot crash forgotten, the breaker closed (`ck reload`: a fresh start).
    pub fn forget(&mut self) {
        *self = Crash::new(self.policy);
    }

    /// The cool-down is over: one more try with the breaker closed.
    pub fn cooled_down(&mut self) {
        if self.breaker == Breaker::Open {
            self.breaker = Breaker::Closed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults: 100 ms doubling to 10 s, 5 boot crashes in 30 s, 30 s cool-down.
    const P: RestartPolicy = RestartPolicy::DEFAULT;

    fn after(v: Verdict) -> Duration {
        match v {
            Verdict::After(d) => d,
            other => panic!("expected a backoff, got {other:?}"),
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut c = Crash::new(P);
        let t0 = Instant::now();
        // Boot crashes far apart in time: the breaker never trips.
        let delays: Vec<Duration> = (0..4)
            .map(|i| after(c.on_boot_crash(t0 + P.window * (2 * i + 1), 0.0)))
            .collect();
        assert_eq!(
            delays,
            [P.initial, P.initial * 2, P.initial * 4, P.initial * 8]
        );
        for i in 0..20 {
            c.on_boot_crash(t0 + P.window * (20 + 2 * i), 0.0);
        }
        assert_eq!(after(c.on_boot_crash(t0 + P.window * 100, 0.0)), P.max);
    }

    #[test]
    fn a_served_exit_restarts_at_once_and_resets_everything() {
        let mut c = Crash::new(P);
        let t0 = Instant::now();
        c.on_boot_crash(t0, 0.0);
        c.on_boot_crash(t0 + Duration::from_millis(1), 0.0);
        assert_eq!(c.on_served_exit(), Verdict::Now);
        assert_eq!(c.recent(), 0);
        assert_eq!(
            after(c.on_boot_crash(t0 + Duration::from_millis(2), 0.0)),
            P.initial
        );
    }

    #[test]
    fn served_means_ready_long_enough_or_killed_from_outside() {
        let c = Crash::new(P);
        let short = Some(P.stable_after / 10);
        assert!(
            !c.served(None, true),
            "never ready: a boot crash whoever killed it"
        );
        assert!(
            !c.served(short, false),
            "exited by itself right after ready"
        );
        assert!(
            c.served(short, true),
            "killed from outside after it was ready"
        );
        assert!(c.served(Some(P.stable_after), false));
    }

    #[test]
    fn the_limit_in_the_window_asks_to_open_and_half_open_keeps_asking() {
        let mut c = Crash::new(P);
        let t0 = Instant::now();
        for i in 0..P.crash_limit - 1 {
            let v = c.on_boot_crash(t0 + Duration::from_millis(u64::from(i)), 0.5);
            assert!(matches!(v, Verdict::After(_)), "{v:?}");
        }
        let v = c.on_boot_crash(t0 + Duration::from_millis(10), 0.5);
        assert_eq!(v, Verdict::Open(P.cooldown));
        assert_eq!(c.half_open(), P.max);
        assert_eq!(c.breaker(), Breaker::HalfOpen);
        assert_eq!(
            c.on_boot_crash(t0 + Duration::from_secs(20), 0.5),
            Verdict::Open(P.cooldown)
        );
        c.open();
        assert_eq!(c.breaker(), Breaker::Open);
        c.cooled_down();
        assert_eq!(c.breaker(), Breaker::Closed);
    }
}
