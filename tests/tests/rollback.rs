//! `--keep-previous` and `ck rollback`: after a reload the old workers stay alive, out of the
//! active set (state `kept`, shown with their memory); `ck rollback` puts them back in one map
//! write and retires the new ones, under a new-connection load that never retries, with no
//! failed request; the window's end, a newer reload and `ck upgrade` each do what README says;
//! a UDP group's flows stay on their workers through the reload and the rollback; without a
//! kept release `ck rollback` refuses, naming what to run instead.

use std::collections::BTreeSet;
use std::time::Duration;

use ck_tests::churn::{Background, SETTLE, answers_from_after, assert_no_failures};
use ck_tests::http::metrics_text;
use ck_tests::load::Mode;
use ck_tests::udp::{Flows, answered_by, reload_while_sending, udp_fleet};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, start};

/// The pids of the slots in `state`.
fn pids_in(s: &Status, state: &str) -> BTreeSet<u32> {
    s.slots
        .iter()
        .filter(|slot| slot.state == state)
        .filter_map(|slot| slot.pid)
        .collect()
}

/// Starts `-w 2` with `--keep-previous window` and waits for both workers; their pids.
fn fleet(what: &str, window: &str) -> (Ck, u16, BTreeSet<u32>) {
    let args = [
        "-w",
        "2",
        "--keep-previous",
        window,
        "--metrics",
        "127.0.0.1:0",
    ];
    let (mut ck, port) = start(what, &args).expect("start ck");
    let ready = ck.wait_ready(2, READY_TIMEOUT).expect("2 ready workers");
    (ck, port, ready.worker_pids())
}

/// `ck reload`, then the status once the new release serves and `old` is kept.
fn reload_keeping(ck: &mut Ck, old: &BTreeSet<u32>) -> Status {
    ck.ctl_ok(&["reload"]).expect("ck reload");
    ck.wait_status("the old release kept", READY_TIMEOUT, |s| {
        pids_in(s, "kept") == *old && pids_in(s, "ready").len() == 2
    })
    .expect("the kept release")
}

#[test]
fn a_rollback_puts_the_kept_release_back_in_one_flip_with_no_failed_request() {
    let (mut ck, port, old) = fleet("rollback", "10m");
    let load = Background::start_without_retry(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);

    let kept = reload_keeping(&mut ck, &old);
    let new = pids_in(&kept, "ready");
    assert!(new.is_disjoint(&old), "{kept:#?}");
    // Kept: alive, socket open, never chosen.
    let kept_slots: Vec<u32> = kept
        .slots
        .iter()
        .filter(|s| s.state == "kept")
        .map(|s| s.slot)
        .collect();
    assert!(
        kept_slots.iter().all(|s| !kept.active.contains(s)),
        "{kept:#?}"
    );
    let tally = burst(local(port), 40);
    assert!(tally.only_from(&new), "{tally:?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(
        text.contains("previous release: 2 worker(s) kept") && text.contains("ck rollback"),
        "{text}"
    );
    let metrics = metrics_text(kept.metrics.as_deref().expect("--metrics"));
    let kept_lines = metrics
        .lines()
        .filter(|l| l.starts_with("ck_worker_state{") && l.contains("state=\"kept\"} 1"));
    assert_eq!(kept_lines.count(), 2, "{metrics}");

    let asked = load.now();
    let answer = ck.ctl_ok(&["rollback"]).expect("ck rollback");
    assert!(answer.contains("rolled back"), "{answer}");
    let back = ck.status().expect("ck status");
    let ready_now = pids_in(&back, "ready");
    assert_eq!(ready_now, old, "the kept release serves again: {back:#?}");
    let tally = burst(local(port), 40);
    assert!(tally.only_from(&old), "{tally:?}");
    ck.wait_status("the new release gone", READY_TIMEOUT, |s| {
        s.worker_pids().is_disjoint(&new)
    })
    .expect("the new release leaves");
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("rollback");
    assert_no_failures(&report);
    // A second past the request, nothing new reaches the release that left.
    let late = answers_from_after(&report, asked + Duration::from_secs(1), &new);
    assert!(late.is_empty(), "answered by the new release: {late:?}");

    // Nothing is kept now: a second rollback says so and changes nothing.
    let again = ck.ctl(&["rollback"]).expect("ck rollback");
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("no previous release is kept"), "{err}");
    assert_eq!(ck.status().expect("status").worker_pids(), old);
}

#[test]
fn without_keep_previous_a_rollback_refuses_and_names_what_to_run_instead() {
    let (mut ck, _port) = start("rollback-off", &["-w", "2"]).expect("start ck");
    let before = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("ready")
        .worker_pids();
    let out = ck.ctl(&["rollback"]).expect("ck rollback");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--keep-previous DURATION") && err.contains("ck reload"),
        "{err}"
    );
    // A reload without --keep-previous keeps nothing either: the old workers leave.
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let after = ck
        .wait_status("the old workers gone", READY_TIMEOUT, |s| {
            s.worker_pids().is_disjoint(&before)
        })
        .expect("status");
    assert!(pids_in(&after, "kept").is_empty(), "{after:#?}");
    assert_eq!(ck.status().expect("status").worker_pids().len(), 2);
}

