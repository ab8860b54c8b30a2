//! `ck drain --all` / `ck undrain --all`: the whole host out of rotation for a balancer. With
//! every slot drained, `/readyz` answers 503 (reason: drained) and `ck status` shows the host
//! drained from the maps (no ready slot in the active set), yet every socket stays open and the
//! connections that still arrive (a balancer that has not noticed yet) are all served, by the
//! same workers; a scale-up meanwhile starts drained; `ck undrain --all` puts every slot back
//! and `/readyz` answers 200 again.

use ck_tests::http::get_path;
use ck_tests::{burst, local, start_ready};

#[test]
fn drain_all_takes_the_host_out_of_rotation_and_keeps_serving() {
    let (mut ck, port, status) =
        start_ready("drain-all", 2, &["--metrics", "127.0.0.1:0"]).expect("start a ready ck");
    let metrics = status.metrics_addr();
    let pids = status.worker_pids();
    assert_eq!(get_path(metrics, "/readyz").expect("/readyz").0, 200);
    assert!(!status.host_drained, "{status:#?}");

    let answer = ck.ctl_ok(&["drain", "--all"]).expect("ck drain");
    assert!(answer.contains("every slot drained"), "{answer}");
    let drained = ck.status().expect("ck status");
    assert!(drained.host_drained, "{drained:#?}");
    assert!(drained.active.is_empty(), "{drained:#?}");
    assert!(
        drained
            .slots
            .iter()
            .all(|s| s.drained && s.state == "draining"),
        "{drained:#?}"
    );
    let (code, body) = get_path(metrics, "/readyz").expect("/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("drained"), "{body}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("host drained"), "{text}");

    // Nothing is refused: every connection is answered, by the same two workers.
    let tally = burst(local(port), 60);
    assert_eq!(tally.ok, 60, "{tally:?}");
    assert!(tally.only_from(&pids), "{tally:?} not from {pids:?}");
    assert_eq!(
        ck.status().expect("ck status").worker_pids(),
        pids,
        "no worker was replaced"
    );

    // Again: nothing changes, and says so.
    let again = ck.ctl_ok(&["drain", "--all"]).expect("ck drain");
    assert!(again.contains("0 changed"), "{again}");

    // A scale-up while drained keeps the host out of rotation: the new slot starts drained.
    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    let scaled = ck
        .wait_status("a third drained worker", ck_tests::READY_TIMEOUT, |s| {
            s.slots.len() == 3 && s.slots.iter().all(|s| s.state == "draining")
        })
        .expect("wait for the status");
    assert!(scaled.host_drained, "{scaled:#?}");
    assert!(scaled.active.is_empty(), "{scaled:#?}");
    let pids = scaled.worker_pids();
    let tally = burst(local(port), 30);
    assert_eq!(tally.ok, 30, "{tally:?}");
    assert!(tally.only_from(&pids), "{tally:?} not from {pids:?}");

    ck.ctl_ok(&["undrain", "--all"]).expect("ck undrain");
    let back = ck
        .wait_ready(3, ck_tests::READY_TIMEOUT)
        .expect("wait for ready slots");
    assert!(!back.host_drained, "{back:#?}");
    assert_eq!(back.active.len(), 3, "{back:#?}");
    let (code, body) = get_path(metrics, "/readyz").expect("/readyz");
    assert_eq!(code, 200, "{body}");
    assert_eq!(burst(local(port), 20).ok, 20);
    ck.ctl_ok(&["stop", "--now"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn drain_takes_a_slot_or_all_but_not_both() {
    let (ck, _, _) = start_ready("drain-all-args", 1, &[]).expect("start a ready ck");
    for args in [
        &["drain", "0", "--all"][..],
        &["drain"][..],
        &["undrain"][..],
    ] {
        let out = ck.ctl(args).expect("ck control command");
        assert!(
            !out.status.success(),
            "`ck {}` was accepted",
            args.join(" ")
        );
        let said = ck_tests::ck::said(&out);
        assert!(said.contains("--all") || said.contains("<SLOT>"), "{said}");
    }
}

#[test]
fn drain_all_without_bpf_is_refused_with_the_reason() {
    let (ck, _, _) = start_ready("drain-all-nobpf", 1, &["--no-bpf"]).expect("start a ready ck");
    let out = ck.ctl(&["drain", "--all"]).expect("ck drain");
    assert!(!out.status.success());
    let said = ck_tests::ck::said(&out);
    assert!(said.contains("--no-bpf"), "{said}");
}
