//! Settings of ck's health signals: watchdog, probes through the slot's own socket, accept-queue
//! stall detection, and replacement of workers that stay unhealthy.
use std::{str::FromStr, time::Duration};

use crate::settings::defaults;

/// What a probe checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// The TCP handshake completes.
    Tcp,
    /// `GET <path>` answers 2xx.
    Http(String),
}

impl FromStr for ProbeKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tcp" => Ok(ProbeKind::Tcp),
            "http" => Ok(ProbeKind::Http("/".into())),
            _ => match s.strip_prefix("http:") {
                Some(path) if path.starts_with('/') && !path.contains(char::is_whitespace) => {
                    Ok(ProbeKind::Http(path.to_string()))
                }
                _ => Err(format!(
                    "{s:?} is not a probe: give `tcp`, `http` or `http:/PATH` (e.g. http:/healthz)"
                )),
            },
        }
    }
}

impl std::fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeKind::Tcp => write!(f, "tcp"),
            ProbeKind::Http(path) => write!(f, "http:{path}"),
        }
    }
}

/// Health settings of `ck run`.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthConfig {
    /// `WATCHDOG_USEC` for workers; a worker that sent `WATCHDOG=1` once and then stays silent
    /// longer is unhealthy.
    pub watchdog: Option<Duration>,
    /// Periodic probe, if any.
    pub probe: Option<ProbeKind>,
    /// Time between probes of one worker.
    pub probe_interval: Duration,
    /// Time a probe may take.
    pub probe_timeout: Duration,
    /// Consecutive failed probes that make a worker unhealthy.
    pub probe_fails: u32,
    /// Consecutive passed probes that make it healthy again.
    pub probe_passes: u32,
    /// Probe source ports: slot S is probed from `probe_port_base + S`.
    pub probe_port_base: u16,
    /// A queue that stays non-empty with no connection leaving it this long marks its worker
    /// stalled (`None`: off).
    pub stall_timeout: Option<Duration>,
    /// How often least-queue's sampled fallback samples accept queues under traffic (stall
    /// detection alone samples every tenth of `stall_timeout`).
    pub sample_interval: Duration,
    /// An unhealthy worker is replaced (gracefully) after this long (`None`: never).
    pub unhealthy_replace_after: Option<Duration>,
}

/// The health settings of a `ck run` without health options ([`defaults`]).
impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            watchdog: None,
            probe: None,
            probe_interval: defaults::PROBE_INTERVAL,
            probe_timeout: defaults::PROBE_TIMEOUT,
            probe_fails: defaults::PROBE_FAILS,
            probe_passes: defaults::PROBE_PASSES,
            probe_port_base: defaults::PROBE_PORT_BASE,
            stall_timeout: Some(defaults::STALL_TIMEOUT),
            sample_interval: defaults::SAMPLE_INTERVAL,
            unhealthy_replace_after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_kinds_parse() {
        assert_eq!("tcp".parse::<ProbeKind>(), Ok(ProbeKind::Tcp));
        assert_eq!("http".parse::<ProbeKind>(), Ok(ProbeKind::Http("/".into())));
        assert_eq!(
            "http:/healthz".parse::<ProbeKind>(),
            Ok(ProbeKind::Http("/healthz".into()))
        );
        for bad in ["", "udp", "http:healthz", "http:/a b"] {
            assert!(bad.parse::<ProbeKind>().is_err(), "{bad:?}");
        }
        assert_eq!(ProbeKind::Http("/x".into()).to_string(), "http:/x");
    }
}
