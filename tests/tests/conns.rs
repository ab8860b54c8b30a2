//! Open connections per slot, counted by the kernel (`ck_conns`): exact numbers in `ck status`
//! and `/metrics` for held connections, back to 0 once they close; a frozen worker's queued
//! connections migrate with their count when it dies; the counts go on across `ck upgrade`;
//! `CK_CONN_COUNT=scan` forces the sock_diag fallback, which says so and counts the same.

use std::collections::BTreeMap;
use std::time::Duration;

use ck_tests::http::{KeepAlive, hold};
use ck_tests::sys::{free_port, kill_hard, on_one_cpu, signal};
use ck_tests::{Ck, READY_TIMEOUT, Status, instance_name, local, probe_base_for, start_ready};
use nix::sys::signal::Signal;

/// How long counts get to settle after clients close (the kernel closes the server ends when
/// the workers see the clients' FIN).
const SETTLE: Duration = Duration::from_secs(10);

/// Waits until every slot's count is 0.
fn wait_zero(ck: &mut Ck) -> Status {
    ck.wait_connections_closed(SETTLE)
        .expect("wait for the status")
}

/// `ck maps --json`.
fn maps_json(ck: &Ck) -> serde_json::Value {
    let out = ck.ctl_ok(&["maps", "--json"]).expect("ck maps");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ck maps --json: {e}\n{out}"))
}

