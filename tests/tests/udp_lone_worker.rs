//! A UDP group of one worker (`-w 1`). Its death would close the last socket of the group (the
//! kernel would free the reuseport group, the program attached to it, and every datagram
//! queued): ck holds that socket instead, as for TCP, so datagrams sent while no worker runs
//! wait in it, and the replacement gets it and answers them. A roll runs two workers for a
//! while: the old one keeps its flows until it exits, new flows go to its successor. Real
//! client sockets against the demo worker, which answers each datagram with its slot and pid.

use ck_tests::{
    READY_TIMEOUT, sys,
    udp::{Flows, answered_by, reload_while_sending, udp_fleet},
};
use nix::sys::signal::Signal;

/// Client sockets of each kind (held across the death, and opened after it).
const FLOWS: usize = 16;

#[test]
fn a_lone_workers_socket_is_held_so_datagrams_sent_as_it_dies_reach_its_replacement() {
    let (mut ck, addr) = udp_fleet("udp-lone", 1, &[]);
    let victim = ck.status().expect("ck status").worker_pid(0);
    let held = Flows::open(addr, FLOWS);
    let first = held.round();
    assert_eq!(answered_by(&first), [victim].into(), "{first:?}");
    let before = ck.status().expect("ck status").udp[0].routes.clone();

    // Sent right after the kill, before any replacement runs: none is lost (`answered_by`
    // asserts an answer for each), and the replacement answers those the victim did not.
    sys::signal(victim, Signal::SIGKILL);
    let meanwhile = held.round();
    let answered = answered_by(&meanwhile);
    let replaced = ck
        .wait_status("slot 0 replaced", READY_TIMEOUT, |s| {
            s.ready_count() == 1 && !s.worker_pids().contains(&victim)
        })
        .expect("wait for the status");
    let heir = replaced.worker_pid(0);
    assert!(answered.is_subset(&[victim, heir].into()), "{meanwhile:?}");
    assert!(answered.contains(&heir), "{meanwhile:?}");

    // The slot kept its socket, so the flows kept it too; new flows go there as well.
    let after = held.round();
    assert_eq!(answered_by(&after), [heir].into(), "{after:?}");
    let fresh = Flows::open(addr, FLOWS).round();
    assert_eq!(answered_by(&fresh), [heir].into(), "{fresh:?}");

    // The program saw each of those datagrams once (the group never lost its program): the
    // held flows' two rounds as known flows, the fresh ones as new.
    let routes = ck.status().expect("ck status").udp[0].routes.clone();
    let grew = |route: &str| routes.get(route).unwrap_or(&0) - before.get(route).unwrap_or(&0);
    assert_eq!(grew("flow"), 2 * FLOWS as u64, "{before:?} -> {routes:?}");
    assert_eq!(grew("new"), FLOWS as u64, "{before:?} -> {routes:?}");
    for route in ["stale", "malformed", "cookie", "pending", "stateless"] {
        assert_eq!(grew(route), 0, "{route}: {before:?} -> {routes:?}");
    }
}

#[test]
fn a_lone_worker_rolled_keeps_its_flows_until_it_exits_and_new_flows_go_to_its_successor() {
    let (mut ck, addr) = udp_fleet("udp-lone-roll", 1, &["--drain-timeout", "3s"]);
    let old = ck.status().expect("ck status").worker_pid(0);
    let held = Flows::open(addr, FLOWS);
    let first = held.round();
    assert_eq!(answered_by(&first), [old].into(), "{first:?}");
    // The held flows keep sending through the roll (so the old worker never goes quiet), and
    // none of them moves meanwhile.
    reload_while_sending(&ck, &held, &first);
    assert_eq!(held.round(), first, "a held flow left the old worker");
    let fresh = Flows::open(addr, FLOWS).round();
    let new = answered_by(&fresh);
    assert_eq!(new.len(), 1, "{fresh:?}");
    assert!(
        !new.contains(&old),
        "a new flow reached the old worker: {fresh:?}"
    );
    // Once the old worker is gone (told to stop, the demo worker exits when its socket has had
    // no datagram for 300 ms; --drain-timeout bounds it), its flows go to the successor, the
    // group's only worker.
    ck.wait_status("the old worker gone", READY_TIMEOUT, |s| {
        !s.worker_pids().contains(&old) && s.slots.len() == 1
    })
    .expect("wait for the status");
    assert_eq!(
        answered_by(&held.round()),
        new,
        "the held flows after the old worker left"
    );
}
