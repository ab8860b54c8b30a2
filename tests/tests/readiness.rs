//! Readiness gating: a worker that has not sent `READY=1` gets no connection while another
//! worker is ready; once ready, it gets its share. The worker is a scale-up's, started beside a
//! ready one: a fleet's first boot is the one exception (its starting workers are chosen for 2 s
//! beside the first ready one, `boot_spread.rs`).

use std::time::{Duration, Instant};

use ck_tests::app::demo_app_on_slot;
use ck_tests::sys::TempDir;
use ck_tests::{Tally, burst_pinned, get_new_conn, local, start};

/// How long slot 1's worker waits before `READY=1`.
const SLOW_READY: &str = "2s";

#[test]
fn a_worker_gets_no_connection_before_ready() {
    let dir = TempDir::new("readiness");
    // Slot 1 boots slowly (READY=1 after 2 s, STATUS=booting at once); slot 0 is ready at once.
    let app = demo_app_on_slot(&dir, 1, &format!("--ready-after {SLOW_READY}"));
    let (mut ck, port) =
        start("ready", &["-w", "1", "--policy", "round-robin", "--", &app]).expect("start ck");
    let addr = local(port);
    ck.wait_ready(1, Duration::from_secs(15))
        .expect("slot 0 ready");
    ck.ctl_ok(&["scale", "2"]).expect("ck scale 2");

    let status = ck
        .wait_status("slot 1 started", Duration::from_secs(15), |s| {
            s.slots
                .iter()
                .any(|slot| slot.slot == 1 && slot.pid.is_some())
        })
        .expect("wait for the status");
    assert_eq!(
        status.slot(1).state,
        "starting",
        "slot 1 was ready too soon: {status:#?}"
    );
    assert_eq!(status.active, vec![0], "{status:#?}");

    // New connections while slot 1 is starting. A connection counts as "before ready" only
    // when a status taken after it still shows slot 1 starting: readiness never goes back,
    // so slot 1 was not in the active set when that connection was steered.
    let mut before = Tally::default();
    let mut boundary = Tally::default();
    let mut last_starting = status;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let outcome = get_new_conn(addr);
        let now = ck.status().expect("ck status");
        if now.slot(1).state == "starting" {
            before.add(&outcome);
            last_starting = now;
        } else {
            boundary.add(&outcome);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "slot 1 never left starting: {last_starting:#?}"
        );
    }
    eprintln!("while slot 1 was starting: {before:?}; at the switch: {boundary:?}");
    assert!(
        before.ok > 0,
        "no connection was made while slot 1 was starting"
    );
    assert_eq!(before.failed(), 0, "{before:?}");
    assert_eq!(
        before.slot(1),
        0,
        "slot 1 got connections before READY=1: {before:?}"
    );
    assert_eq!(before.slot(0), before.ok, "{before:?}");
    assert_eq!(boundary.failed(), 0, "{boundary:?}");
    let slow = last_starting.slot(1);
    assert_eq!(
        slow.selected, 0,
        "the program sent slot 1 connections: {last_starting:#?}"
    );
    assert_eq!(
        slow.status.as_deref(),
        Some("booting"),
        "{last_starting:#?}"
    );

    let status = ck
        .wait_ready(2, Duration::from_secs(15))
        .expect("wait for ready slots");
    assert_eq!(status.active, vec![0, 1], "{status:#?}");
    let after = burst_pinned(addr, 100);
    eprintln!("after slot 1 became ready: {after:?}");
    assert_eq!(after.ok, 100, "{after:?}");
    assert_eq!((after.slot(0), after.slot(1)), (50, 50), "{after:?}");
}
