//! Fault switches of the demo worker, for ck's tests and benchmarks: stalling the whole event
//! loop now and then, failing `/healthz` for a while, answering `/` slowly, and leaking memory
//! on every request, a capacity that warms up. See the `--stall-ms`, `--stall-every`,
//! `--fail-health-after`, `--recover-health-after`, `--slow-ms`, `--leak-per-request`,
//! `--capacity`, `--warm-up`, `--reset-requests` and `--listen-backlog` options of
//! [`DemoOptions`].
use std::time::Duration;

use anyhow::ensure;
use tokio::time::{Instant, MissedTickBehavior};

use super::DemoOptions;

/// How the worker misbehaves; [`Faults::default`] is a well-behaved worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// When the worker started: the health and stall schedules count from here.
    pub started: Instant,
    /// Block the event loop for `.0` every `.1` (`.0 < .1`).
    pub stall: Option<(Duration, Duration)>,
    /// `/healthz` answers 503 from this long after the start...
    pub fail_health_after: Option<Duration>,
    /// ...until this long after the start (later than `fail_health_after`).
    pub recover_health_after: Option<Duration>,
    /// How long every request to `/` waits before it is answered.
    pub slow: Duration,
    /// Bytes every request to `/` allocates, touches and never frees.
    pub leak: u64,
    /// Requests to `/` answered a second at most, one after another (see [`Pacer`]).
    pub capacity: Option<u32>,
    /// How long after the start the capacity ramps up from a tenth.
    pub warm_up: Duration,
    /// Every request to `/` is answered with a reset.
    pub reset: bool,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            started: Instant::now(),
            stall: None,
            fail_health_after: None,
            recover_health_after: None,
            slow: Duration::ZERO,
            leak: 0,
            capacity: None,
            warm_up: Duration::ZERO,
            reset: false,
        }
    }
}

impl Faults {
    /// The faults `opts` asks for, counted from `started`.
    ///
    /// # Errors
    /// When the stall is not shorter than its period (the worker would never run), or health
    /// would recover before (or when) it fails.
    pub fn new(opts: &DemoOptions, started: Instant) -> anyhow::Result<Faults> {
        let stall = opts.stall_ms.zip(opts.stall_every);
        if let Some((stall, every)) = stall {
            ensure!(
                stall < every,
                "--stall-ms ({stall:?}) must be shorter than --stall-every ({every:?})"
            );
        }
        if let (Some(fail), Some(recover)) = (opts.fail_health_after, opts.recover_health_after) {
            ensure!(
                recover > fail,
                "--recover-health-after ({recover:?}) must be later than \
                 --fail-health-after ({fail:?})"
            );
        }
        if opts.capacity == Some(0) {
            anyhow::bail!("--capacity 0: give at least 1 (requests a second)");
        }
        Ok(Faults {
            capacity: opts.capacity,
            warm_up: opts.warm_up.unwrap_or(Duration::ZERO),
            started,
            stall,
            fail_health_after: opts.fail_health_after,
            recover_health_after: opts.recover_health_after,
            slow: opts.slow_ms.unwrap_or(Duration::ZERO),
            leak: opts.leak_per_request.unwrap_or(0),
            reset: opts.reset_requests,
        })
    }

    /// Whether `/healthz` answers 200 now.
    pub fn healthy(&self) -> bool {
        let elapsed = self.started.elapsed();
        let failed = self.fail_health_after.is_some_and(|fail| elapsed >= fail);
        let recovered = self.recover_health_after.is_some_and(|r| elapsed >= r);
        !failed || recovered
    }

    /// A one-line description of the faults in effect, `None` for a well-behaved worker.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some((stall, every)) = self.stall {
            parts.push(format!("stall {stall:?} every {every:?}"));
        }
        if let Some(fail) = self.fail_health_after {
            let recover = self
                .recover_health_after
                .map_or(String::new(), |r| format!(" until {r:?}"));
            parts.push(format!("/healthz fails from {fail:?}{recover}"));
        }
        if !self.slow.is_zero() {
            parts.push(format!("/ answers after {:?}", self.slow));
        }
        if self.leak > 0 {
            parts.push(format!("/ leaks {} bytes", self.leak));
        }
        if let Some(n) = self.capacity {
            parts.push(format!(
                "/ at most {n}/s, from a tenth over {:?}",
                self.warm_up
            ));
        }
        if self.reset {
            parts.push("/ answered with a reset".into());
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// `--capacity N --warm-up DUR`: at most N answers to `/` a second (a tenth of N at the start,
/// rising linearly to N over the warm-up), one after another: each answer takes the next free
/// turn, a second over the capacity after the one before. A request that finds a turn free is
/// answered at once; past the capacity, requests queue (their answers wait).
#[derive(Debug)]
pub struct Pacer {
    faults: Faults,
    /// The next free turn.
    next_turn: std::sync::Mutex<Instant>,
}

impl Pacer {
    /// The pacer `faults` asks for, if any.
    pub fn new(faults: &Faults) -> Option<Pacer> {
        faults.capacity.map(|_| Pacer {
            faults: *faults,
            next_turn: std::sync::Mutex::new(faults.started),
        })
    }

    /// The capacity a second at `now`.
    fn rate(&self, now: Instant) -> f64 {
        let full = f64::from(self.faults.capacity.unwrap_or(u32::MAX));
        let age = now.saturating_duration_since(self.faults.started);
        let warm = self.faults.warm_up;
        if warm.is_zero() || age >= warm {
            return full;
        }
        full * (0.1 + 0.9 * age.as_secs_f64() / warm.as_secs_f64())
    }

    /// When a request to `/` that arrives now is answered: at its turn, now if one is free.
    pub fn done_at(&self) -> Instant {
        let now = Instant::now();
        let mut next = self.next_turn.lock().unwrap_or_else(|e| e.into_inner());
        let turn = (*next).max(now);
        *next = turn + Duration::from_secs_f64(1.0 / self.rate(turn));
        turn
    }
}

/// With `--leak-per-request N`: allocates N bytes, writes every page (so they are resident)
/// and forgets them.
pub fn leak(faults: &Faults) {
    if faults.leak > 0 {
        let bytes = vec![1u8; usize::try_from(faults.leak).unwrap_or(usize::MAX)];
        std::mem::forget(bytes);
    }
}

/// With `--stall-ms X --stall-every Y`: at `started + Y`, `started + 2Y`, ... blocks the
/// calling thread (the whole single-threaded event loop) for X, so that nothing is accepted or
/// answered meanwhile. Returns at once without a stall; otherwise runs until dropped.
pub async fn stall_loop(faults: Faults) {
    let Some((stall, every)) = faults.stall else {
        return;
    };
    let mut ticks = tokio::time::interval_at(faults.started + every, every);
    // A late tick (the loop was busy) shifts the schedule instead of stalling twice in a row.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Blocking on purpose: this is the fault being simulated.
        std::thread::sleep(stall);
    }
}

/// Parses the value of a `-ms` option: a duration as [`crate::units::duration::parse_duration`]
/// reads it (`200ms`, `1.5s`), except that a bare number is in milliseconds, as the option's
/// name promises (`200` is 200ms, not 200s).
///
/// # Errors
/// The message of [`crate::units::duration::parse_duration`] when the text is not a duration.
pub fn parse_ms(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let bare = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if bare {
        crate::units::duration::parse_duration(&format!("{text}ms"))
    } else {
        crate::units::duration::parse_duration(s)
    }
}
