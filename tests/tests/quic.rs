//! HTTP/3 under ck: the quinn + h3 example server (`examples/quic`) in a UDP group with
//! `--udp-mode quic`, loaded by its own client (`ck-example-quic client`), which holds
//! connections open (a request every 100 ms, each connection replaced every 2 s) and counts
//! what breaks: a request that fails, a handshake that fails, a connection that ends with an
//! error the client did not ask for. A connection the server moves on with GOAWAY during a roll
//! is not broken (the client opens a new one, as HTTP/3 clients do).
//!
//! - Rolls, a scale-up and a scale-down while the clients also move to a new local port every
//!   400 ms (client migration): nothing breaks, since every packet goes to the worker whose
//!   cookie its connection ID carries; connections opened afterwards reach the latest workers
//!   only.
//! - Plain SO_REUSEPORT under the same rolls breaks connections (the baseline).
//! - A ClientHello that spans several datagrams reaches one worker with all of them, across
//!   rolls.
//! - A SIGKILLed worker breaks only its own connections.

use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use ck_tests::canary::{judged, reload};
use ck_tests::quic_client::{finish, load, quic_bin, start_client};
use ck_tests::{Ck, READY_TIMEOUT, sys, udp::udp_fleet};
use nix::sys::signal::Signal;

/// 16 fresh connections to `addr`, a request every 50 ms for 500 ms, and what they saw.
fn fresh_connections(addr: SocketAddr) -> ck_tests::quic_client::Seen {
    finish(start_client(
        addr,
        &[
            "--connections",
            "16",
            "--interval-ms",
            "50",
            "--duration-ms",
            "500",
        ],
    ))
}

/// Starts a UDP-only fleet of `workers` example servers on a free port and waits until ready.
fn fleet(what: &str, workers: usize, extra: &[&str]) -> (Ck, SocketAddr) {
    let bin = quic_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let mut args = extra.to_vec();
    args.extend_from_slice(&["--", bin, "serve"]);
    udp_fleet(what, workers, &args)
}

/// Two rolls, a scale to 6 and back to 4, one after the other.
fn churn(ck: &mut Ck) {
    std::thread::sleep(Duration::from_millis(500));
    ck.ctl_ok(&["reload"]).expect("ck reload");
    ck.ctl_ok(&["reload"]).expect("ck reload");
    ck.ctl_ok(&["scale", "6"]).expect("ck scale");
    ck.wait_ready(6, READY_TIMEOUT)
        .expect("wait for ready slots");
    ck.ctl_ok(&["scale", "4"]).expect("ck scale");
}

#[test]
fn http3_connections_survive_rolls_scaling_and_client_migration() {
    let (mut ck, addr) = fleet("quic-churn", 4, &["--udp-mode", "quic"]);
    let client = load(addr, 7000, &["--rebind-ms", "400"]);
    churn(&mut ck);
    let seen = finish(client);
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{}", ck.log());
    assert!(seen.ok > 1000 && seen.handshakes >= 32, "{seen:#?}");
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert!(
        udp.routes["cookie"] > 0 && udp.routes["new"] > 0,
        "{udp:#?}"
    );
    // Connections opened after the last flip are served by the latest workers only, though
    // earlier ones may still be finishing their own.
    let now = ck
        .wait_status("4 ready", READY_TIMEOUT, |s| s.ready_count() == 4)
        .expect("wait for the status");
    let serving: BTreeSet<u32> = now
        .active
        .iter()
        .filter_map(|slot| now.slot(*slot).pid)
        .collect();
    let fresh = fresh_connections(addr);
    assert_eq!(fresh.broken, 0, "{fresh:#?}");
    assert!(
        !fresh.pids.is_empty() && fresh.pids.is_subset(&serving),
        "new connections reached {:?}, the latest workers are {serving:?}",
        fresh.pids
    );
}

