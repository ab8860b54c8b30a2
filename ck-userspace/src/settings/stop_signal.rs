//! `--stop-signal SIG`: the signal ck sends a worker to stop it gracefully (rolls, scale-down,
//! recycling, `ck stop`, the orphan guard), SIGKILL following after `--drain-timeout`. Apps
//! differ: most stop gracefully on SIGTERM, nginx, unicorn and php-fpm on SIGQUIT (SIGTERM is
//! their fast stop, dropping what is in flight), HAProxy on SIGUSR1 (systemd's `KillSignal=`,
//! Docker's `STOPSIGNAL`).
use std::{fmt, str::FromStr};

use nix::sys::signal::Signal;

/// The signals `--stop-signal` takes (names without `SIG`), in the order its error lists them.
pub const ACCEPTED: [Signal; 8] = [
    Signal::SIGTERM,
    Signal::SIGQUIT,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGKILL,
];

/// A graceful stop signal: one of [`ACCEPTED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StopSignal(Signal);

impl StopSignal {
    /// SIGTERM, the default.
    pub const TERM: StopSignal = StopSignal(Signal::SIGTERM);

    /// The signal to send.
    pub fn signal(self) -> Signal {
        self.0
    }

    /// Its name with `SIG` (`SIGQUIT`), as logs and `ck status` show it.
    pub fn name(self) -> &'static str {
        self.0.as_str()
    }
}

impl Default for StopSignal {
    fn default() -> Self {
        Self::TERM
    }
}

impl fmt::Display for StopSignal {
    /// The name without `SIG` (`QUIT`), as `--stop-signal` takes it back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name().trim_start_matches("SIG"))
    }
}

/// `--stop-signal`'s refusal: names what was given and every signal it takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given:?} is not a stop signal ck sends: give one of {}, or its number",
    accepted_list()
)]
pub struct BadStopSignal {
    /// What was given.
    pub given: String,
}

/// `TERM, QUIT, INT, ...`: the names [`ACCEPTED`] holds.
fn accepted_list() -> String {
    ACCEPTED
        .iter()
        .map(|s| s.as_str().trim_start_matches("SIG"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for StopSignal {
    type Err = BadStopSignal;

    /// A name with or without `SIG`, in any case (`QUIT`, `SIGQUIT`, `quit`), or its number
    /// (`3`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadStopSignal {
            given: text.to_string(),
        };
        let trimmed = text.trim();
        let signal = match trimmed.parse::<i32>() {
            Ok(number) => Signal::try_from(number).map_err(|_| bad())?,
            Err(_) => {
                let upper = trimmed.to_ascii_uppercase();
                let name = upper.trim_start_matches("SIG");
                ACCEPTED
                    .into_iter()
                    .find(|s| s.as_str().trim_start_matches("SIG") == name)
                    .ok_or_else(bad)?
            }
        };
        if !ACCEPTED.contains(&signal) {
            return Err(bad());
        }
        Ok(StopSignal(signal))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_any_form_and_numbers_are_read() {
        for text in ["QUIT", "SIGQUIT", "quit", "sigquit", " QUIT ", "3"] {
            assert_eq!(
                text.parse::<StopSignal>().map(StopSignal::signal),
                Ok(Signal::SIGQUIT),
                "{text}"
            );
        }
        assert_eq!("15".parse(), Ok(StopSignal::TERM));
        assert_eq!("usr1".parse::<StopSignal>().unwrap().name(), "SIGUSR1");
    }

    #[test]
    fn every_accepted_signal_reads_back_from_its_display() {
        for signal in ACCEPTED {
            let stop = StopSignal(signal);
            assert_eq!(stop.to_string().parse(), Ok(stop));
        }
        assert_eq!(StopSignal::default().to_string(), "TERM");
    }

    #[test]
    fn other_names_and_numbers_are_refused_with_the_list() {
        for text in ["STOP", "SIGCHLD", "TERMINATE", "", "19", "0", "99", "-15"] {
            let err = text.parse::<StopSignal>().unwrap_err().to_string();
            assert!(
                err.contains("give one of TERM, QUIT, INT, HUP, USR1, USR2, WINCH, KILL"),
                "{text}: {err}"
            );
        }
    }
}
