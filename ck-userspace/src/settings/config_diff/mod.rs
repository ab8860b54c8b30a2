//! What changed between two configurations of `ck run` (the config file as last read and as
//! read again by a reload), option by option, and whether a running instance can take each
//! change: the worker count, the app, health, readiness, restart, stop and recycling settings can; the
//! name, the listen addresses, the BPF program's settings, `--adopt`, `--no-bpf`, the cgroups'
//! memory limit and the log format are fixed at start and need a restart of ck.
use std::{fmt, time::Duration};

use clap::ValueEnum;

use crate::{
    settings::health::HealthConfig,
    settings::restart_policy::RestartPolicy,
    settings::run_config::{AppSpec, RunConfig},
};

/// One option whose value changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The option (`workers`, `probe-interval`, ...).
    pub key: &'static str,
    /// Its old value, as `ck run` would take it.
    pub from: String,
    /// Its new value.
    pub to: String,
    /// `None` when a reload applies it; else why it needs a restart of ck.
    pub needs_restart: Option<&'static str>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `app: a b -> a c` reads better than `app a b -> a c`.
        let colon = if self.from.contains(' ') || self.to.contains(' ') {
            ":"
        } else {
            ""
        };
        write!(f, "{}{colon} {} -> {}", self.key, self.from, self.to)?;
        if let Some(why) = self.needs_restart {
            write!(f, " ({why})")?;
        }
        Ok(())
    }
}

/// The changes from `old` to `new`, and the configuration a running instance moves to: `new`,
/// but with `old`'s values for what needs a restart (so a later reload reports them again until
/// ck is restarted).
pub fn compare(old: &RunConfig, new: &RunConfig) -> (RunConfig, Vec<Change>) {
    let mut next = new.clone();
    let mut diff = Diff::default();
    // Every field by name, so that a new option cannot be left out of reloads unnoticed.
    let RunConfig {
        name,
        listen,
        workers,
        policy,
        udp_mode,
        queue_patience,
        ready,
        ready_timeout,
        ready_grace,
        drain_timeout,
        udp_linger,
        quiet_period,
        quiet_max,
        stop_signal,
        reload_batch,
        keep_previous,
        slow_start,
        canary,
        canary_limits,
        restart,
        min_workers,
        adopt,
        worker_memory_max,
        max_memory,
        max_requests,
        spares,
        boot_boost,
        survive_supervisor,
        orphan_timeout,
        health,
        no_bpf,
        bpf_log,
        metrics,
        log_format,
        worker_output,
        app,
        user,
    } = &mut next;
    diff.live("workers", &old.workers, workers, u32::to_string);
    diff.live("app", &old.app, app, show_app);
    health_changes(&mut diff, &old.health, health);
    diff.live("ready", &old.ready, ready, show_enum);
    diff.live(
        "ready-timeout",
        &old.ready_timeout,
        ready_timeout,
        show_duration,
    );
    diff.live("ready-grace", &old.ready_grace, ready_grace, show_duration);
    diff.live(
        "drain-timeout",
        &old.drain_timeout,
        drain_timeout,
        show_duration,
    );
    // Live: every stop after the reload sends the new signal (the old workers a roll replaces
    // included); a worker already stopping got its signal.
    diff.live(
        "stop-signal",
        &old.stop_signal,
        stop_signal,
        ToString::to_string,
    );
    diff.live(
        "quiet-period",
        &old.quiet_period,
        quiet_period,
        show_duration,
    );
    diff.live("quiet-max", &old.quiet_max, quiet_max, show_duration);
    diff.live("udp-linger", &old.udp_linger, udp_linger, show_duration);
    diff.live(
        "reload-batch",
        &old.reload_batch,
        reload_batch,
        u32::to_string,
    );
    diff.live("canary", &old.canary, canary, |c| match c {
        Some(c) => format!("{} % for {} ms by {:?}", c.percent, c.for_ms, c.by),
        None => "off".into(),
    });
    diff.live("canary limits", &old.canary_limits, canary_limits, |l| {
        l.describe()
    });
    diff.live("slow-start", &old.slow_start, slow_start, |d| {
        d.as_ref().map_or("0s".into(), show_duration)
    });
    diff.live("keep-previous", &old.keep_previous, keep_previous, |d| {
        d.as_ref().map_or("0s".into(), show_duration)
    });
    restart_changes(&mut diff, &old.restart, restart);
    diff.live("min-workers", &old.min_workers, min_workers, u32::to_string);
    diff.live("max-memory", &old.max_memory, max_memory, show_bytes);
    diff.live("max-requests", &old.max_requests, max_requests, |n| {
        n.map_or("off".into(), |n| n.to_string())
    });
    diff.live("spares", &old.spares, spares, u32::to_string);
    diff.live("boot-boost", &old.boot_boost, boot_boost, u8::to_string);
    diff.live(
        "orphan-timeout",
        &old.orphan_timeout,
        orphan_timeout,
        show_duration,
    );
    diff.fixed(
        "survive-supervisor",
        &old.survive_supervisor,
        survive_supervisor,
        "workers get PR_SET_PDEATHSIG (or not) when they start",
        bool::to_string,
    );
    let sockets = "the listening sockets are opened at start";
    diff.fixed(
        "name",
        &old.name,
        name,
        "the control socket and pins are named at start",
        Clone::clone,
    );
    diff.fixed("port/listen", &old.listen, listen, sockets, |l| {
        l.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    });
    diff.fixed(
        "policy",
        &old.policy,
        policy,
        "set in the BPF program when it loads",
        show_enum,
    );
    diff.fixed(
        "udp-mode",
        &old.udp_mode,
        udp_mode,
        "set in the BPF program when it loads",
        show_enum,
    );
    diff.fixed(
        "queue-patience",
        &old.queue_patience,
        queue_patience,
        "set in the BPF program when it loads",
        show_duration,
    );
    diff.fixed("adopt", &old.adopt, adopt, sockets, bool::to_string);
    diff.fixed(
        "no-bpf",
        &old.no_bpf,
        no_bpf,
        "the BPF program is loaded at start",
        bool::to_string,
    );
    diff.fixed(
        "bpf-log",
        &old.bpf_log,
        bpf_log,
        "set in the BPF program when it loads",
        bool::to_string,
    );
    diff.fixed(
        "worker-memory-max",
        &old.worker_memory_max,
        worker_memory_max,
        "the workers' cgroups are set up at start",
        show_bytes,
    );
    diff.fixed(
        "user",
        &old.user,
        user,
        "ck checks at start that it can run workers as that user",
        |u| u.as_ref().map_or("ck's own".into(), |u| u.spec.clone()),
    );
    diff.fixed(
        "log-format",
        &old.log_format,
        log_format,
        "ck's logging is set up at start",
        show_enum,
    );
    diff.fixed(
        "worker-output",
        &old.worker_output,
        worker_output,
        "ck's output readers are set up at start",
        show_enum,
    );
    diff.fixed(
        "metrics",
        &old.metrics,
        metrics,
        "the metrics listener is bound at start",
        |a| a.map_or("off".into(), |a| a.to_string()),
    );
    (next, diff.changes)
}