/// `ck_worker_connections` per slot from `/metrics`.
fn metrics_connections(status: &Status) -> BTreeMap<u32, u64> {
    let addr = status
        .metrics
        .as_deref()
        .expect("--metrics address in ck status");
    let text = ck_tests::http::metrics_text(addr);
    text.lines()
        .filter_map(|l| l.strip_prefix("ck_worker_connections{slot=\""))
        .filter_map(|rest| {
            let (slot, value) = rest.split_once("\"} ")?;
            Some((slot.parse().ok()?, value.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn held_connections_count_exactly_per_slot_and_none_after_closing() {
    let (mut ck, port, _) = start_ready(
        "conns",
        2,
        &["--policy", "round-robin", "--metrics", "127.0.0.1:0"],
    )
    .expect("start a ready ck");
    let (conns, answered) = hold(local(port), 10);
    assert_eq!(
        answered,
        BTreeMap::from([(0, 5), (1, 5)]),
        "round-robin from one CPU"
    );
    let status = ck.status().expect("ck status");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    assert_eq!(status.connections(), answered, "{status:#?}");
    assert_eq!(metrics_connections(&status), answered);

    let maps = maps_json(&ck);
    let open: BTreeMap<u32, u64> = maps["groups"][0]["conns"]
        .as_array()
        .expect("conns in ck maps")
        .iter()
        .map(|e| {
            (
                e["slot"].as_u64().unwrap() as u32,
                e["open"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(open, answered, "{maps:#}");
    assert_eq!(
        maps["groups"][0]["listeners"].as_array().map(Vec::len),
        Some(2),
        "{maps:#}"
    );

    drop(conns);
    let status = wait_zero(&mut ck);
    assert_eq!(
        metrics_connections(&status),
        BTreeMap::from([(0, 0), (1, 0)])
    );
    // One more round: the counters start again from exactly 0 (no drift).
    let (conns, answered) = hold(local(port), 6);
    assert_eq!(ck.status().expect("ck status").connections(), answered);
    drop(conns);
    wait_zero(&mut ck);
}

#[test]
fn queued_connections_migrate_with_their_count() {
    let (mut ck, port, status) =
        start_ready("conns-mig", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    assert!(status.migration, "migration is off: {status:#?}");
    let victim = status.worker_pid(1);
    // Slot 1's worker frozen: its half of the connections waits in its accept queue, counted
    // there (established, not accepted).
    signal(victim, Signal::SIGSTOP);
    let addr = local(port);
    let mut conns = on_one_cpu(move || {
        (0..20)
            .map(|i| KeepAlive::connect(addr).unwrap_or_else(|e| panic!("conn {i}: {e}")))
            .collect::<Vec<_>>()
    });
    let before = ck
        .wait_status("10 connections on each slot", SETTLE, |s| {
            s.connections() == BTreeMap::from([(0, 10), (1, 10)])
        })
        .expect("wait for the status");
    eprintln!("before: {:?}", before.connections());

    kill_hard(victim);
    let after = ck
        .wait_status("slot 1 restarted and ready", READY_TIMEOUT, |s| {
            s.slot(1).state == "ready" && s.slot(1).generation == 2
        })
        .expect("wait for the status");
    assert_eq!(after.migrated(), 10, "{after:#?}");
    // The 10 queued connections now wait on (and count for) slot 0.
    assert_eq!(
        after.connections(),
        BTreeMap::from([(0, 20), (1, 0)]),
        "{after:#?}"
    );
    for (i, conn) in conns.iter_mut().enumerate() {
        let answer = conn
            .get()
            .unwrap_or_else(|e| panic!("request on conn {i}: {e}"));
        assert_eq!(answer.slot, 0, "conn {i}");
    }
    assert_eq!(
        ck.status().expect("ck status").connections(),
        BTreeMap::from([(0, 20), (1, 0)])
    );
    drop(conns);
    wait_zero(&mut ck);
    // Every re-homed connection's record left with it.
    let maps = maps_json(&ck);
    assert_eq!(maps["groups"][0]["moved"], 0, "{maps:#}");
    // Closing sockets now look for such records: counts stay exact.
    let (conns, answered) = hold(local(port), 6);
    assert_eq!(ck.status().expect("ck status").connections(), answered);
    drop(conns);
    wait_zero(&mut ck);
}

#[test]
fn counts_go_on_across_an_upgrade() {
    let (mut ck, port, _) =
        start_ready("conns-up", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    let (mut conns, answered) = hold(local(port), 8);
    assert_eq!(ck.status().expect("ck status").connections(), answered);

    let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(said.contains("upgraded:"), "{said}");
    let status = ck
        .wait_status("upgraded, counting in the kernel", READY_TIMEOUT, |s| {
            s.upgrades == 1 && s.bpf && s.connection_count == "kernel"
        })
        .expect("wait for the status");
    assert_eq!(status.connections(), answered, "{status:#?}");
    // The new image counts what opens and closes after it.
    let (more, answered_more) = hold(local(port), 4);
    let mut total = answered.clone();
    for (slot, n) in answered_more {
        *total.entry(slot).or_insert(0) += n;
    }
    assert_eq!(ck.status().expect("ck status").connections(), total);
    conns.truncate(4);
    drop(more);
    let status = ck
        .wait_status("4 left", SETTLE, |s| {
            s.connections().values().sum::<u64>() == 4
        })
        .expect("wait for the status");
    eprintln!("{:?}", status.connections());
    drop(conns);
    wait_zero(&mut ck);
}

#[test]
fn forced_fallback_counts_with_the_scan_and_says_so() {
    let port = free_port();
    let name = instance_name("conns-scan", port);
    let (port_text, base_text) = (port.to_string(), probe_base_for(port).to_string());
    let args = [
        "--port",
        port_text.as_str(),
        "--probe-port-base",
        base_text.as_str(),
        "-w",
        "2",
        "--policy",
        "round-robin",
        "--metrics",
        "127.0.0.1:0",
    ];
    let mut ck = Ck::start_with_env(&name, &args, &[("CK_CONN_COUNT", "scan")]).expect("start ck");
    ck.wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let (conns, answered) = hold(local(port), 6);
    let status = ck.status().expect("ck status");
    assert!(
        status
            .connection_count
            .starts_with("scan (CK_CONN_COUNT=scan"),
        "{status:#?}"
    );
    assert_eq!(status.connections(), answered, "{status:#?}");
    assert_eq!(metrics_connections(&status), answered);
    assert_eq!(
        ck.log()
            .matches("open connections are counted by a sock_diag scan")
            .count(),
        1,
        "{}",
        ck.log()
    );
    drop(conns);
    wait_zero(&mut ck);
}
