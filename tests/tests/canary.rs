//! `ck reload --canary P`: ceil(N x P / 100) new workers go into the active set beside the whole
//! current release and get P % of new connections (counted by the program), by connection or
//! by client address (every client on one side for the whole window); at the window's end
//! they become the roll's first batch and the roll goes on. A canary whose worker crashes is
//! withdrawn: the current release never left the active set, `ck reload` exits non-zero
//! naming the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ck_tests::canary::{BadRelease, judged, reload, withdrawn};
use ck_tests::ck::ck_output;
use ck_tests::http::get_new_conn_from;
use ck_tests::http::metrics_text;
use ck_tests::{Ck, READY_TIMEOUT, burst, local, start};

#[test]
fn a_canary_by_connection_gets_its_share_beside_the_current_release_then_is_promoted() {
    // A queue-age limit is given to ck run too: its program is then loaded to read queue ages.
    let (mut ck, port) = start(
        "canary-conn",
        &[
            "-w",
            "4",
            "--metrics",
            "127.0.0.1:0",
            "--canary-max-queue-age",
            "2s",
        ],
    )
    .expect("start ck");
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
            // A good release crosses none of them, however strict.
            "--canary-max-resets",
            "0",
            "--canary-max-drops",
            "0",
            "--canary-max-queue-age",
            "1s",
        ],
    );
    let (status, canary) = judged(&mut ck);
    assert_eq!(canary.len(), 1, "ceil(4 x 25 / 100): {status:#?}");
    let line = status.canary.as_deref().unwrap_or_default();
    assert!(
        line.contains("withdrawn past resets <= 0, drops <= 0, queue age <= 1000 ms")
            && line.contains("so far resets 0, drops 0, longest queue wait"),
        "{line}"
    );
    // The whole current release still serves beside it.
    let ready: BTreeSet<u32> = status.ready().filter_map(|s| s.pid).collect();
    assert!(old.is_subset(&ready), "{status:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    // The share asked, and the share the program's maps give it: 25 of 100 entries.
    assert!(
        text.contains(
            "canary judged: 1 worker(s), 25 % of new connections by connection (25.0 % in the maps, the current release 75.0 %)"
        ),
        "{text}"
    );
    let metrics = metrics_text(status.metrics.as_deref().expect("--metrics"));
    assert!(metrics.contains("ck_canary_share 0.25\n"), "{metrics}");

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
    let metrics = metrics_text(after.metrics.as_deref().expect("--metrics"));
    assert!(
        metrics.contains("ck_canaries_total{verdict=\"promoted\"} 1\n"),
        "{metrics}"
    );
    // `ck upgrade` keeps ck's pid, and its counters go on from where they were.
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let upgraded = ck.status().expect("status after the upgrade");
    assert_eq!(upgraded.upgrades, 1, "{upgraded:#?}");
    let metrics = metrics_text(upgraded.metrics.as_deref().expect("--metrics"));
    for line in [
        "ck_canaries_total{verdict=\"promoted\"} 1\n",
        "ck_canaries_total{verdict=\"withdrawn\"} 0\n",
    ] {
        assert!(
            metrics.contains(line),
            "no {line:?} after the upgrade: {metrics}"
        );
    }
}

