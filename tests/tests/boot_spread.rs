//! Balanced from the first connection: keep-alive clients that connect as the fleet boots,
//! once its first worker is ready and while the others still start (a balancer's pool, an
//! agent reconnecting after a restart), spread over every worker, where before they all landed
//! on the first ready one for good. The window ends 2 s after the first worker turned ready:
//! after it, a worker still starting gets nothing until it is ready. The same holds after the
//! fleet lost every worker at once.
//!
//! Slot 1 is a demo worker that serves at once but says READY=1 only after 8 s (a server that
//! warms up after it listens); slot 0 is ready at once. Policy round-robin, connections from
//! one CPU: the kernel alternates exactly between the slots it may choose.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ck_tests::app::demo_app_on_slot;
use ck_tests::http::{hold, local};
use ck_tests::sys::{TempDir, kill_hard};
use ck_tests::{Ck, READY_TIMEOUT, Status, start};

/// The boot window after the first worker is ready (`fleet::spread::SPREAD_FOR`).
const WINDOW: Duration = Duration::from_secs(2);

/// Waits until slot 0 is ready with slot 1 still starting; the status and when it was seen.
fn first_ready(ck: &mut Ck) -> (Status, Instant) {
    let status = ck
        .wait_status("slot 0 ready, slot 1 starting", READY_TIMEOUT, |s| {
            s.bpf && s.slot(0).state == "ready" && s.slot(1).state == "starting"
        })
        .unwrap();
    (status, Instant::now())
}

/// Opens 20 keep-alive connections while the window is open and asserts that both slots
/// answered half of them (slot 1 while it still starts), and that `ck status` says so.
fn spread_while_booting(ck: &mut Ck, port: u16) -> Vec<ck_tests::http::KeepAlive> {
    let (status, seen) = first_ready(ck);
    assert_eq!(status.active, [0], "{status:#?}");
    assert_eq!(status.booting, [1], "{status:#?}");
    let (conns, per_slot) = hold(local(port), 20);
    assert!(
        seen.elapsed() < WINDOW,
        "the connections took longer than the window to open: the check says nothing"
    );
    assert_eq!(per_slot, BTreeMap::from([(0, 10), (1, 10)]), "{status:#?}");
    conns
}

#[test]
fn keep_alive_clients_of_a_booting_fleet_spread_over_its_starting_workers() {
    let dir = TempDir::new("boot-spread");
    let app = demo_app_on_slot(&dir, 1, "--ready-after 8s");
    let (mut ck, port) = start(
        "boot-spread",
        &["-w", "2", "--policy", "round-robin", "--", &app],
    )
    .unwrap();
    let held = spread_while_booting(&mut ck, port);

    // After the window, slot 1 (still starting) is chosen no more.
    let status = ck
        .wait_status("the window closed", WINDOW * 3, |s| s.booting.is_empty())
        .unwrap();
    assert_eq!(status.slot(1).state, "starting", "{status:#?}");
    let (later, per_slot) = hold(local(port), 10);
    assert_eq!(per_slot, BTreeMap::from([(0, 10)]), "{status:#?}");

    // Every worker lost at once: the fleet boots again, and spreads again.
    let status = ck.wait_ready(2, READY_TIMEOUT).unwrap();
    drop((held, later));
    let pids: Vec<u32> = status.worker_pids().into_iter().collect();
    for pid in &pids {
        kill_hard(*pid);
    }
    ck.wait_status("both workers replaced", READY_TIMEOUT, |s| {
        s.slots
            .iter()
            .all(|slot| slot.pid.is_some_and(|p| !pids.contains(&p)))
    })
    .unwrap();
    let _held = spread_while_booting(&mut ck, port);
}

/// `--adopt`: a worker is ready once ck adopts the socket it listens on (its listen says it
/// serves), so an adopted fleet that boots spreads its first clients as soon as each worker
/// listens, with no window to wait for: slot 1, which says READY=1 only after 8 s, is chosen
/// from its listen on.
#[test]
fn adopted_workers_of_a_booting_fleet_are_chosen_from_their_listen() {
    let dir = TempDir::new("boot-spread-adopt");
    let app = demo_app_on_slot(&dir, 1, "--ready-after 8s");
    let started = Instant::now();
    let (mut ck, port) = start(
        "boot-spread-adopt",
        &["-w", "2", "--adopt", "--policy", "round-robin", "--", &app],
    )
    .unwrap();
    let status = ck.wait_ready(2, READY_TIMEOUT).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "slot 1 was ready only after its READY=1: {status:#?}"
    );
    assert!(status.booting.is_empty(), "{status:#?}");
    let (_conns, per_slot) = hold(local(port), 20);
    assert_eq!(per_slot, BTreeMap::from([(0, 10), (1, 10)]), "{status:#?}");
}
