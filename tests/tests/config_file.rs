//! `ck run --config FILE`: the file sets the options (and the app) that the command line leaves
//! unset, a bad file is refused naming the key and line and leaves nothing behind, and
//! `ck reload` reads the file again: a new worker count and new app arguments are applied and
//! listed, a file that no longer reads changes nothing.

use ck::settings::run_config::Policy;
use ck_tests::ck::{ck_bin, ck_output, control_socket, lock_file, pins_dir};
use ck_tests::sys::{TempDir, cgroup_dir, free_port, instance_processes, port_bindable};
use ck_tests::{Ck, READY_TIMEOUT, Status, instance_name, start};

/// The `app` line of the tests' files: the demo worker, saying READY=1 after `ready_after`
/// (an argument that shows in the worker's command line).
fn app_line(ready_after: &str) -> String {
    let ck = ck_bin();
    let ck = ck.to_str().expect("UTF-8 path");
    format!("app = [{ck:?}, \"demo-worker\", \"--ready-after\", {ready_after:?}]\n")
}

/// The command line of process `pid`, read from the kernel.
fn cmdline(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|arg| !arg.is_empty())
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// Asserts that every worker of `status` runs with `--ready-after <ready_after>`.
fn assert_workers_run(status: &Status, ready_after: &str) {
    for pid in status.worker_pids() {
        let args = cmdline(pid);
        assert!(
            args.windows(2).any(|w| w == ["--ready-after", ready_after]),
            "worker {pid} runs {args:?}, not --ready-after {ready_after}"
        );
    }
}

/// Waits until the fleet is exactly `n` ready workers (nothing starting or stopping) with
/// steering on.
fn wait_exactly(ck: &mut Ck, n: usize) -> Status {
    ck.wait_status(&format!("exactly {n} ready workers"), READY_TIMEOUT, |s| {
        s.bpf && s.slots.len() == n && s.ready_count() == n && !s.reloading
    })
    .expect("wait for the status")
}

/// Starts `ck run --config <file> ARGS` with `text` as the file; returns the instance and the
/// file's directory (which holds the file as long as it lives).
fn start_with_file(what: &str, text: &str, args: &[&str]) -> (Ck, TempDir) {
    let dir = TempDir::new(what);
    let file = dir.write("ck.toml", text, false);
    let file = file.to_str().expect("UTF-8 path");
    let mut all = vec!["--config", file];
    all.extend_from_slice(args);
    let (ck, _port) = start(what, &all).expect("start ck");
    (ck, dir)
}

/// The file [`start_with_file`] wrote.
fn config_path(dir: &TempDir) -> std::path::PathBuf {
    dir.path().join("ck.toml")
}

