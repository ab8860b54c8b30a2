//! Supervision of misbehaving workers while the others serve a continuous load: a slot whose app
//! keeps crashing trips its circuit breaker and is tried again after the cool-down; a rolling
//! restart whose replacements never become ready is aborted and leaves the old workers serving;
//! workers that ignore SIGTERM are killed after the drain timeout so that shutdown completes.

use std::collections::BTreeSet;
use std::time::Duration;

use ck_tests::app::{demo_app_with_marker, script};
use ck_tests::churn::{self, Background, SETTLE};
use ck_tests::ck::said;
use ck_tests::load::Mode;
use ck_tests::sys::{TempDir, instance_processes, poll_until, wait_all_dead};
use ck_tests::{READY_TIMEOUT, burst, ck_bin, local, start, start_ready};

#[test]
fn crash_looping_slot_trips_its_breaker_and_is_retried_after_the_cool_down() {
    let dir = TempDir::new("crashloop");
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "[ \"$CK_SLOT\" = 1 ] && exit 1\nexec '{}' demo-worker",
            ck_bin().display()
        ),
    );
    let app = app.to_str().expect("UTF-8 temp path");
    let (mut ck, port) = start(
        "crashloop",
        &[
            "-w",
            "3",
            "--crash-limit",
            "3",
            "--crash-window",
            "10s",
            "--crash-cooldown",
            "3s",
            "--restart-backoff",
            "50ms,200ms",
            "--",
            app,
        ],
    )
    .expect("start ck");
    ck.wait_status("slots 0 and 2 ready", READY_TIMEOUT, |s| {
        s.bpf && s.ready_count() == 2 && s.slot(0).state == "ready" && s.slot(2).state == "ready"
    })
    .expect("wait for the status");
    let load = Background::start(port, Mode::NewConnection);

    let tripped = ck
        .wait_status("slot 1's breaker open", Duration::from_secs(10), |s| {
            let slot = s.slot(1);
            slot.breaker == "open" && slot.state == "broken"
        })
        .expect("wait for the status");
    let at_trip = tripped.slot(1).clone();
    eprintln!(
        "breaker open at {:?} into the load: {at_trip:?}",
        load.now()
    );
    assert_eq!(at_trip.pid, None, "{tripped:#?}");
    assert_eq!(at_trip.last_exit.as_deref(), Some("exit 1"), "{tripped:#?}");
    assert!(!tripped.active.contains(&1), "{tripped:#?}");
    assert_eq!(tripped.ready_count(), 2, "{tripped:#?}");
    let log = ck.log();
    assert!(
        log.contains("circuit breaker open"),
        "no breaker line in the log:\n{log}"
    );

    // After the 3 s cool-down, slot 1 is tried again (and crashes again).
    let retried = ck
        .wait_status(
            "slot 1 tried again after the cool-down",
            Duration::from_secs(10),
            |s| s.slot(1).restarts > at_trip.restarts,
        )
        .expect("wait for the status");
    eprintln!(
        "slot 1 tried again at {:?} into the load: {:?}",
        load.now(),
        retried.slot(1)
    );
    std::thread::sleep(SETTLE);

    let report = load.finish_and_print("crashloop");
    churn::assert_served(&report);
    assert_eq!(
        report.by_slot.get("1"),
        None,
        "the crashing slot answered: {}",
        report.summary()
    );
    let log = ck.log();
    let trips = log.matches("circuit breaker open").count();
    eprintln!(
        "breaker opened {trips} time(s); slot 1 restarts {} at the trip, {} later",
        at_trip.restarts,
        retried.slot(1).restarts
    );
}

#[test]
fn reload_with_never_ready_replacements_is_aborted_and_old_workers_keep_serving() {
    let dir = TempDir::new("neverready");
    let marker = dir.path().join("never-ready");
    let app = demo_app_with_marker(&dir, &marker, "--ready-after 1h");
    let (ck, port, before) = start_ready("neverready", 2, &["--ready-timeout", "2s", "--", &app])
        .expect("start a ready ck");
    let old_pids = before.worker_pids();
    let old_slots: Vec<(u32, Option<u32>)> = before.slots.iter().map(|s| (s.slot, s.pid)).collect();
    assert_eq!(old_pids.len(), 2, "{before:#?}");

    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    std::fs::write(&marker, "").expect("creating the marker");
    let out = ck.ctl(&["reload"]).expect("ck reload");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "ck reload at {:?} into the load: {}: {}",
        load.now(),
        out.status,
        said(&out)
    );
    assert!(!out.status.success(), "the reload succeeded: {stderr}");
    assert!(
        stderr.contains("rolling restart aborted"),
        "unexpected reload error: {stderr}"
    );
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("neverready");
    churn::assert_served(&report);
    let strangers: Vec<u32> = report
        .by_pid
        .keys()
        .copied()
        .filter(|p| !old_pids.contains(p))
        .collect();
    assert!(
        strangers.is_empty(),
        "pids {strangers:?} answered, not the old workers {old_pids:?}"
    );

    // Only the original workers are left: same slots, same pids, no replacement process.
    let mut processes = BTreeSet::new();
    let gone = poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        processes = instance_processes(ck.name()).into_iter().collect();
        processes == old_pids
    });
    assert!(
        gone,
        "instance processes {processes:?}, expected only {old_pids:?}"
    );
    let status = ck.status().expect("ck status");
    let slots: Vec<(u32, Option<u32>)> = status.slots.iter().map(|s| (s.slot, s.pid)).collect();
    assert_eq!(slots, old_slots, "{status:#?}");
    assert!(!status.reloading, "{status:#?}");
    assert_eq!(status.ready_count(), 2, "{status:#?}");

    let tally = burst(local(port), 100);
    eprintln!("after the aborted reload: {tally:?}");
    assert_eq!(tally.ok, 100, "{tally:?}");
    assert!(
        tally.only_from(&old_pids),
        "answers not from the old workers {old_pids:?}: {tally:?}"
    );
}

#[test]
fn sigterm_ignoring_workers_are_killed_after_the_drain_timeout() {
    let ck_path = ck_bin();
    let ck_path = ck_path.to_str().expect("UTF-8 ck path");
    let (mut ck, port, status) = start_ready(
        "ignoreterm",
        2,
        &[
            "--drain-timeout",
            "2s",
            "--",
            ck_path,
            "demo-worker",
            "--ignore-sigterm",
        ],
    )
    .expect("start a ready ck");
    let workers = status.worker_pids();
    assert_eq!(workers.len(), 2, "{status:#?}");

    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("ignoreterm");
    churn::assert_served(&report);

    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    let killed = log
        .lines()
        .filter(|l| l.contains("worker killed (SIGKILL)") && l.contains("drain timeout"))
        .count();
    eprintln!("{killed} worker(s) killed after the drain timeout");
    assert_eq!(killed, 2, "expected 2 drain-timeout kills in:\n{log}");
    assert!(
        log.contains("ignoring SIGTERM"),
        "the workers did not see SIGTERM:\n{log}"
    );
    let alive = wait_all_dead(&workers, Duration::from_secs(5));
    assert!(alive.is_empty(), "workers still alive: {alive:?}\n{log}");
    let left = instance_processes(ck.name());
    assert!(left.is_empty(), "instance processes left: {left:?}");
}
