//! Hot spares (`--spares N`): booted and ready but never selected; when a serving worker dies, a
//! spare takes its place in the same publish and a new spare boots; a rolling restart renews
//! them; a spare that keeps dying unused is retried after a growing delay.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use ck_tests::app::demo_app_on_slot;
use ck_tests::churn::{Background, SETTLE, failures_by_kind};
use ck_tests::load::Mode;
use ck_tests::sys::{TempDir, kill_hard};
use ck_tests::{READY_TIMEOUT, Status, start};

/// Slots that serve (not spares) and are ready.
fn serving(s: &Status) -> Vec<u32> {
    s.slots
        .iter()
        .filter(|slot| !slot.spare && slot.state == "ready")
        .map(|slot| slot.slot)
        .collect()
}

/// Ready spares.
fn ready_spares(s: &Status) -> Vec<&ck_tests::SlotReport> {
    s.slots
        .iter()
        .filter(|slot| slot.spare && slot.state == "standby")
        .collect()
}

#[test]
fn a_ready_spare_takes_a_dead_workers_place_at_once() {
    let (mut ck, port) = start("spares", &["-w", "2", "--spares", "1"]).expect("start ck");
    let before = ck
        .wait_status("2 workers and a ready spare", READY_TIMEOUT, |s| {
            s.bpf && serving(s).len() == 2 && ready_spares(s).len() == 1
        })
        .expect("wait for the status");
    let spare = ready_spares(&before)[0].clone();
    assert!(
        !before.active.contains(&spare.slot),
        "a spare is never selected: {before:#?}"
    );

    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let victim = before.worker_pid(0);
    kill_hard(victim);
    let taken = Instant::now();
    let after = ck
        .wait_status(
            "the spare serving and a new spare ready",
            READY_TIMEOUT,
            |s| {
                serving(s).len() == 2
                    && s.slots
                        .iter()
                        .any(|slot| slot.pid == spare.pid && !slot.spare && slot.state == "ready")
                    && ready_spares(s).len() == 1
            },
        )
        .expect("wait for the status");
    eprintln!(
        "spare took over and a new one was ready after {:?}: {after:#?}",
        taken.elapsed()
    );
    assert!(after.active.contains(&spare.slot), "{after:#?}");
    assert!(
        after.slots.iter().all(|s| s.pid != Some(victim)),
        "{after:#?}"
    );
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("spares");
    let kinds = failures_by_kind(&report);
    assert_eq!(report.refused, 0, "{kinds:?}");
    assert_eq!(report.timeout, 0, "{kinds:?}");
    assert!(
        ck.log()
            .contains("a spare takes the place of the dead worker"),
        "{}",
        ck.log()
    );
}

#[test]
fn a_rolling_restart_renews_the_spares() {
    let (mut ck, _port) = start("spares-roll", &["-w", "2", "--spares", "1"]).expect("start ck");
    let before = ck
        .wait_status("a ready spare", READY_TIMEOUT, |s| {
            s.bpf && serving(s).len() == 2 && ready_spares(s).len() == 1
        })
        .expect("wait for the status");
    let old: BTreeSet<u32> = before.worker_pids();
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let after = ck
        .wait_status("new workers and a new spare", READY_TIMEOUT, |s| {
            serving(s).len() == 2 && ready_spares(s).len() == 1 && s.worker_pids().is_disjoint(&old)
        })
        .expect("wait for the status");
    assert_eq!(after.slots.len(), 3, "{after:#?}");
}

#[test]
fn a_spare_that_keeps_dying_is_retried_after_a_growing_delay() {
    let dir = TempDir::new("spares-loop");
    // -w 1: the spare gets slot 1, and the app exits at once there.
    let app = demo_app_on_slot(&dir, 1, "--no-such-option");
    let (mut ck, _port) =
        start("spares-loop", &["-w", "1", "--spares", "1", "--", &app]).expect("start ck");
    ck.wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    std::thread::sleep(Duration::from_secs(2));
    let log = ck.log();
    let delays: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("a spare died before it was used"))
        .filter_map(|l| {
            l.split("delay_ms=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    eprintln!("spare retry delays: {delays:?}");
    assert!(delays.len() >= 3, "{log}");
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    assert!(delays.len() <= 6, "spares restarted too often: {delays:?}");
    let status = ck.status().expect("ck status");
    assert_eq!(serving(&status), vec![0], "{status:#?}");
}
