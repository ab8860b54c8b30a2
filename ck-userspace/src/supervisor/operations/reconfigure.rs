//! Reloads with `--config`: `ck reload` and SIGHUP read the file again (the command line still
//! on top), apply what changed since it was last read (the worker count as `ck scale` does,
//! health, readiness, restart and recycling settings at once, the app through the rolling
//! restart that follows), and answer with the changes, naming those that need a restart of ck.
//! A file that no longer reads is refused with its error and changes nothing.
use tokio::sync::oneshot;

use crate::supervisor::{Event, Supervisor, tasks};
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

impl Supervisor {
    /// `ck reload` / SIGHUP: with a config file, reads it again and applies the changes, then
    /// the rolling restart of every worker (which starts the new app); `reply` gets the changes
    /// and the roll's result.
    pub(in crate::supervisor) fn reload(&mut self, reply: Option<oneshot::Sender<Response>>) {
        // Refused before the file is read when a roll could not start (the roll says why).
        if self.ops.config.is_none() || self.stopping || self.ops.core.roll.is_some() {
            return self.begin_reload(reply);
        }
        let source = self.ops.config.as_mut().expect("checked");
        let file = source.command_line.file().display().to_string();
        let new = match source.command_line.load() {
            Ok(new) => new,
            Err(e) => {
                let why = format!("reload refused, nothing changed: {e:#}");
                tracing::error!(file, "{why}");
                if let Some(reply) = reply {
                    let _ = reply.send(Response::Error(why));
                }
                return;
            }
        };
        let (next, changes) = config_diff::compare(&source.last, &new);
        let workers_changed = next.workers != source.last.workers;
        source.last = next.clone();
        let summary = summary(&file, &changes);
        tracing::info!(file, changes = %summary, "config file read again");
        // The workers to replace: those running now (new slots start the new app anyway).
        let running = self
            .table
            .slots
            .values()
            .filter(|s| s.life.serving() && s.worker.is_some())
            .map(|s| s.index)
            .collect();
        self.take_settings(next.clone());
        if workers_changed && let Err(why) = self.scale_to(next.workers) {
            tracing::error!("{why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(format!("{summary}; {why}")));
            }
            return;
        }
        let reply = reply.map(|reply| prefixed(reply, summary));
        self.begin_roll(running, reply, true);
    }

    /// Runs with `next` from now on (all but the worker count, which `scale_to` changes):
    /// lifecycle settings recomputed, the probe ticker restarted if probes changed.
    fn take_settings(&mut self, next: RunConfig) {
        let probes_changed = next.health.probe != self.cfg.health.probe
            || next.health.probe_interval != self.cfg.health.probe_interval;
        self.cfg = RunConfig {
            workers: self.cfg.workers,
            ..next
        };
        self.settings = crate::supervisor::start::settings(&self.cfg);
        // The state file carries settings the orphan guard uses (`--stop-signal`).
        self.continuity.state_dirty = true;
        if probes_changed {
            self.start_probe_ticker();
        }
    }

    /// Starts (again) the ticker that probes every worker at `--probe-interval`, when probes
    /// are on; stops the old one.
    pub(in crate::supervisor) fn start_probe_ticker(&mut self) {
        if let Some(ticker) = self.inputs.probe_ticker.take() {
            ticker.abort();
        }
        if self.cfg.health.probe.is_some() {
            let period = self.cfg.health.probe_interval;
            self.inputs.probe_ticker = Some(tasks::start_ticker(&self.events, period, || {
                Event::ProbeTick
            }));
        }
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
fn prefixed(reply: oneshot::Sender<Response>, summary: String) -> oneshot::Sender<Response> {
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
