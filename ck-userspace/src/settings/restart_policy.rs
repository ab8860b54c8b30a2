//! The crash policy's settings: restart backoff (initial, max, multiplier, jitter), the stable
//! run that resets it, and the circuit breaker (crash limit, window, cool-down).
use std::time::Duration;

pub use crate::settings::backoff::{Backoff, parse_backoff};
use crate::settings::defaults;

/// How a slot's crashes are handled.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RestartPolicy {
    /// Delay before the first restart.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Factor applied to the delay after each crash.
    pub multiplier: f64,
    /// Random extra delay, as a fraction of the delay (0.1: up to +10 %).
    pub jitter: f64,
    /// A worker ready this long has served: its exit restarts at once and resets the delay.
    pub stable_after: Duration,
    /// Boot crashes within `window` that open the breaker.
    pub crash_limit: u32,
    /// The breaker's window.
    pub window: Duration,
    /// How long an open breaker waits before one more try.
    pub cooldown: Duration,
}

impl RestartPolicy {
    /// ck's defaults: those of the `ck run` options ([`defaults`]).
    pub const DEFAULT: RestartPolicy = RestartPolicy {
        initial: defaults::RESTART_BACKOFF.initial,
        max: defaults::RESTART_BACKOFF.max,
        multiplier: defaults::RESTART_BACKOFF.multiplier,
        jitter: defaults::RESTART_BACKOFF.jitter,
        stable_after: defaults::RESTART_STABLE,
        crash_limit: defaults::CRASH_LIMIT,
        window: defaults::CRASH_WINDOW,
        cooldown: defaults::CRASH_COOLDOWN,
    };
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy::DEFAULT
    }
}

impl Default for Backoff {
    fn default() -> Self {
        defaults::RESTART_BACKOFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_parses() {
        let b = parse_backoff("50ms,5s,3,0.2").unwrap();
        assert_eq!(b.initial, Duration::from_millis(50));
        assert_eq!(b.max, Duration::from_secs(5));
        assert_eq!(b.multiplier, 3.0);
        assert_eq!(b.jitter, 0.2);
        let b = parse_backoff("1s").unwrap();
        assert_eq!(b.initial, Duration::from_secs(1));
        assert_eq!(b.max, Backoff::default().max);
        let default = defaults::RESTART_BACKOFF;
        assert_eq!(default.to_string(), "100ms,10s,2,0.1");
        assert_eq!(parse_backoff(&default.to_string()), Ok(default));
        for bad in [
            "",
            "1s,",
            "x",
            "1s,2s,0.5",
            "1s,2s,2,3",
            "10s,1s",
            "1,2,3,0.1,9",
        ] {
            assert!(parse_backoff(bad).is_err(), "{bad:?}");
        }
    }
}
