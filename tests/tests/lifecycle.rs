//! Lifecycle: a clean stop (SIGTERM or `ck stop`) leaves no worker, pin, run-time file or
//! bound port behind; a crashed supervisor's stale pins do not stop the next start.

use std::collections::BTreeSet;
use std::time::Duration;

use ck_tests::ck::{control_socket, lock_file, pins_dir};
use ck_tests::sys::{port_bindable, wait_all_dead};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, start_ready};

/// Asserts that instance `name` (whose workers were `workers`) left nothing behind.
fn assert_nothing_left(name: &str, port: u16, workers: &BTreeSet<u32>) {
    let alive = wait_all_dead(workers, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "workers still alive after ck exited: {alive:?}"
    );
    assert!(
        !pins_dir(name).exists(),
        "{} is left",
        pins_dir(name).display()
    );
    assert!(
        !control_socket(name).exists(),
        "{} is left",
        control_socket(name).display()
    );
    assert!(
        !lock_file(name).exists(),
        "{} is left",
        lock_file(name).display()
    );
    assert!(port_bindable(port), "port {port} is still bound");
}

#[test]
fn sigterm_stops_everything_cleanly() {
    let (mut ck, port, status) = start_ready("sigterm", 3, &[]).expect("start a ready ck");
    let workers = status.worker_pids();
    assert_eq!(workers.len(), 3, "{status:#?}");
    assert_eq!(status.pid, ck.pid());
    assert!(pins_dir(ck.name()).exists() && control_socket(ck.name()).exists());

    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert_nothing_left(ck.name(), port, &workers);
    let log = ck.log();
    assert!(log.contains("ck stopped"), "{log}");
    let clean_exits = log
        .lines()
        .filter(|l| l.contains("worker exited") && l.contains("exit 0"))
        .count();
    assert_eq!(clean_exits, 3, "not every worker exited 0:\n{log}");
}

#[test]
fn ck_stop_stops_everything_cleanly() {
    let (mut ck, port, status) = start_ready("stop", 2, &[]).expect("start a ready ck");
    let said = ck.ctl_ok(&["stop"]).expect("ck stop");
    assert!(said.contains("stopping"), "{said}");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert_nothing_left(ck.name(), port, &status.worker_pids());
    // Nothing answers any more.
    let out = ck.ctl(&["status", "--json"]).expect("ck status");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ck: error:") && err.contains("is running"),
        "{err}"
    );
}

#[test]
fn stale_pins_of_a_crashed_instance_are_replaced() {
    let (mut crashed, port, status) = start_ready("stale", 2, &[]).expect("start a ready ck");
    let name = crashed.name().to_string();
    let workers = status.worker_pids();
    let signal = crashed.kill_supervisor().expect("kill the supervisor");
    eprintln!("supervisor ended by {signal}");
    // Workers get SIGTERM by PDEATHSIG when their supervisor dies.
    let alive = wait_all_dead(&workers, Duration::from_secs(5));
    assert!(
        alive.is_empty(),
        "workers outlived their supervisor: {alive:?}"
    );
    assert!(
        pins_dir(&name).exists(),
        "a crash leaves its pins (that is what we test)"
    );

    let port_text = port.to_string();
    let mut ck = Ck::start(&name, &["--port", &port_text, "-w", "2"]).expect("start ck");
    let status: Status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let log = ck.log();
    assert!(
        log.contains("stale pins"),
        "no word of stale pins in:\n{log}"
    );
    assert!(status.bpf && pins_dir(&name).exists(), "{status:#?}");
    assert!(status.worker_pids().is_disjoint(&workers));

    let tally = burst(local(port), 20);
    eprintln!("after restart: {tally:?}");
    assert_eq!(tally.ok, 20, "{tally:?}");
    assert!(tally.only_from(&status.worker_pids()), "{tally:?}");

    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert_nothing_left(&name, port, &status.worker_pids());
    drop(crashed);
}
