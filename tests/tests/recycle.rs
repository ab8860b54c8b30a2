//! Recycling made safe by steering: a leaking worker is replaced once its memory stays above
//! `--max-memory`, and workers are replaced after about `--max-requests` connections, each
//! through the graceful one-worker roll, under load, with no failed request.

use std::time::{Duration, Instant};

use ck_tests::app::demo_app;
use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::sys::TempDir;
use ck_tests::{READY_TIMEOUT, start_ready};

/// Runs the load for `secs` seconds and returns the report; prints it with `label`.
fn load_for(port: u16, secs: u64, label: &str) -> ck_tests::load::LoadReport {
    let load = Background::start(port, Mode::NewConnection);
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    load.finish_and_print(label)
}

#[test]
fn a_leaking_worker_is_recycled_without_a_failed_request() {
    let dir = TempDir::new("recycle-mem");
    let app = demo_app(&dir, "true", "--leak-per-request 16K");
    let (mut ck, port, before) =
        start_ready("recycle-mem", 2, &["--max-memory", "20M", "--", &app])
            .expect("start a ready ck");
    let report = load_for(port, 9, "recycle-mem");
    churn::assert_served(&report);
    let log = ck.log();
    let recycled = log.matches("recycling worker").count();
    assert!(recycled >= 1, "no worker was recycled:\n{log}");
    assert!(log.contains("above --max-memory"), "{log}");
    let after = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert!(
        !after.worker_pids().is_superset(&before.worker_pids()),
        "the same workers still serve: {after:#?}"
    );
    eprintln!("recycled {recycled} time(s)");
}

#[test]
fn workers_are_recycled_after_about_max_requests_without_a_failed_request() {
    let (mut ck, port, _) =
        start_ready("recycle-req", 2, &["--max-requests", "500"]).expect("start a ready ck");
    let report = load_for(port, 6, "recycle-req");
    churn::assert_served(&report);
    let log = ck.log();
    let recycled = log.matches("recycling worker").count();
    assert!(recycled >= 2, "recycled {recycled} time(s):\n{log}");
    // Each worker's limit is drawn within ±10 % of 500; the check runs once a second.
    for line in log.lines().filter(|l| l.contains("recycling worker")) {
        let limit: u64 = line
            .split("--max-requests: ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no limit in {line}"));
        assert!((450..=550).contains(&limit), "{line}");
    }
    ck.wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
}
