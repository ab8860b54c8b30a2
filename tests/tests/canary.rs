//! `ck reload --canary P`: ceil(N x P / 100) new workers go into the active set beside the whole
//! current release and get P % of new connections (counted by the program), by connection or
//! by client address (every client on one side for the whole window); at the window's end
//! they become the roll's first batch and the roll goes on. A canary whose worker crashes is
//! withdrawn: the current release never left the active set, `ck reload` exits non-zero
//! naming the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Output;
use std::thread::JoinHandle;
use std::time::Duration;

use ck_tests::app::script;
use ck_tests::churn::{Background, SETTLE};
use ck_tests::ck::{ck_bin, ck_output};
use ck_tests::http::get_new_conn_from;
use ck_tests::load::Mode;
use ck_tests::sys::TempDir;
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, start};

/// `ck reload ARGS...` of `ck`'s instance, on a thread (it answers when the roll ends).
fn reload(ck: &Ck, args: &[&str]) -> JoinHandle<Output> {
    let mut all = vec!["reload".to_string(), "--name".into(), ck.name().into()];
    all.extend(args.iter().map(|a| a.to_string()));
    std::thread::spawn(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        ck_output(&args)
    })
}

/// The status once the canary is judged: its slots.
fn judged(ck: &mut Ck) -> (Status, BTreeSet<u32>) {
    let status = ck
        .wait_status("the canary judged", READY_TIMEOUT, |s| {
            s.canary.as_deref().is_some_and(|c| c.starts_with("judged"))
        })
        .expect("the canary goes in");
    let slots = status
        .slots
        .iter()
        .filter(|s| s.canary)
        .map(|s| s.slot)
        .collect();
    (status, slots)
}

#[test]
fn a_canary_by_connection_gets_its_share_beside_the_current_release_then_is_promoted() {
    let (mut ck, port) = start("canary-conn", &["-w", "4"]).expect("start ck");
    let old = ck
        .wait_ready(4, READY_TIMEOUT)
        .expect("ready")
        .worker_pids();
    let reloading = reload(
        &ck,
        &[
            "--canary",
            "25%",
            "--canary-for",
            "4s",
            "--canary-by",
            "connection",
        ],
    );
    let (status, canary) = judged(&mut ck);
    assert_eq!(canary.len(), 1, "ceil(4 x 25 / 100): {status:#?}");
    // The whole current release still serves beside it.
    let ready: BTreeSet<u32> = status.ready().filter_map(|s| s.pid).collect();
    assert!(old.is_subset(&ready), "{status:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("canary judged: 1 worker(s), 25 %"), "{text}");

    let tally = burst(local(port), 400);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let share: u32 = canary.iter().map(|s| tally.slot(*s)).sum();
    eprintln!("the canary took {share} of 400 connections");
    assert!(
        (80..=120).contains(&share),
        "canary took {share} of 400: {tally:?}"
    );

    let out = reloading.join().expect("the reload");
    assert!(out.status.success(), "{out:?}");
    let after = ck.status().expect("status");
    assert!(after.canary.is_none(), "{after:#?}");
    assert!(after.worker_pids().is_disjoint(&old) || after.ready_count() == 4);
    let serving: BTreeSet<u32> = after.ready().filter_map(|s| s.pid).collect();
    assert!(serving.is_disjoint(&old), "all replaced: {after:#?}");
}

#[test]
fn a_canary_by_client_keeps_each_client_on_one_side() {
    let (mut ck, port) = start("canary-client", &["-w", "4"]).expect("start ck");
    ck.wait_ready(4, READY_TIMEOUT).expect("ready");
    let reloading = reload(&ck, &["--canary", "25", "--canary-for", "30s"]);
    let (_, canary) = judged(&mut ck);
    let canary_pids: BTreeSet<u32> = ck
        .status()
        .expect("status")
        .slots
        .iter()
        .filter(|s| canary.contains(&s.slot))
        .filter_map(|s| s.pid)
        .collect();
    let addr = local(port);
    let client = |i: u32| IpAddr::V4(Ipv4Addr::new(127, 1 + (i / 250) as u8, (i % 250) as u8, 7));
    let mut side: BTreeMap<u32, bool> = BTreeMap::new();
    for i in 0..1000 {
        let answer = get_new_conn_from(client(i), addr).expect("an answer");
        side.insert(i, canary_pids.contains(&answer.pid));
    }
    let on_canary = side.values().filter(|c| **c).count();
    eprintln!("{on_canary} of 1000 clients on the canary");
    assert!(
        (200..=300).contains(&on_canary),
        "{on_canary} of 1000 clients on the canary (25 % wanted)"
    );
    // Each client stays on its side.
    for i in (0..1000).step_by(5) {
        let answer = get_new_conn_from(client(i), addr).expect("an answer");
        assert_eq!(
            canary_pids.contains(&answer.pid),
            side[&i],
            "client {} changed side",
            client(i)
        );
    }
    ck.ctl_ok(&["stop"]).expect("ck stop");
    let _ = reloading.join();
}

#[test]
fn a_canary_that_crashes_is_withdrawn_and_the_current_release_serves_throughout() {
    let dir = TempDir::new("canary-crash");
    let marker = dir.path().join("bad-release");
    // The new release: killed 2 s after it starts (while the marker exists).
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "if [ -e '{marker}' ]; then (sleep 2; kill -9 $$) & fi\nexec '{ck}' demo-worker",
            marker = marker.display(),
            ck = ck_bin().display()
        ),
    );
    let app = app.to_str().expect("utf-8").to_string();
    let (mut ck, port) = start("canary-crash", &["-w", "2", "--", &app]).expect("start ck");
    let before = ck.wait_ready(2, READY_TIMEOUT).expect("ready");
    let old = before.worker_pids();
    let old_slots: BTreeSet<u32> = before.slots.iter().map(|s| s.slot).collect();
    let load = Background::start_without_retry(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    std::fs::write(&marker, b"").expect("the marker");
    let reloading = reload(&ck, &["--canary", "50", "--canary-for", "30s"]);
    let (_, canary) = judged(&mut ck);
    let mut selected = 0;
    while !reloading.is_finished() {
        let s = ck.status().expect("status");
        // The current release never leaves the active set.
        assert!(
            old_slots.iter().all(|slot| s.active.contains(slot)),
            "{s:#?}"
        );
        let on_canary = s.slots.iter().filter(|x| canary.contains(&x.slot));
        selected = selected.max(on_canary.map(|x| x.selected).sum::<u64>());
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = reloading.join().expect("the reload");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("canary withdrawn"), "{err}");
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("canary-crash");
    eprintln!(
        "{} failed; {selected} selected for the canary",
        report.failed()
    );
    assert!(
        report.failed() <= selected,
        "{} failed, {selected} selected for the canary",
        report.failed()
    );
    let after = ck.status().expect("status");
    assert_eq!(after.worker_pids(), old, "{after:#?}");
    assert!(after.canary.is_none() && !after.reloading, "{after:#?}");
}
