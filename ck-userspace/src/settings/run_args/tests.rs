//! `ck run`'s options: help text and groups, defaults, and the configuration they resolve to.
use clap::FromArgMatches as _;

use super::*;
use crate::settings::{health::HealthConfig, restart_policy::RestartPolicy, run_config::RunConfig};

/// `ck run ARGS` as the supervisor's configuration.
fn config(args: &[&str]) -> anyhow::Result<RunConfig> {
    let matches =
        run_command().try_get_matches_from(std::iter::once("run").chain(args.iter().copied()))?;
    RunArgs::from_arg_matches(&matches)?.into_config()
}

#[test]
fn ready_probe_needs_an_http_probe_and_steering() {
    let refused = |args: &[&str]| config(args).unwrap_err().to_string();
    assert!(refused(&["--ready", "probe"]).contains("add --probe http:/PATH"));
    assert!(refused(&["--ready", "probe", "--probe", "tcp"]).contains("use --probe http:/"));
    let no_bpf = refused(&["--ready", "probe", "--probe", "http:/up", "--no-bpf"]);
    assert!(no_bpf.contains("drop one of them"), "{no_bpf}");
    let cfg = config(&["--ready", "probe", "--probe", "http:/healthz"]).unwrap();
    assert_eq!(cfg.ready, ReadyMode::Probe);
}

#[test]
fn no_options_give_the_defaults() {
    let cfg = config(&["--workers", "2"]).unwrap();
    assert_eq!(
        cfg.listen,
        [run_config::ListenAddr::tcp4_any(defaults::PORT)]
    );
    assert_eq!(cfg.name, format!("ck-{}", defaults::PORT));
    assert_eq!(cfg.policy, defaults::POLICY);
    assert_eq!(cfg.queue_patience, defaults::QUEUE_PATIENCE);
    assert_eq!(cfg.ready, defaults::READY);
    assert_eq!(cfg.ready_timeout, defaults::READY_TIMEOUT);
    assert_eq!(cfg.ready_grace, defaults::READY_GRACE);
    assert_eq!(cfg.drain_timeout, defaults::DRAIN_TIMEOUT);
    assert_eq!(cfg.quiet_period, defaults::QUIET_PERIOD);
    assert_eq!(cfg.quiet_max, defaults::QUIET_MAX);
    assert_eq!(cfg.stop_signal, defaults::STOP_SIGNAL);
    assert_eq!(cfg.reload_batch, defaults::RELOAD_BATCH);
    assert_eq!(cfg.restart, RestartPolicy::DEFAULT);
    assert_eq!(cfg.min_workers, defaults::MIN_WORKERS);
    assert_eq!(cfg.health, HealthConfig::default());
    assert_eq!(cfg.spares, defaults::SPARES);
    assert_eq!(cfg.orphan_timeout, defaults::ORPHAN_TIMEOUT);
    assert_eq!(cfg.log_format, defaults::LOG_FORMAT);
    assert_eq!(cfg.worker_output, defaults::WORKER_OUTPUT);
    assert_eq!(cfg.app.args, ["demo-worker"]);
}

#[test]
fn help_shows_the_defaults() {
    let help = run_command().render_long_help().to_string();
    for shown in [
        "[default: 30s]",
        "[default: 500ms]",
        "[default: 1ms]",
        "[default: 100ms,10s,2,0.1]",
        "[default: round-robin]",
        "[default: 19800]",
    ] {
        assert!(help.contains(shown), "{shown} not in:\n{help}");
    }
    // The one default written out in prose.
    let ports = run_command();
    let ports = ports
        .get_arguments()
        .find(|a| a.get_id() == "ports")
        .unwrap();
    let text = ports.get_long_help().unwrap().to_string();
    assert!(
        text.contains(&format!("Default {}", defaults::PORT)),
        "{text}"
    );
}

#[test]
fn every_option_has_a_one_line_summary_in_its_group() {
    let cmd = run_command();
    let top = ["config", "port", "listen", "name"];
    for arg in cmd.get_arguments().filter(|a| a.get_long().is_some()) {
        let long = arg.get_long().unwrap();
        let summary = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(
            !summary.is_empty() && !summary.contains('\n') && summary.len() <= 60,
            "--{long}'s short help is not one short line: {summary:?}"
        );
        match arg.get_help_heading() {
            None => assert!(top.contains(&long), "--{long} is in no group"),
            Some(h) => assert!(HEADINGS.contains(&h), "--{long}: unknown group {h}"),
        }
    }
    let help = run_command().render_long_help().to_string();
    assert!(help.contains(EXAMPLES), "{help}");
    let short = run_command().render_help().to_string();
    assert!(!short.contains("Examples:"), "{short}");
}

#[test]
fn a_zero_stall_timeout_is_off_and_samples_are_at_least_1ms() {
    let cfg = config(&[
        "-w",
        "1",
        "--stall-timeout",
        "0",
        "--sample-interval",
        "10us",
    ])
    .unwrap();
    assert_eq!(cfg.health.stall_timeout, None);
    assert_eq!(cfg.health.sample_interval, Duration::from_millis(1));
}

#[test]
fn quiet_period_longer_than_quiet_max_is_refused() {
    let err = config(&["-w", "1", "--quiet-period", "20s", "--quiet-max", "5s"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("--quiet-period 20s"), "{err}");
    assert!(err.contains("--quiet-max 5s"), "{err}");
    // No wait at all needs no maximum.
    let cfg = config(&["-w", "1", "--quiet-period", "0", "--quiet-max", "0"]).unwrap();
    assert!(cfg.quiet_period.is_zero());
}
