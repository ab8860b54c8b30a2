//! The value of `--restart-backoff` ([`Backoff`]) and its parser, below its default
//! ([`super::defaults::RESTART_BACKOFF`]) and the crash policy that reads it
//! ([`super::restart_policy`]).
use std::time::Duration;

use ck_worker::units::duration::parse_duration;

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