#[test]
fn the_file_sets_workers_app_and_log_format() {
    let text = format!("workers = 3\nlog-format = \"json\"\n{}", app_line("50ms"));
    let (mut ck, _dir) = start_with_file("cfg-sets", &text, &[]);
    let status = wait_exactly(&mut ck, 3);
    assert_eq!(status.workers, 3);
    assert_workers_run(&status, "50ms");
    // Every line is JSON, the workers' captured ones too.
    let log = ck.log();
    for line in log.lines() {
        let _: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let first = log.lines().next();
    let first = first.unwrap_or_else(|| panic!("no line of ck's in: {log}"));
    let line: serde_json::Value =
        serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(line["message"], "ck started", "{first}");
}

#[test]
fn a_flag_wins_over_the_file_at_start_and_at_reload() {
    let text = format!("workers = 3\n{}", app_line("50ms"));
    let (mut ck, dir) = start_with_file("cfg-flag", &text, &["-w", "2"]);
    let status = wait_exactly(&mut ck, 2);
    assert_eq!(status.workers, 2);
    // The file's worker count changes; the command line's still wins.
    std::fs::write(
        config_path(&dir),
        format!("workers = 4\n{}", app_line("50ms")),
    )
    .unwrap();
    let said = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(said.contains("ck.toml: nothing changed"), "{said}");
    assert!(said.contains("reloaded 2 worker(s)"), "{said}");
    let after = wait_exactly(&mut ck, 2);
    assert_eq!(after.workers, 2);
    assert!(after.worker_pids().is_disjoint(&status.worker_pids()));
}

/// `ck run --config <text>` must fail naming every one of `phrases`, and leave nothing.
fn refused(what: &str, text: Option<&str>, phrases: &[&str]) {
    let dir = TempDir::new(what);
    let file = match text {
        Some(text) => dir.write("ck.toml", text, false),
        None => dir.path().join("missing.toml"),
    };
    let port = free_port();
    let name = instance_name(what, port);
    let port_text = port.to_string();
    let args = [
        "run",
        "--name",
        &name,
        "--port",
        &port_text,
        "--config",
        file.to_str().expect("UTF-8 path"),
    ];
    let out = ck_output(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ck run accepted {text:?}: {err}");
    assert!(err.starts_with("ck: error: "), "{err}");
    for phrase in phrases {
        assert!(err.contains(phrase), "no {phrase:?} in: {err}");
    }
    assert!(!pins_dir(&name).exists(), "pins left");
    assert!(!control_socket(&name).exists(), "control socket left");
    assert!(!lock_file(&name).exists(), "lock file left");
    let cgroup = cgroup_dir(&name);
    assert!(
        cgroup.as_ref().is_none_or(|d| !d.exists()),
        "cgroup left: {cgroup:?}"
    );
    assert_eq!(
        instance_processes(&name),
        Vec::<u32>::new(),
        "processes left"
    );
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn a_bad_file_is_refused_naming_key_and_line_and_leaves_nothing() {
    refused(
        "cfg-badkey",
        Some("workers = 2\n\nwokers = 4\n"),
        &[
            "ck.toml line 3: unknown key `wokers`",
            "did you mean `workers`?",
        ],
    );
    refused(
        "cfg-badval",
        Some("workers = \"four\"\n"),
        &["line 1: `workers = \"four\"`", "expected a whole number"],
    );
    refused(
        "cfg-badpol",
        Some("policy = \"fastest\"\n"),
        &[
            "`policy = \"fastest\"`: expected one of: hash, round-robin, least-queue, sticky, least-conn",
        ],
    );
    refused(
        "cfg-range",
        Some("workers = 0\n"),
        &["--workers 0 is out of range", "set by `workers = 0` at"],
    );
    refused(
        "cfg-toml",
        Some("workers = \n"),
        &["is not valid TOML", "line 1"],
    );
    refused(
        "cfg-missing",
        None,
        &["cannot read the config file", "missing.toml"],
    );
}

#[test]
fn reload_applies_the_edited_file_and_refuses_a_broken_one() {
    let text = format!(
        "workers = 2\npolicy = \"round-robin\"\n{}",
        app_line("50ms")
    );
    let (mut ck, dir) = start_with_file("cfg-reload", &text, &[]);
    let first = wait_exactly(&mut ck, 2);
    assert_workers_run(&first, "50ms");

    let edited = format!("workers = 3\npolicy = \"hash\"\n{}", app_line("60ms"));
    std::fs::write(config_path(&dir), edited).unwrap();
    let said = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(said.contains("workers 2 -> 3"), "{said}");
    assert!(said.contains("app: "), "{said}");
    assert!(said.contains("--ready-after 50ms -> "), "{said}");
    assert!(said.contains("--ready-after 60ms"), "{said}");
    // The policy is the BPF program's: named, not applied.
    assert!(
        said.contains("NOT applied, restart ck for: policy round-robin -> hash"),
        "{said}"
    );
    assert!(said.contains("reloaded 2 worker(s)"), "{said}");
    let second = wait_exactly(&mut ck, 3);
    assert_eq!(second.workers, 3);
    assert_eq!(second.policy, Policy::RoundRobin);
    assert!(second.worker_pids().is_disjoint(&first.worker_pids()));
    assert_workers_run(&second, "60ms");

    // A file that no longer reads: refused with its error, the fleet untouched.
    std::fs::write(config_path(&dir), "workers = \n").unwrap();
    let out = ck.ctl(&["reload"]).expect("ck reload");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a broken file was accepted: {err}");
    assert!(err.contains("reload refused, nothing changed"), "{err}");
    assert!(err.contains("is not valid TOML"), "{err}");
    let third = ck.status().expect("ck status");
    assert!(!third.reloading, "a roll started: {third:#?}");
    assert_eq!(third.worker_pids(), second.worker_pids());
    assert_eq!(third.ready_count(), 3);
}

#[test]
fn reload_turns_probes_on() {
    // A worker whose /healthz fails from its start: healthy as long as nothing probes it.
    let ck_path = ck_bin();
    let app = format!(
        "app = [{:?}, \"demo-worker\", \"--fail-health-after\", \"0s\"]\n",
        ck_path.to_str().expect("UTF-8 path")
    );
    let (mut ck, dir) = start_with_file("cfg-probe", &format!("workers = 1\n{app}"), &[]);
    let first = wait_exactly(&mut ck, 1);
    assert_eq!(first.slots[0].unhealthy, None);
    let probes = "probe = \"http:/healthz\"\nprobe-interval = \"100ms\"\nprobe-fails = 2\n";
    std::fs::write(config_path(&dir), format!("workers = 1\n{probes}{app}")).unwrap();
    let said = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(
        said.contains("probe off -> http:/healthz; probe-interval 1s -> 100ms; probe-fails 3 -> 2"),
        "{said}"
    );
    // The replacement is probed from now on, fails, and leaves the active set.
    let probed = ck
        .wait_status("the worker unhealthy by probe", READY_TIMEOUT, |s| {
            s.slots.len() == 1 && s.slots[0].unhealthy.as_deref() == Some("probe")
        })
        .expect("wait for the status");
    assert!(probed.active.is_empty(), "{probed:#?}");
    assert!(probed.slots[0].probe_hits >= 2, "{probed:#?}");
}

/// A reload that changes `stop-signal` applies it to the roll it starts: the old worker, a demo
/// worker that ignores SIGTERM (SIGINT stops it), gets SIGINT and exits 0 long before the
/// 60 s drain timeout that SIGTERM would have waited for.
#[test]
fn reload_changes_the_stop_signal_for_the_workers_it_replaces() {
    let ck_path = ck_bin();
    let app = format!(
        "app = [{:?}, \"demo-worker\", \"--ignore-sigterm\"]\n",
        ck_path.to_str().expect("UTF-8 path")
    );
    let base = format!("workers = 1\ndrain-timeout = \"60s\"\n{app}");
    let (mut ck, dir) = start_with_file("cfg-stopsig", &base, &[]);
    let first = wait_exactly(&mut ck, 1);
    assert_eq!(first.stop_signal, "SIGTERM", "{first:#?}");
    let old = first.worker_pids().into_iter().next().expect("a worker");
    std::fs::write(config_path(&dir), format!("stop-signal = \"INT\"\n{base}")).unwrap();
    let said = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(said.contains("stop-signal TERM -> INT"), "{said}");
    let after = wait_exactly(&mut ck, 1);
    assert_eq!(after.stop_signal, "SIGINT", "{after:#?}");
    let gone = ck_tests::sys::wait_all_dead(&[old].into(), std::time::Duration::from_secs(20));
    assert!(gone.is_empty(), "the old worker did not stop: {}", ck.log());
    let log = ck.log();
    let pid = format!("pid={old} ");
    assert!(
        log.lines().any(|l| l.contains("worker stopping")
            && l.contains(&pid)
            && l.contains("signal=\"SIGINT\"")),
        "{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("worker exited")
            && l.contains(&pid)
            && l.contains("reason=exit 0")),
        "{log}"
    );
}
