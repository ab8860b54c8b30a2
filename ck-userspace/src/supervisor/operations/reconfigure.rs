//! Reloads with `--config`: `ck reload` and SIGHUP read the file again (the command line still
//! on top), apply what changed since it was last read (the worker count as `ck scale` does,
//! health, readiness, restart and recycling settings at once, the app through the rolling
//! restart that follows), and answer with the changes, naming those that need a restart of ck.
//! A file that no longer reads is refused with its error and changes nothing.
use tokio::sync::oneshot;

use crate::{
    control::Response,
    settings::config_diff::{self, Change},
    settings::layers::RunCommandLine,
    settings::run_config::RunConfig,
};

/// The config file of a running instance.
pub(in crate::supervisor) struct ConfigSource {
    /// The command line, laid over the file again at each reload.
    command_line: RunCommandLine,
    /// The configuration as last read (what the next read is compared with).
    last: RunConfig,
}

impl ConfigSource {
    /// `command_line`, whose file gave `cfg`.
    pub(in crate::supervisor) fn new(
        command_line: RunCommandLine,
        cfg: &RunConfig,
    ) -> ConfigSource {
        ConfigSource {
            command_line,
            last: cfg.clone(),
        }
    }
}

/// The config file read again: the configuration to run with, whether the worker count
/// changed, and the summary of the changes for the log and the answer.
pub(in crate::supervisor) struct Reread {
    pub next: RunConfig,
    pub workers_changed: bool,
    pub summary: String,
}

impl ConfigSource {
    /// Reads the file again (the command line on top) and compares it with the last read: the
    /// changes, or why it no longer reads (logged; nothing changed).
    pub(in crate::supervisor) fn reread(&mut self) -> Result<Reread, String> {
        let file = self.command_line.file().display().to_string();
        let new = match self.command_line.load() {
            Ok(new) => new,
            Err(e) => {
                let why = format!("reload refused, nothing changed: {e:#}");
                tracing::error!(file, "{why}");
                return Err(why);
            }
        };
        let (next, changes) = config_diff::compare(&self.last, &new);
        let workers_changed = next.workers != self.last.workers;
        self.last = next.clone();
        let summary = summary(&file, &changes);
        tracing::info!(file, changes = %summary, "config file read again");
        Ok(Reread {
            next,
            workers_changed,
            summary,
        })
    }
}

/// `ck.toml: workers 2 -> 3; probe-interval 1s -> 2s` or `ck.toml: nothing changed`, and the
/// changes that wait for a restart.
fn summary(file: &str, changes: &[Change]) -> String {
    let (now, later): (Vec<&Change>, Vec<&Change>) =
        changes.iter().partition(|c| c.needs_restart.is_none());
    let join = |changes: &[&Change]| {
        changes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut text = match now.is_empty() {
        true if later.is_empty() => format!("{file}: nothing changed"),
        true => format!("{file}: nothing applied"),
        false => format!("{file}: {}", join(&now)),
    };
    if !later.is_empty() {
        text.push_str(&format!("; NOT applied, restart ck for: {}", join(&later)));
    }
    text
}

/// A reply channel whose answer gets `summary` in front before it reaches `reply`.
pub(in crate::supervisor) fn prefixed(
    reply: oneshot::Sender<Response>,
    summary: String,
) -> oneshot::Sender<Response> {
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let answer = match rx.await {
            Ok(Response::Ok(msg)) => Response::Ok(format!("{summary}; {msg}")),
            Ok(Response::Error(msg)) => Response::Error(format!("{summary}; {msg}")),
            Ok(other) => other,
            Err(_) => Response::Error(format!("{summary}; ck is shutting down")),
        };
        let _ = reply.send(answer);
    });
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(
        key: &'static str,
        from: &str,
        to: &str,
        needs_restart: Option<&'static str>,
    ) -> Change {
        Change {
            key,
            from: from.into(),
            to: to.into(),
            needs_restart,
        }
    }

    #[test]
    fn summaries() {
        assert_eq!(summary("ck.toml", &[]), "ck.toml: nothing changed");
        let workers = change("workers", "2", "3", None);
        let probe = change("probe-interval", "1s", "2s", None);
        let policy = change("policy", "hash", "round-robin", Some("at load"));
        assert_eq!(
            summary("ck.toml", &[workers.clone(), probe]),
            "ck.toml: workers 2 -> 3; probe-interval 1s -> 2s"
        );
        assert_eq!(
            summary("ck.toml", &[policy.clone(), workers]),
            "ck.toml: workers 2 -> 3; NOT applied, restart ck for: policy hash -> round-robin (at load)"
        );
        assert_eq!(
            summary("ck.toml", &[policy]),
            "ck.toml: nothing applied; NOT applied, restart ck for: policy hash -> round-robin (at load)"
        );
    }
}
