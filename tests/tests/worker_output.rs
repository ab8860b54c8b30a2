//! `--worker-output capture` (the default): every line a worker writes to stdout or stderr
//! is a ck log record with its slot, pid, generation and stream, prefixed in text and one
//! JSON object with `--log-format json`; lines keep their order, a partial last line is
//! logged at the worker's exit; a worker that floods while ck's own stderr is stalled blocks
//! nothing, grows no memory and has its dropped lines counted; the pipes survive `ck upgrade`
//! and a dead ck under `--survive-supervisor` (the worker writes on, nothing it wrote while
//! ck was away is lost); `--worker-output inherit` keeps the workers on ck's own stdout and
//! stderr.

use std::io::Read as _;
use std::process::Stdio;
use std::time::Duration;

use ck_tests::ck::ck_command;
use ck_tests::sys::{free_port, pid_alive, poll_until};
use ck_tests::{Ck, READY_TIMEOUT, instance_name, probe_base_for, start_ready};
use serde_json::Value;

/// A worker that writes `tick N` to stdout every 50 ms, N counting from 0.
const TICKER: &str = "i=0; while :; do echo \"tick $i\"; i=$((i+1)); sleep 0.05; done";

/// `ck run` flags for a worker running the shell `script`, ready at once, ck logging JSON.
fn shell_flags(script: &str) -> [&str; 8] {
    [
        "--ready",
        "spawn",
        "--log-format",
        "json",
        "--",
        "/bin/sh",
        "-c",
        script,
    ]
}

/// One worker running the shell `script` (see [`shell_flags`]).
fn start_script(name: &str, script: &str) -> (Ck, u16, ck_tests::Status) {
    start_ready(name, 1, &shell_flags(script)).expect("start a ready ck")
}

/// Every line of a JSON log as an object (panics on a line that is not one).
fn records(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The messages of the worker records of `pid` on `stream`, in order.
fn lines_of(records: &[Value], pid: u32, stream: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r["target"] == "worker" && r["pid"] == pid && r["stream"] == stream)
        .filter_map(|r| r["message"].as_str().map(String::from))
        .collect()
}

/// The numbers of the `tick N` lines of `pid` in a JSON log.
fn ticks(log: &str, pid: u32) -> Vec<u64> {
    lines_of(&records(log), pid, "stdout")
        .iter()
        .filter_map(|l| l.strip_prefix("tick ")?.parse().ok())
        .collect()
}

/// Asserts that `ticks` count up by one with no gap or repeat.
fn assert_contiguous(ticks: &[u64], log: &str) {
    for pair in ticks.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "a gap or repeat in {ticks:?}\n{log}");
    }
}

/// Waits until `check` holds for ck's log.
fn wait_log(ck: &Ck, what: &str, check: impl Fn(&str) -> bool) {
    let ok = poll_until(READY_TIMEOUT, Duration::from_millis(20), || {
        check(&ck.log())
    });
    assert!(ok, "{what} never came:\n{}", ck.log());
}

#[test]
fn text_lines_are_prefixed_with_their_worker() {
    let (ck, _port, status) = start_ready("out-text", 2, &[]).expect("start a ready ck");
    for slot in [0, 1] {
        let pid = status.worker_pid(slot);
        let line = format!(
            " INFO worker: slot={slot} pid={pid} gen=1 stderr: demo worker slot={slot} \
             pid={pid} listening on "
        );
        wait_log(&ck, &line, |log| log.contains(&line));
    }
    // Nothing of the workers' comes through bare.
    let log = ck.log();
    assert!(!log.lines().any(|l| l.starts_with("demo worker ")), "{log}");
}

