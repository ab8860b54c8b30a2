//! The fleet never goes dark: steering outlives a group whose every worker died, a single
//! worker restarts without a refused connection, a crash loop of the only worker keeps
//! trying (half-open breaker, fleet reported degraded), and random SIGKILLs leave every slot
//! serving with nothing refused.

use std::collections::BTreeSet;
use std::time::Duration;

use ck_tests::app::script;
use ck_tests::churn::{Background, SETTLE, failures_by_kind, print_report};
use ck_tests::ck::said;
use ck_tests::http::burst_without;
use ck_tests::load::{FailureKind, Mode};
use ck_tests::sys::{TempDir, instance_processes, kill_hard, port_bindable};
use ck_tests::{READY_TIMEOUT, Status, burst_pinned, churn::CONNECTIONS, local, start_ready};

/// Waits until `workers` slots have ready workers none of which is in `dead`, with steering
/// verified by the kernel (unless started with `--no-bpf`).
fn wait_replaced(ck: &mut ck_tests::Ck, workers: usize, dead: &BTreeSet<u32>) -> Status {
    let want_bpf = !ck.no_bpf();
    ck.wait_status("every slot replaced and ready", READY_TIMEOUT, |s| {
        s.ready_count() == workers
            && (s.bpf || !want_bpf)
            && s.slots
                .iter()
                .all(|slot| slot.pid.is_some_and(|p| !dead.contains(&p)))
    })
    .expect("wait for the status")
}

#[test]
fn steering_survives_every_worker_of_the_group_dying() {
    let (mut ck, port, before) =
        start_ready("alldead", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    let dead = before.worker_pids();
    for pid in &dead {
        kill_hard(*pid);
    }
    let after = wait_replaced(&mut ck, 2, &dead);
    eprintln!("replaced: {after:#?}");
    assert!(
        after.steering.iter().all(|g| g.attached == Some(true)),
        "{after:#?}"
    );
    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    let tally = burst_without(burst_pinned, local(port), 200, 1, "drained");
    assert_eq!(tally.slot(0), 200, "{tally:?}");
}

/// `-w 1` under a new-connection load: SIGKILL the worker five times; no connection may be
/// refused (the socket is held for the replacement) and none may time out.
fn single_worker_kills(mode_args: &[&str], label: &str) {
    let mut args = vec!["--restart-backoff", "100ms"];
    args.extend_from_slice(mode_args);
    let (mut ck, port, _) = start_ready(label, 1, &args).expect("start a ready ck");
    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let mut dead = BTreeSet::new();
    for kill in 1..=5 {
        let status = ck.status().expect("ck status");
        let pid = status.worker_pid(0);
        kill_hard(pid);
        dead.insert(pid);
        eprintln!("{label}: kill {kill} of pid {pid} at {:?}", load.now());
        wait_replaced(&mut ck, 1, &dead);
        std::thread::sleep(Duration::from_secs(1));
    }
    let report = load.finish_and_print(label);
    let kinds = failures_by_kind(&report);
    assert_eq!(report.refused, 0, "refused connections: {kinds:?}");
    assert_eq!(report.timeout, 0, "timeouts: {kinds:?}");
    assert_eq!(report.other, 0, "{kinds:?}");
    // The only failures are requests a killed worker had already accepted.
    assert!(report.reset <= 5 * CONNECTIONS as u64, "{kinds:?}");
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(0).restarts, 5, "{status:#?}");
    assert_eq!(status.slot(0).breaker, "closed", "{status:#?}");
    assert!(status.degraded.is_empty(), "{status:#?}");
    let held = ck
        .log()
        .matches("last socket of its group kept open")
        .count();
    assert_eq!(
        held, 5,
        "every kill held the only socket for the replacement"
    );
    eprintln!("{label}: {} resets in 5 kills", report.reset);
}

#[test]
fn a_single_worker_restarts_without_refusing_a_connection() {
    single_worker_kills(&[], "onekill");
}

#[test]
fn a_single_worker_restarts_without_refusing_a_connection_without_bpf() {
    single_worker_kills(&["--no-bpf"], "onekill-nobpf");
}

#[test]
fn the_only_worker_crash_looping_keeps_trying_and_ck_stop_still_answers() {
    let dir = TempDir::new("halfopen");
    let app = script(&dir, "app.sh", "exit 1");
    let app = app.to_str().expect("UTF-8 temp path");
    let (mut ck, port) = ck_tests::start(
        "halfopen",
        &[
            "-w",
            "1",
            "--crash-limit",
            "3",
            "--crash-window",
            "20s",
            "--restart-backoff",
            "50ms,300ms",
            "--",
            app,
        ],
    )
    .expect("start ck");
    let degraded = ck
        .wait_status("a half-open breaker", Duration::from_secs(15), |s| {
            s.slot(0).breaker == "half-open" && !s.degraded.is_empty()
        })
        .expect("wait for the status");
    eprintln!("{degraded:#?}");
    assert!(
        degraded.degraded[0].contains("--min-workers"),
        "{degraded:#?}"
    );
    let restarts = degraded.slot(0).restarts;
    let retried = ck
        .wait_status(
            "more tries at the maximum backoff",
            Duration::from_secs(15),
            |s| s.slot(0).restarts >= restarts + 2,
        )
        .expect("wait for the status");
    assert_eq!(retried.slot(0).breaker, "half-open", "{retried:#?}");
    let log = ck.log();
    assert!(log.contains("fleet degraded"), "{log}");
    // Boot crashes back off: 50 ms, 100 ms, then the breaker would open.
    let delays: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("restart scheduled"))
        .filter_map(|l| {
            l.split("delay_ms=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    eprintln!("backoff delays: {delays:?}");
    assert!(delays.len() >= 2 && delays[0] < delays[1], "{delays:?}");
    // The socket is held between tries: connections queue instead of being refused.
    assert!(!port_bindable(port), "the port was released");

    // With no worker running, `ck stop` still answers, and ck exits cleanly.
    let out = ck.ctl(&["stop"]).expect("ck stop");
    assert!(out.status.success(), "ck stop failed: {}", said(&out));
    assert!(said(&out).contains("stopping"), "{}", said(&out));
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(instance_processes(ck.name()).is_empty());
}

#[test]
fn random_kills_leave_every_slot_serving_and_refuse_nothing() {
    let (mut ck, port, _) = start_ready("chaos", 4, &[]).expect("start a ready ck");
    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let mut dead = BTreeSet::new();
    for round in 0..12u32 {
        let status = ck.status().expect("ck status");
        let live: Vec<u32> = status.slots.iter().filter_map(|s| s.pid).collect();
        let victim = live[(round as usize * 7 + 3) % live.len()];
        kill_hard(victim);
        dead.insert(victim);
        std::thread::sleep(Duration::from_millis(500));
    }
    let after = wait_replaced(&mut ck, 4, &dead);
    std::thread::sleep(SETTLE);
    let report = load.finish();
    print_report("chaos", &report);
    let kinds = failures_by_kind(&report);
    assert_eq!(kinds.get(&FailureKind::Refused), None, "{kinds:?}");
    assert_eq!(kinds.get(&FailureKind::Timeout), None, "{kinds:?}");
    assert!(after.degraded.is_empty(), "{after:#?}");
    assert!(
        after.slots.iter().all(|s| s.breaker == "closed"),
        "{after:#?}"
    );
    eprintln!("chaos: {} resets in 12 kills", report.reset);
}