/// A ClientHello that spans several Initial datagrams (padded to 3,000 bytes by the client, as
/// post-quantum key shares or many extensions make it) reaches one worker with every datagram,
/// also across the rolls' flips: every handshake completes, and the datagrams after each
/// handshake's first are counted under `pending` (routed by the original connection ID; counted
/// over a load after the rolls, since a retired slot's counters go with it).
#[test]
fn handshakes_whose_client_hello_spans_several_datagrams_complete_across_rolls() {
    let (mut ck, addr) = fleet("quic-hello", 4, &["--udp-mode", "quic"]);
    let client = load(addr, 5000, &["--hello-bytes", "3000"]);
    std::thread::sleep(Duration::from_millis(500));
    ck.ctl_ok(&["reload"]).expect("ck reload");
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let seen = finish(client);
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{}", ck.log());
    assert!(seen.handshakes >= 64, "{seen:#?}");
    let pending = |ck: &Ck| ck.status().expect("ck status").udp[0].routes["pending"];
    ck.wait_status("the old workers gone", READY_TIMEOUT, |s| {
        s.slots.len() == 4
    })
    .expect("wait for the status");
    let before = pending(&ck);
    let after_rolls = finish(load(addr, 1000, &["--hello-bytes", "3000"]));
    assert_eq!(after_rolls.broken, 0, "{after_rolls:#?}");
    assert!(
        pending(&ck) - before >= after_rolls.handshakes && after_rolls.handshakes > 0,
        "each handshake's later Initial datagrams go by pending: {before} then {}\n{after_rolls:#?}",
        pending(&ck)
    );
}

#[test]
fn plain_reuseport_breaks_http3_connections_when_the_group_changes() {
    let (mut ck, addr) = fleet("quic-plain", 4, &["--no-bpf"]);
    let client = load(addr, 7000, &[]);
    churn(&mut ck);
    let seen = finish(client);
    assert!(
        seen.broken > 0,
        "plain SO_REUSEPORT broke nothing: {seen:#?}"
    );
}

#[test]
fn a_killed_worker_breaks_only_its_own_http3_connections() {
    let (mut ck, addr) = fleet("quic-kill", 4, &["--udp-mode", "quic"]);
    // Connections that live through the kill: every client on one connection.
    let client = start_client(
        addr,
        &[
            "--connections",
            "16",
            "--interval-ms",
            "100",
            "--lifetime-ms",
            "6000",
            "--duration-ms",
            "4000",
        ],
    );
    std::thread::sleep(Duration::from_millis(1000));
    let victim = ck.status().expect("ck status").worker_pid(1);
    sys::signal(victim, Signal::SIGKILL);
    ck.wait_status("slot 1 replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 4 && !s.worker_pids().contains(&victim)
    })
    .expect("wait for the status");
    let seen = finish(client);
    assert!(
        seen.broken_pids.iter().all(|pids| pids.contains(&victim)),
        "a client that never used the killed worker broke: {seen:#?}"
    );
    assert!(seen.ok > 300, "{seen:#?}");
    // New connections after the kill are all served.
    let after = fresh_connections(addr);
    assert_eq!(after.broken, 0, "{after:#?}");
}

/// A canary of a QUIC group (`ck reload --canary 50 --canary-by connection`): connections held
/// open keep their worker through the canary's flip in, its window, its promotion and the roll
/// (every packet goes to the worker its connection ID's cookie names), while new connections
/// during the window reach the canary too (the group's table for new flows is weighted).
#[test]
fn a_canary_of_a_quic_group_keeps_every_connection_on_its_worker() {
    let (mut ck, addr) = fleet("quic-canary", 2, &["--udp-mode", "quic"]);
    let client = load(addr, 7000, &["--rebind-ms", "400"]);
    std::thread::sleep(Duration::from_millis(500));
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
    let (judged, slots) = judged(&mut ck);
    let canary: BTreeSet<u32> = slots.iter().filter_map(|s| judged.slot(*s).pid).collect();
    assert_eq!(canary.len(), 1, "{judged:#?}");
    let fresh = fresh_connections(addr);
    assert_eq!(fresh.broken, 0, "{fresh:#?}");
    assert!(
        !fresh.pids.is_disjoint(&canary),
        "no new connection reached the canary {canary:?}: {fresh:#?}"
    );
    let out = reloading.join().expect("the reload");
    assert!(out.status.success(), "{out:?}");
    let seen = finish(client);
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{}", ck.log());
    assert!(seen.ok > 500, "{seen:#?}");
}
