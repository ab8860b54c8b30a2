//! `ck drain` / `ck undrain`: a drained slot gets no new connection while its worker keeps
//! serving the connections it has; undrained, it gets its share again.

use ck_tests::http::{burst_without, keep_alive_on};
use ck_tests::sys::pid_alive;
use ck_tests::{burst_pinned, local, start_ready};

/// Sequential new connections per burst.
const N: u32 = 400;

#[test]
fn drained_slot_gets_no_new_connections_and_keeps_serving() {
    let (ck, port, _) =
        start_ready("drain", 4, &["--policy", "round-robin"]).expect("start a ready ck");
    let addr = local(port);

    // A keep-alive connection on slot 2 (a slot in the middle of the active set): connect
    // until one lands there. That slot is the one we drain.
    let (mut kept, first) = keep_alive_on(addr, 2);
    let s = first.slot;
    eprintln!("keep-alive connection is on slot {s} (pid {})", first.pid);

    let said = ck.ctl_ok(&["drain", &s.to_string()]).expect("ck drain");
    eprintln!("ck drain {s}: {said}");
    let status = ck.status().expect("ck status");
    let slot = status.slot(s);
    assert_eq!(slot.state, "draining", "{status:#?}");
    assert!(slot.drained, "{status:#?}");
    assert_eq!(slot.pid, Some(first.pid), "{status:#?}");
    assert!(!status.active.contains(&s), "{status:#?}");
    assert_eq!(status.active.len(), 3, "{status:#?}");

    let drained = burst_without(burst_pinned, addr, N, s, "drained");
    for other in (0..4).filter(|o| *o != s) {
        assert!(drained.slot(other) > 0, "slot {other}: {drained:?}");
    }

    // The drained worker is alive and still serves the connection it had.
    assert!(pid_alive(first.pid), "drained worker {} died", first.pid);
    kept.assert_stays_with(first, 5);

    let said = ck.ctl_ok(&["undrain", &s.to_string()]).expect("ck undrain");
    eprintln!("ck undrain {s}: {said}");
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(s).state, "ready", "{status:#?}");
    assert!(!status.slot(s).drained, "{status:#?}");
    assert_eq!(status.active.len(), 4, "{status:#?}");
    assert!(status.active.contains(&s), "{status:#?}");

    let back = burst_pinned(addr, N);
    eprintln!("after undrain: {back:?}");
    assert_eq!(back.ok, N, "every request answered: {back:?}");
    for slot in 0..4 {
        assert_eq!(back.slot(slot), N / 4, "slot {slot}: {back:?}");
    }
    assert_eq!(
        back.pid(first.pid),
        N / 4,
        "same worker back in service: {back:?}"
    );
}

#[test]
fn drain_refuses_unknown_slot_and_repeats_are_harmless() {
    let (ck, _port, _) = start_ready("drain-bad", 2, &[]).expect("start a ready ck");
    let out = ck.ctl(&["drain", "99"]).expect("ck drain");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ck drain 99 succeeded: {err}");
    assert!(
        err.contains("ck: error:") && err.contains("no slot 99"),
        "{err}"
    );

    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    let again = ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    assert!(again.contains("already"), "{again}");
    let status = ck.status().expect("ck status");
    assert_eq!(status.active, vec![0], "{status:#?}");
    ck.ctl_ok(&["undrain", "1"]).expect("ck undrain");
    assert_eq!(ck.status().expect("ck status").active, vec![0, 1]);
}
