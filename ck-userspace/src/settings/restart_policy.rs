//! The crash policy's settings: restart backoff (initial, max, multiplier, jitter), the stable
//! run that resets it, and the circuit breaker (crash limit, window, cool-down).
use std::time::Duration;

use ck_worker::units::duration::parse_duration;

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

/// The value of `--restart-backoff`: `INITIAL,MAX,MULTIPLIER,JITTER`, e.g. `100ms,10s,2,0.1`
/// (trailing parts may be left out and keep their defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Delay before the first restart.
    pub initial: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Growth factor.
    pub multiplier: f64,
    /// Jitter fraction.
    pub jitter: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        defaults::RESTART_BACKOFF
    }
}

/// As `--restart-backoff` takes it: `100ms,10s,2,0.1`.
impl std::fmt::Display for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Backoff {
            initial,
            max,
            multiplier,
            jitter,
        } = self;
        write!(f, "{initial:?},{max:?},{multiplier},{jitter}")
    }
}

/// Parses `--restart-backoff`.
pub fn parse_backoff(s: &str) -> Result<Backoff, String> {
    let mut b = Backoff::default();
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() > 4 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "{s:?} is not a backoff: give INITIAL[,MAX[,MULTIPLIER[,JITTER]]], e.g. 100ms,10s,2,0.1"
        ));
    }
    b.initial = parse_duration(parts[0])?;
    if let Some(max) = parts.get(1) {
        b.max = parse_duration(max)?;
    }
    if let Some(m) = parts.get(2) {
        b.multiplier = m
            .parse()
            .ok()
            .filter(|m: &f64| *m >= 1.0 && m.is_finite())
            .ok_or_else(|| format!("multiplier {m:?} must be a number >= 1"))?;
    }
    if let Some(j) = parts.get(3) {
        b.jitter = j
            .parse()
            .ok()
            .filter(|j: &f64| (0.0..=1.0).contains(j))
            .ok_or_else(|| format!("jitter {j:?} must be a number from 0 to 1"))?;
    }
    if b.max < b.initial {
        return Err(format!(
            "the maximum backoff {:?} is below the initial one {:?}: give a MAX of at least \
             INITIAL (INITIAL[,MAX[,MULTIPLIER[,JITTER]]])",
            b.max, b.initial
        ));
    }
    Ok(b)
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
