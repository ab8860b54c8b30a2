//! Changes between configurations: what a reload applies, what it keeps for a restart, and how
//! the answer of `ck reload` shows them.
use std::path::PathBuf;

use super::*;
use crate::{
    settings::defaults,
    settings::health::ProbeKind,
    settings::run_config::{AppSpec, ListenAddr, LogFormat, Policy},
};

fn base() -> RunConfig {
    RunConfig {
        name: "web".into(),
        listen: vec![ListenAddr::tcp4_any(8080)],
        workers: 2,
        policy: defaults::POLICY,
        udp_mode: defaults::UDP_MODE,
        queue_patience: defaults::QUEUE_PATIENCE,
        ready: defaults::READY,
        ready_timeout: defaults::READY_TIMEOUT,
        ready_grace: defaults::READY_GRACE,
        drain_timeout: defaults::DRAIN_TIMEOUT,
        udp_linger: defaults::UDP_LINGER,
        quiet_period: defaults::QUIET_PERIOD,
        quiet_max: defaults::QUIET_MAX,
        stop_signal: defaults::STOP_SIGNAL,
        reload_batch: defaults::RELOAD_BATCH,
        keep_previous: None,
        slow_start: None,
        canary: None,
        canary_limits: Default::default(),
        restart: RestartPolicy::DEFAULT,
        min_workers: defaults::MIN_WORKERS,
        adopt: false,
        worker_memory_max: None,
        max_memory: None,
        max_requests: None,
        spares: defaults::SPARES,
        boot_boost: defaults::BOOT_BOOST,
        survive_supervisor: false,
        orphan_timeout: defaults::ORPHAN_TIMEOUT,
        health: HealthConfig::default(),
        no_bpf: false,
        bpf_log: false,
        metrics: None,
        log_format: defaults::LOG_FORMAT,
        worker_output: defaults::WORKER_OUTPUT,
        app: AppSpec {
            program: PathBuf::from("/bin/app"),
            args: vec!["--mode".into(), "a".into()],
        },
        user: None,
    }
}

fn shown(changes: &[Change]) -> Vec<String> {
    changes.iter().map(ToString::to_string).collect()
}

#[test]
fn nothing_changed() {
    let (next, changes) = compare(&base(), &base());
    assert!(changes.is_empty(), "{changes:?}");
    assert_eq!(next, base());
}

#[test]
fn live_changes_are_taken() {
    let mut new = base();
    new.workers = 3;
    new.app.args[1] = "b".into();
    new.health.probe = Some(ProbeKind::Http("/healthz".into()));
    new.health.probe_interval = Duration::from_secs(2);
    new.health.stall_timeout = None;
    new.restart.initial = Duration::from_millis(200);
    new.max_requests = Some(1000);
    let (next, changes) = compare(&base(), &new);
    assert_eq!(next, new);
    assert_eq!(
        shown(&changes),
        [
            "workers 2 -> 3",
            "app: /bin/app --mode a -> /bin/app --mode b",
            "probe off -> http:/healthz",
            "probe-interval 1s -> 2s",
            "stall-timeout 1s -> off",
            "restart-backoff 100ms,10s,2,0.1 -> 200ms,10s,2,0.1",
            "max-requests off -> 1000",
        ]
    );
    assert!(changes.iter().all(|c| c.needs_restart.is_none()));
}

#[test]
fn a_new_stop_signal_is_taken_at_once() {
    let mut new = base();
    new.stop_signal = "QUIT".parse().unwrap();
    let (next, changes) = compare(&base(), &new);
    assert_eq!(next, new);
    assert_eq!(shown(&changes), ["stop-signal TERM -> QUIT"]);
    assert!(changes[0].needs_restart.is_none());
}

#[test]
fn fixed_options_keep_their_value_until_a_restart() {
    let mut new = base();
    new.name = "api".into();
    new.listen = vec![ListenAddr::tcp4_any(8081)];
    new.policy = Policy::LeastQueue;
    new.health.probe_port_base = 20000;
    new.log_format = LogFormat::Json;
    new.workers = 4;
    let (next, changes) = compare(&base(), &new);
    // Only the worker count moves.
    assert_eq!(
        next,
        RunConfig {
            workers: 4,
            ..base()
        }
    );
    let fixed: Vec<&str> = changes
        .iter()
        .filter(|c| c.needs_restart.is_some())
        .map(|c| c.key)
        .collect();
    assert_eq!(
        fixed,
        [
            "probe-port-base",
            "name",
            "port/listen",
            "policy",
            "log-format"
        ]
    );
    let policy = changes.iter().find(|c| c.key == "policy").unwrap();
    assert_eq!(
        policy.to_string(),
        "policy round-robin -> least-queue (set in the BPF program when it loads)"
    );
    let listen = changes.iter().find(|c| c.key == "port/listen").unwrap();
    assert_eq!(
        listen.to_string(),
        "port/listen tcp://0.0.0.0:8080 -> tcp://0.0.0.0:8081 (the listening sockets are \
         opened at start)"
    );
    // Read again unchanged, the file still differs from what runs: reported again.
    let (_, again) = compare(&next, &new);
    assert_eq!(again.len(), fixed.len());
}

#[test]
fn a_reload_takes_the_quiet_wait_settings_at_once() {
    let mut new = base();
    new.quiet_period = Duration::from_secs(5);
    new.quiet_max = Duration::from_secs(40);
    let (next, changes) = compare(&base(), &new);
    assert_eq!(next, new);
    assert_eq!(
        shown(&changes),
        ["quiet-period 3s -> 5s", "quiet-max 15s -> 40s"]
    );
    assert!(changes.iter().all(|c| c.needs_restart.is_none()));
}