/// A canary of half a 16-worker fleet: its 8 workers boot together, it is judged with all 8,
/// gets half the new connections, and is promoted at the window's end. (Readiness events that
/// all wait in the queue at once, which flipped such a canary twice and lost its workers, are
/// the property test's `ReadyAll`: the timing here does not force them.)
#[test]
fn a_canary_of_many_workers_that_boot_together_is_judged_with_all_of_them() {
    let (mut ck, port) = start("canary-many", &["-w", "16"]).expect("start ck");
    let old = ck
        .wait_ready(16, READY_TIMEOUT)
        .expect("ready")
        .worker_pids();
    let reloading = reload(
        &ck,
        &[
            "--canary",
            "50%",
            "--canary-for",
            "3s",
            "--canary-by",
            "connection",
        ],
    );
    let (status, canary) = judged(&mut ck);
    assert_eq!(canary.len(), 8, "ceil(16 x 50 / 100): {status:#?}");
    // Still judged, with all 8, once every readiness event was handled.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = ck.status().expect("status");
    let line = status.canary.as_deref().unwrap_or_default();
    assert!(line.starts_with("judged: 8 worker(s)"), "{line}");
    let tally = burst(local(port), 800);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let share: u32 = canary.iter().map(|s| tally.slot(*s)).sum();
    assert!(
        (320..=480).contains(&share),
        "the canary took {share} of 800: {tally:?}"
    );
    let out = reloading.join().expect("the reload");
    assert!(out.status.success(), "{out:?}");
    let after = ck.wait_ready(16, READY_TIMEOUT).expect("ready after");
    let serving: BTreeSet<u32> = after.ready().filter_map(|s| s.pid).collect();
    assert!(serving.is_disjoint(&old), "all replaced: {after:#?}");
}

#[test]
fn a_canary_by_client_keeps_each_client_on_one_side() {
    let (mut ck, port) = start("canary-client", &["-w", "4"]).expect("start ck");
    ck.wait_ready(4, READY_TIMEOUT).expect("ready");
    let reloading = reload(&ck, &["--canary", "25", "--canary-for", "30s"]);
    let (status, canary) = judged(&mut ck);
    // The share the consistent table gives the canary, read back from the kernel's map.
    let line = status.canary.as_deref().unwrap_or_default();
    let in_maps: f64 = line
        .split_once("by client (")
        .and_then(|(_, rest)| rest.split_once(" % in the maps, "))
        .and_then(|(share, _)| share.parse().ok())
        .unwrap_or_else(|| panic!("no share in the maps in {line:?}"));
    assert!((24.0..=26.0).contains(&in_maps), "{line}");
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
    // The new release: killed 2 s after it starts.
    withdrawn(&BadRelease {
        what: "canary-crash",
        prelude: "(sleep 2; kill -9 $$) &",
        demo: "",
        workers: 2,
        run: &[],
        reload: &["--canary", "50", "--canary-for", "30s"],
        reason: "exited",
    });
}

#[test]
fn a_canary_of_a_one_worker_fleet_gets_its_share_then_replaces_it() {
    // One current worker, one canary worker at 50 %: the smallest fleet a canary can judge.
    let (mut ck, port) = start("canary-one", &["-w", "1"]).expect("start ck");
    let old = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("ready")
        .worker_pids();
    let reloading = reload(
        &ck,
        &[
            "--canary",
            "50",
            "--canary-for",
            "3s",
            "--canary-by",
            "connection",
        ],
    );
    let (status, canary) = judged(&mut ck);
    assert_eq!(canary.len(), 1, "ceil(1 x 50 / 100): {status:#?}");
    assert!(
        old.is_subset(&status.ready().filter_map(|s| s.pid).collect()),
        "the current worker serves beside it: {status:#?}"
    );
    let line = status.canary.as_deref().unwrap_or_default();
    assert!(
        line.contains("(50.0 % in the maps, the current release 50.0 %)"),
        "{line}"
    );
    let tally = burst(local(port), 400);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let share: u32 = canary.iter().map(|s| tally.slot(*s)).sum();
    eprintln!("the canary took {share} of 400 connections");
    assert!((160..=240).contains(&share), "{share} of 400: {tally:?}");
    let out = reloading.join().expect("the reload");
    assert!(out.status.success(), "{out:?}");
    let after = ck
        .wait_status("one new worker", READY_TIMEOUT, |s| {
            s.ready_count() == 1 && s.worker_pids().is_disjoint(&old) && s.worker_pids().len() == 1
        })
        .expect("the canary's worker replaces the old one");
    assert!(after.canary.is_none(), "{after:#?}");
    let tally = burst(local(port), 100);
    assert_eq!(tally.failed(), 0, "{tally:?}");
}

