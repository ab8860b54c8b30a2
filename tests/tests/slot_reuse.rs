//! Slot indices are reused: a rolling restart puts each replacement on the lowest free slot,
//! which is often one that an earlier, replaced worker left. A timer armed for that earlier
//! worker (its `--ready-timeout`, its `--ready-grace`) must not act on the newcomer, nor may
//! its counters be reported as the newcomer's.

use std::time::{Duration, Instant};

use ck_tests::app::demo_app_with_marker;
use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::sys::TempDir;
use ck_tests::{burst, local, start_ready};

/// The replacements' `--ready-timeout`.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the second generation of workers takes to say READY=1: well within the timeout.
const SLOW_BOOT: &str = "3500ms";
/// When the second reload starts, after the first worker was ready: its replacement then boots
/// across the instant the first worker's ready timeout (had it still been starting) would fire.
const SECOND_RELOAD_AFTER: Duration = Duration::from_secs(2);

#[test]
fn a_replacement_on_a_reused_slot_gets_its_own_ready_timeout() {
    let dir = TempDir::new("slotreuse");
    let marker = dir.path().join("slow-boot");
    let app = demo_app_with_marker(&dir, &marker, &format!("--ready-after {SLOW_BOOT}"));
    let timeout = format!("{}s", READY_TIMEOUT.as_secs());
    let (mut ck, port, first) =
        start_ready("slotreuse", 1, &["--ready-timeout", &timeout, "--", &app])
            .expect("start a ready ck");
    let first_ready = Instant::now();
    let first_pid = first.slot(0).pid.expect("slot 0 has a worker");
    let load = Background::start(port, Mode::NewConnection);

    // First reload: the replacement goes to slot 1; slot 0 is retired once its worker exits.
    let said = ck.ctl_ok(&["reload"]).expect("ck reload");
    eprintln!("first reload: {}", said.trim());
    let moved = ck
        .wait_status("only slot 1 left", Duration::from_secs(10), |s| {
            s.slots.len() == 1 && s.slots[0].slot == 1 && s.slots[0].state == "ready"
        })
        .expect("wait for the status");
    let second_pid = moved.slot(1).pid.expect("slot 1 has a worker");

    // Second reload, of slow-booting replacements: this one goes to slot 0 again.
    std::fs::write(&marker, "").expect("creating the marker");
    std::thread::sleep(SECOND_RELOAD_AFTER.saturating_sub(first_ready.elapsed()));
    eprintln!(
        "second reload {:?} after the first worker was ready",
        first_ready.elapsed()
    );
    let out = ck.ctl(&["reload"]).expect("ck reload");
    let said = ck_tests::ck::said(&out);
    eprintln!("second reload: {}: {}", out.status, said.trim());
    let report = load.finish_and_print("slotreuse");
    assert!(
        out.status.success() && said.contains("reloaded 1 worker(s)"),
        "the second reload failed although its replacement boots in {SLOW_BOOT} with a \
         --ready-timeout of {READY_TIMEOUT:?}: {said}\n--- ck log ---\n{}",
        ck.log()
    );
    let status = ck
        .wait_status("only slot 0 left", Duration::from_secs(10), |s| {
            s.slots.len() == 1 && s.slots[0].slot == 0 && s.slots[0].state == "ready"
        })
        .expect("wait for the status");
    let third_pid = status.slot(0).pid.expect("slot 0 has a worker");
    assert!(
        third_pid != first_pid && third_pid != second_pid,
        "{status:#?}"
    );
    churn::assert_no_failures(&report);
}

/// A worker on a reused slot starts with the slot's counters at zero: the connections its
/// predecessor on that slot was sent (`selected`, in a map of its own) are not reported as its.
/// With `-w 1`, two reloads move the fleet from slot 0 to slot 1 and back.
#[test]
fn a_reused_slot_counts_from_zero() {
    let (mut ck, port, first) = start_ready("slotcount", 1, &[]).expect("start a ready ck");
    assert_eq!(first.slot(0).selected, 0, "{first:#?}");
    let before = burst(local(port), 40);
    assert_eq!(before.ok, 40, "{before:?}");
    let counted = ck.status().expect("ck status");
    assert_eq!(counted.slot(0).selected, 40, "{counted:#?}");

    for (reload, slot) in [(1, 1), (2, 0)] {
        let said = ck.ctl_ok(&["reload"]).expect("ck reload");
        eprintln!("reload {reload}: {}", said.trim());
        let status = ck
            .wait_status(&format!("only slot {slot} left"), WAIT, |s| {
                s.slots.len() == 1 && s.slots[0].slot == slot && s.slots[0].state == "ready"
            })
            .expect("wait for the status");
        assert_eq!(status.slot(slot).selected, 0, "{status:#?}");
    }

    let after = burst(local(port), 25);
    assert_eq!(after.ok, 25, "{after:?}");
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(0).selected, 25, "{status:#?}");
}

/// How long a reload's replacement may take to be the fleet's only ready worker.
const WAIT: Duration = Duration::from_secs(10);