#[test]
fn lines_keep_their_order_and_a_partial_last_line_is_logged_at_exit() {
    const LINES: u32 = 3000;
    let script = format!(
        "i=1; while [ $i -le {LINES} ]; do echo \"line $i\"; i=$((i+1)); done; \
         echo to-stderr >&2; printf 'no newline'; exec sleep 600"
    );
    let (mut ck, _port, status) = start_script("out-order", &script);
    let pid = status.worker_pid(0);
    wait_log(&ck, "the stderr line", |log| log.contains("to-stderr"));
    assert_eq!(ck.status().expect("ck status").slot(0).output_dropped, 0);
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    let all = records(&log);
    let mut expected: Vec<String> = (1..=LINES).map(|i| format!("line {i}")).collect();
    expected.push("no newline".into());
    assert_eq!(lines_of(&all, pid, "stdout"), expected, "{log}");
    assert_eq!(lines_of(&all, pid, "stderr"), ["to-stderr"], "{log}");
    let first = all
        .iter()
        .find(|r| r["target"] == "worker")
        .expect("a worker record");
    assert_eq!(
        (&first["slot"], &first["generation"]),
        (&Value::from(0), &Value::from(1)),
        "{first}"
    );
    // The partial line was logged before ck's last record.
    assert_eq!(
        all.last().and_then(|r| r["message"].as_str()),
        Some("ck stopped"),
        "{log}"
    );
}