#[test]
fn a_canary_of_a_one_worker_fleet_that_crashes_is_withdrawn_and_the_worker_serves_throughout() {
    withdrawn(&BadRelease {
        what: "canary-one-crash",
        prelude: "(sleep 2; kill -9 $$) &",
        demo: "",
        workers: 1,
        run: &[],
        reload: &[
            "--canary",
            "50",
            "--canary-for",
            "30s",
            "--canary-by",
            "connection",
        ],
        reason: "exited",
    });
}

/// A canary of half the fleet by connection, judged long enough for any withdrawal.
const HALF: &[&str] = &[
    "--canary",
    "50",
    "--canary-for",
    "30s",
    "--canary-by",
    "connection",
];

#[test]
fn a_canary_that_resets_every_request_is_withdrawn_past_its_reset_limit() {
    // The new release answers every request to / with a reset; the kernel counts them.
    withdrawn(&BadRelease {
        what: "canary-resets",
        prelude: "",
        demo: "--reset-requests",
        workers: 2,
        run: &[],
        reload: &[HALF, &["--canary-max-resets", "5"]].concat(),
        reason: "more than --canary-max-resets 5",
    });
}

#[test]
fn a_canary_whose_queue_stalls_is_withdrawn_past_its_queue_age_limit() {
    // The new release stops accepting for 3 s from 3.5 s after it starts; its limits come
    // from `ck run`.
    withdrawn(&BadRelease {
        what: "canary-queue-age",
        prelude: "",
        demo: "--stall-ms 3000 --stall-every 3500ms",
        workers: 2,
        run: &["--canary-max-queue-age", "300ms"],
        reload: HALF,
        reason: "longer than --canary-max-queue-age 300ms",
    });
}

#[test]
fn a_canary_whose_full_queue_drops_connections_is_withdrawn_past_its_drop_limit() {
    // The new release lowers its backlog to 2 and stops accepting for 3 s from 3.5 s after it
    // starts: the kernel drops what its queue cannot hold.
    withdrawn(&BadRelease {
        what: "canary-drops",
        prelude: "",
        demo: "--listen-backlog 2 --stall-ms 3000 --stall-every 3500ms",
        workers: 2,
        run: &[],
        reload: &[HALF, &["--canary-max-drops", "0"]].concat(),
        reason: "more than --canary-max-drops 0",
    });
}

/// Starts a 2-worker fleet with `run` options, asks for a canary with a queue-age limit and
/// checks the reload is refused with nothing rolled; returns its error.
fn queue_age_limit_refused(what: &str, run: &[&str]) -> (Ck, String) {
    let (mut ck, _port) = start(what, &[&["-w", "2"], run].concat()).expect("start ck");
    let before = ck.wait_ready(2, READY_TIMEOUT).expect("ready");
    let out = ck_output(&[
        "reload",
        "--name",
        ck.name(),
        "--canary",
        "50",
        "--canary-max-queue-age",
        "1s",
    ]);
    assert!(!out.status.success(), "{out:?}");
    let after = ck.status().expect("status");
    assert_eq!(after.worker_pids(), before.worker_pids());
    assert!(!after.reloading, "{after:#?}");
    (ck, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn limits_the_kernel_cannot_count_here_refuse_the_reload() {
    let (ck, err) = queue_age_limit_refused("canary-refused", &["--no-bpf"]);
    assert!(
        err.contains("--no-bpf") && err.contains("drop those limits"),
        "{err}"
    );
    // Without --canary, a limit is a usage error.
    let out = ck_output(&["reload", "--name", ck.name(), "--canary-max-resets", "1"]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--canary"),
        "{out:?}"
    );
}

#[test]
fn a_queue_age_limit_ck_run_was_not_given_refuses_the_reload_and_names_the_fix() {
    // Without --canary-max-queue-age at ck run, the program is loaded without its reads of
    // kernel memory (a shorter start): a reload asking for the limit is refused, nothing rolls.
    let (_ck, err) = queue_age_limit_refused("canary-no-watch", &[]);
    assert!(
        err.contains("give --canary-max-queue-age to ck run"),
        "{err}"
    );
}