#[test]
fn the_kept_release_leaves_at_the_end_of_its_window() {
    let (mut ck, _port, old) = fleet("rollback-window", "2s");
    reload_keeping(&mut ck, &old);
    let after = ck
        .wait_status("the kept release gone", READY_TIMEOUT, |s| {
            s.worker_pids().is_disjoint(&old)
        })
        .expect("the window ends");
    assert_eq!(pids_in(&after, "ready").len(), 2, "{after:#?}");
    assert!(
        ck.log()
            .contains("the previous release's --keep-previous window ended"),
        "{}",
        ck.log()
    );
    let out = ck.ctl(&["rollback"]).expect("ck rollback");
    assert!(!out.status.success());
}

#[test]
fn a_newer_reload_keeps_only_the_release_it_replaces() {
    let (mut ck, _port, first) = fleet("rollback-twice", "10m");
    let kept = reload_keeping(&mut ck, &first);
    let second = pids_in(&kept, "ready");
    reload_keeping(&mut ck, &second);
    let after = ck
        .wait_status("the first release gone", READY_TIMEOUT, |s| {
            s.worker_pids().is_disjoint(&first)
        })
        .expect("the first release leaves");
    assert_eq!(pids_in(&after, "kept"), second, "{after:#?}");
    ck.ctl_ok(&["rollback"]).expect("ck rollback");
    let back = ck.status().expect("status");
    assert_eq!(pids_in(&back, "ready"), second, "{back:#?}");
}

#[test]
fn an_upgrade_carries_the_kept_release() {
    let (mut ck, port, old) = fleet("rollback-upgrade", "10m");
    reload_keeping(&mut ck, &old);
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    // Asked at once, while the new image may still load its program: answered once it steers
    // and the flip took effect, so from the answer on only the kept release answers.
    ck.ctl_ok(&["rollback"])
        .expect("ck rollback after the upgrade");
    let tally = burst(local(port), 40);
    let upgraded = ck.status().expect("status after the upgrade");
    assert_eq!(upgraded.upgrades, 1, "{upgraded:#?}");
    assert_eq!(upgraded.pid, ck.pid(), "an upgrade keeps ck's pid");
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&old), "{tally:?}");
}

#[test]
fn a_rollback_of_a_udp_group_keeps_every_flow_on_its_worker() {
    let (mut ck, addr) = udp_fleet("rollback-udp", 2, &["--keep-previous", "10m"]);
    let old = ck.status().expect("status").worker_pids();
    let held = Flows::open(addr, 16);
    let first = held.round();
    assert_eq!(answered_by(&first), old, "{first:?}");
    // The old workers' flows stay on them through the roll, and while they are kept.
    reload_while_sending(&ck, &held, &first);
    ck.wait_status("the old release kept", READY_TIMEOUT, |s| {
        pids_in(s, "kept") == old && pids_in(s, "ready").len() == 2
    })
    .expect("the kept release");
    assert_eq!(held.round(), first, "a flow of the kept release moved");
    let fresh = Flows::open(addr, 16);
    let fresh_first = fresh.round();
    let new = answered_by(&fresh_first);
    assert!(
        new.is_disjoint(&old),
        "new flows reach the new release: {fresh_first:?}"
    );

    ck.ctl_ok(&["rollback"]).expect("ck rollback");
    // The new release's flows stay on its workers while they send; the kept ones' too.
    assert_eq!(
        fresh.round(),
        fresh_first,
        "a flow of the leaving release moved"
    );
    assert_eq!(held.round(), first, "a flow of the kept release moved");
    // New flows go to the release that serves again.
    let later = Flows::open(addr, 16).round();
    assert!(answered_by(&later).is_subset(&old), "{later:?}");
}

#[test]
fn a_rollback_mid_roll_puts_back_what_the_roll_took_out_and_ends_it() {
    // --slow-start makes the roll wait for each replacement's ramp: time to catch it mid-way.
    let args = ["-w", "2", "--keep-previous", "10m", "--slow-start", "2s"];
    let (mut ck, port) = start("rollback-mid", &args).expect("start ck");
    let old = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("2 ready workers")
        .worker_pids();
    std::thread::sleep(Duration::from_millis(2500));
    let name = ck.name().to_string();
    let reload = std::thread::spawn(move || ck_tests::ck::ck_output(&["reload", "--name", &name]));
    ck.wait_status(
        "one old worker kept, the roll going on",
        READY_TIMEOUT,
        |s| s.reloading && pids_in(s, "kept").len() == 1,
    )
    .expect("mid-roll");
    let answer = ck.ctl_ok(&["rollback"]).expect("ck rollback mid-roll");
    assert!(answer.contains("rolled back"), "{answer}");
    let out = reload.join().expect("the reload thread");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rolled back by `ck rollback`"), "{err}");
    let back = ck.status().expect("status");
    assert!(!back.reloading, "{back:#?}");
    assert_eq!(pids_in(&back, "ready"), old, "{back:#?}");
    let tally = burst(local(port), 40);
    assert!(tally.only_from(&old), "{tally:?}");
    ck.wait_status("only the old release left", READY_TIMEOUT, |s| {
        s.worker_pids() == old
    })
    .expect("the new workers leave");
}