/// `VmRSS` of `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// The value of `ck_worker_output_dropped_lines_total` for `slot` on the metrics listener.
fn dropped_metric(addr: &str, slot: u32) -> u64 {
    let text = ck_tests::http::metrics_text(addr);
    let series = format!("ck_worker_output_dropped_lines_total{{slot=\"{slot}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

#[test]
fn a_flood_while_ck_s_stderr_is_stalled_blocks_nothing_and_is_counted() {
    let port = free_port();
    let name = instance_name("out-flood", port);
    let (port_text, base_text) = (port.to_string(), probe_base_for(port).to_string());
    // ck's stderr is a pipe this test does not read until the end.
    let (stalled, stderr) = nix::unistd::pipe().expect("a pipe");
    let mut cmd = ck_command();
    cmd.arg("run").args(["--name", &name, "--port", &port_text]);
    cmd.args([
        "--probe-port-base",
        &base_text,
        "-w",
        "1",
        "--ready",
        "spawn",
    ]);
    cmd.args(["--metrics", "127.0.0.1:0", "--", "/bin/sh", "-c"]);
    cmd.arg("exec yes 'a flooding worker writes this line as fast as it can'");
    let mut ck = Ck::spawn_with_stderr(&name, cmd, Some(Stdio::from(stderr))).expect("start ck");
    let status = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let (ck_pid, worker) = (status.pid, status.worker_pid(0));
    let before = rss_kib(ck_pid);
    // ck reads the flood and drops what its stalled stderr cannot take, and says how many.
    let mut dropped = 0;
    let counted = poll_until(READY_TIMEOUT, Duration::from_millis(50), || {
        dropped = ck.status().expect("ck status").slot(0).output_dropped;
        dropped > 1_000
    });
    assert!(counted, "dropped lines counted: {dropped}");
    // The event loop still answers, memory stays bounded, the worker still runs.
    for _ in 0..5 {
        let now = ck.status().expect("ck status");
        assert_eq!(now.worker_pid(0), worker);
    }
    let addr = ck
        .status()
        .expect("ck status")
        .metrics
        .clone()
        .expect("a metrics address");
    assert!(dropped_metric(&addr, 0) >= dropped);
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(
        text.contains(
            "worker output: lines dropped because ck's own output could not keep up (slot 0: "
        ),
        "{text}"
    );
    let after = rss_kib(ck_pid);
    assert!(
        after < before + 64 * 1024,
        "ck's RSS grew from {before} KiB to {after} KiB"
    );
    assert!(pid_alive(worker));
    // Read ck's stderr again: ck stops cleanly, and its log says what was dropped.
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::fs::File::from(stalled).read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let text = reader.join().expect("the reader");
    assert!(
        text.contains("worker output dropped: ck's own output (its stderr) could not keep up"),
        "{}",
        &text[text.len().saturating_sub(4000)..]
    );
    assert!(
        text.trim_end().ends_with("ck stopped"),
        "{}",
        &text[text.len().saturating_sub(4000)..]
    );
}

#[test]
fn the_pipes_survive_an_upgrade_and_nothing_is_lost() {
    let (mut ck, _port, status) = start_script("out-upgrade", TICKER);
    let pid = status.worker_pid(0);
    wait_log(&ck, "5 ticks", |log| ticks(log, pid).len() >= 5);
    let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(said.contains("upgraded:"), "{said}");
    ck.wait_status("upgrade done", READY_TIMEOUT, |s| s.upgrades == 1)
        .expect("wait for the status");
    // Ten more ticks after the new image said it took over.
    let after_upgrade = |log: &str| {
        let all = records(log);
        let Some(at) = all
            .iter()
            .position(|r| r["message"] == "ck upgraded in place: workers kept, steering kept")
        else {
            return 0;
        };
        lines_of(&all[at..], pid, "stdout").len()
    };
    wait_log(&ck, "ticks after the upgrade", |log| {
        after_upgrade(log) >= 10
    });
    assert_eq!(
        ck.status().expect("ck status").worker_pid(0),
        pid,
        "the same worker"
    );
    let log = ck.log();
    let seen = ticks(&log, pid);
    assert_eq!(seen.first(), Some(&0), "{log}");
    assert_contiguous(&seen, &log);
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn a_worker_writes_on_while_ck_is_dead_and_the_next_ck_reads_what_it_wrote() {
    let mut flags = vec!["--survive-supervisor"];
    flags.extend(shell_flags(TICKER));
    let (mut first, port, status) =
        start_ready("out-survive", 1, &flags).expect("start a ready ck");
    let (name, pid) = (first.name().to_string(), status.worker_pid(0));
    wait_log(&first, "5 ticks", |log| ticks(log, pid).len() >= 5);
    first.kill_supervisor().expect("kill the supervisor");
    let first_log = first.log();
    first.abandon().expect("abandon the dead ck");
    let last = *ticks(&first_log, pid).last().expect("ticks");
    // ck is away for a second: the worker writes some 20 lines into its pipe meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    assert!(pid_alive(pid), "the worker died while ck was away");
    let (port_text, base_text) = (port.to_string(), probe_base_for(port).to_string());
    let mut args = vec![
        "-w",
        "1",
        "--port",
        &port_text,
        "--probe-port-base",
        &base_text,
    ];
    args.extend_from_slice(&flags);
    let mut second = Ck::start(&name, &args).expect("start ck");
    let now = second
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.worker_pid(0), pid, "the same worker: {now:#?}");
    wait_log(&second, "40 ticks", |log| ticks(log, pid).len() >= 40);
    let log = second.log();
    let seen = ticks(&log, pid);
    // What it wrote while no ck ran came through (at most a line in flight when ck died
    // is lost), and then every line in order.
    assert!(
        seen[0] <= last + 2,
        "the first ck logged up to tick {last}, the second starts at {}:\n{log}",
        seen[0]
    );
    assert_contiguous(&seen, &log);
    assert!(pid_alive(pid));
    second.sigterm().expect("SIGTERM to ck");
    second.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn inherit_leaves_the_workers_on_ck_s_own_output() {
    let (ck, _port, status) =
        start_ready("out-inherit", 1, &["--worker-output", "inherit"]).expect("start a ready ck");
    let pid = status.worker_pid(0);
    let bare = format!("demo worker slot=0 pid={pid} listening on ");
    wait_log(&ck, &bare, |log| log.lines().any(|l| l.starts_with(&bare)));
    let log = ck.log();
    assert!(!log.contains(" INFO worker: "), "{log}");
}

#[test]
fn a_line_in_the_making_at_an_upgrade_is_logged_in_two_marked_parts() {
    let dir = ck_tests::sys::TempDir::new("out-half");
    let go = dir.path().join("go");
    let script = format!(
        "echo started; printf 'half-'; while [ ! -e {} ]; do sleep 0.05; done; echo rest; \
         exec sleep 600",
        go.display()
    );
    let (mut ck, _port, status) = start_script("out-half", &script);
    let pid = status.worker_pid(0);
    wait_log(&ck, "the first line", |log| {
        lines_of(&records(log), pid, "stdout").contains(&"started".to_string())
    });
    let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(said.contains("upgraded:"), "{said}");
    ck.wait_status("upgrade done", READY_TIMEOUT, |s| s.upgrades == 1)
        .expect("wait for the status");
    std::fs::write(&go, "").expect("the go file");
    wait_log(&ck, "the rest of the line", |log| {
        lines_of(&records(log), pid, "stdout").contains(&"rest".to_string())
    });
    let log = ck.log();
    assert_eq!(
        lines_of(&records(&log), pid, "stdout"),
        ["started", "half- [split: ck upgrade]", "rest"],
        "{log}"
    );
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}