fn health_changes(diff: &mut Diff, old: &HealthConfig, new: &mut HealthConfig) {
    let HealthConfig {
        watchdog,
        probe,
        probe_interval,
        probe_timeout,
        probe_fails,
        probe_passes,
        probe_port_base,
        stall_timeout,
        sample_interval,
        unhealthy_replace_after,
    } = new;
    diff.live("watchdog", &old.watchdog, watchdog, show_optional_duration);
    diff.live("probe", &old.probe, probe, |p| {
        p.as_ref().map_or("off".into(), ToString::to_string)
    });
    diff.live(
        "probe-interval",
        &old.probe_interval,
        probe_interval,
        show_duration,
    );
    diff.live(
        "probe-timeout",
        &old.probe_timeout,
        probe_timeout,
        show_duration,
    );
    diff.live("probe-fails", &old.probe_fails, probe_fails, u32::to_string);
    diff.live(
        "probe-passes",
        &old.probe_passes,
        probe_passes,
        u32::to_string,
    );
    diff.fixed(
        "probe-port-base",
        &old.probe_port_base,
        probe_port_base,
        "set in the BPF program when it loads",
        u16::to_string,
    );
    diff.live(
        "stall-timeout",
        &old.stall_timeout,
        stall_timeout,
        show_optional_duration,
    );
    diff.live(
        "sample-interval",
        &old.sample_interval,
        sample_interval,
        show_duration,
    );
    diff.live(
        "unhealthy-replace-after",
        &old.unhealthy_replace_after,
        unhealthy_replace_after,
        show_optional_duration,
    );
}

fn restart_changes(diff: &mut Diff, old: &RestartPolicy, new: &RestartPolicy) {
    let RestartPolicy {
        initial,
        max,
        multiplier,
        jitter,
        stable_after,
        crash_limit,
        window,
        cooldown,
    } = new;
    // As `--restart-backoff` takes it: INITIAL,MAX,MULTIPLIER,JITTER.
    let backoff = |initial, max, multiplier: f64, jitter: f64| {
        format!(
            "{},{},{multiplier},{jitter}",
            show_duration(initial),
            show_duration(max)
        )
    };
    diff.live(
        "restart-backoff",
        &backoff(&old.initial, &old.max, old.multiplier, old.jitter),
        &backoff(initial, max, *multiplier, *jitter),
        Clone::clone,
    );
    diff.live(
        "restart-stable",
        &old.stable_after,
        stable_after,
        show_duration,
    );
    diff.live("crash-limit", &old.crash_limit, crash_limit, u32::to_string);
    diff.live("crash-window", &old.window, window, show_duration);
    diff.live("crash-cooldown", &old.cooldown, cooldown, show_duration);
}

/// The changes found so far.
#[derive(Default)]
struct Diff {
    changes: Vec<Change>,
}

impl Diff {
    /// Notes a change a reload applies.
    fn live<T: PartialEq>(
        &mut self,
        key: &'static str,
        old: &T,
        new: &T,
        show: impl Fn(&T) -> String,
    ) {
        if old != new {
            self.changes.push(Change {
                key,
                from: show(old),
                to: show(new),
                needs_restart: None,
            });
        }
    }

    /// Notes a change that needs a restart, and keeps the old value.
    fn fixed<T: PartialEq + Clone>(
        &mut self,
        key: &'static str,
        old: &T,
        new: &mut T,
        why: &'static str,
        show: impl Fn(&T) -> String,
    ) {
        if old != new {
            self.changes.push(Change {
                key,
                from: show(old),
                to: show(new),
                needs_restart: Some(why),
            });
            *new = old.clone();
        }
    }
}

fn show_duration(d: &Duration) -> String {
    format!("{d:?}")
}

fn show_optional_duration(d: &Option<Duration>) -> String {
    d.as_ref().map_or("off".into(), show_duration)
}

fn show_bytes(size: &Option<u64>) -> String {
    size.map_or("off".into(), |bytes| format!("{bytes} bytes"))
}

fn show_enum<T: ValueEnum>(value: &T) -> String {
    value
        .to_possible_value()
        .map_or(String::new(), |v| v.get_name().to_string())
}

fn show_app(app: &AppSpec) -> String {
    std::iter::once(app.program.display().to_string())
        .chain(app.args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
