//! The quiet wait's rule (`operations::quiet` runs the wait): whether a stop waits for traffic to stop first, and when the
//! wait ends (no new connection for `--quiet-period`, or `--quiet-max` reached).
use std::time::{Duration, Instant};

/// Why a stop stops every worker at once instead of waiting, if so.
pub fn skip(quiet_period: Duration, metrics: bool, bpf: bool) -> Option<&'static str> {
    if quiet_period.is_zero() {
        Some("--quiet-period 0")
    } else if !metrics {
        Some("no --metrics, so no balancer can be checking /readyz")
    } else if !bpf {
        Some("--no-bpf: no program counts new connections")
    } else {
        None
    }
}

/// Where a wait stands at one reading of the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Keep waiting.
    Wait,
    /// No new connection for this long (at least the quiet period): stop.
    Quiet(Duration),
    /// `--quiet-max` reached while connections still came, at this rate per second: stop.
    TooLong(f64),
}

/// The limits of a wait.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `--quiet-period`.
    pub period: Duration,
    /// `--quiet-max`.
    pub max: Duration,
    /// The shortest span a rate is computed over.
    pub min_span: Duration,
}

/// Decides a wait that `started`, whose counters last `changed` then, at `now`; `first` is
/// the oldest (time, total) sample of the rate's window and `total` the count now.
pub fn decide(
    limits: Limits,
    started: Instant,
    changed: Instant,
    now: Instant,
    first: (Instant, u64),
    total: u64,
) -> Verdict {
    let quiet = now - changed.max(started);
    if quiet >= limits.period {
        return Verdict::Quiet(quiet);
    }
    if now - started >= limits.max {
        let (t0, n0) = first;
        let span = (now - t0).as_secs_f64().max(limits.min_span.as_secs_f64());
        return Verdict::TooLong(total.wrapping_sub(n0) as f64 / span);
    }
    Verdict::Wait
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn the_quiet_wait_ends_when_quiet_or_at_its_maximum_with_the_rate() {
        let limits = Limits {
            period: Duration::from_secs(2),
            max: Duration::from_secs(10),
            min_span: Duration::from_millis(100),
        };
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(decide(limits, t0, t0, t0 + s(1), (t0, 0), 0), Verdict::Wait);
        assert_eq!(
            decide(limits, t0, t0 + s(1), t0 + s(3), (t0, 0), 5),
            Verdict::Quiet(s(2))
        );
        // Traffic until the end: at the maximum, with the rate over the window.
        let v = decide(limits, t0, t0 + s(10), t0 + s(10), (t0 + s(9), 100), 150);
        assert_eq!(v, Verdict::TooLong(50.0));
        assert_eq!(skip(Duration::ZERO, true, true), Some("--quiet-period 0"));
        assert!(skip(s(1), false, true).is_some());
        assert!(skip(s(1), true, false).is_some());
        assert_eq!(skip(s(1), true, true), None);
    }
}
