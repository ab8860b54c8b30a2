//! `--policy sticky`: every connection of a client (its source address: distinct loopback
//! addresses 127.0.1.x stand for distinct clients) reaches the same worker while that worker is
//! ready; a drained worker's clients, and only those, move, and come back on undrain. The
//! placement is exactly the one the supervisor's Maglev table gives (`ck::bpf::maglev`, the
//! same code that fills the map), and `ck maps` shows the table's share per slot. Across
//! `ck upgrade` the new image computes the same table, and keeps it current.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ck::bpf::maglev::{Maglev, TABLE_SIZE};
use ck::settings::run_config::Policy;
use ck_tests::http::get_new_conn_from;
use ck_tests::sys::free_port;
use ck_tests::{Ck, READY_TIMEOUT, Tally, local, start_ready};
use serde_json::Value;

/// Clients (source addresses 127.0.1.1 ..= 127.0.1.200).
const CLIENTS: u8 = 200;
/// New connections per client in each phase.
const EACH: u32 = 10;
/// New connections of each of the first few clients, once.
const LONG: u32 = 200;

fn client(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 1, i + 1))
}

/// Sends `n` new connections from `source`, asserts that one worker answered them all and
/// returns its slot (counted in `tally`).
fn worker_of(source: IpAddr, addr: SocketAddr, n: u32, tally: &mut Tally) -> u32 {
    let mut slots = BTreeMap::<u32, u32>::new();
    for _ in 0..n {
        let answer = get_new_conn_from(source, addr);
        tally.add(&answer);
        let answer = answer.unwrap_or_else(|e| panic!("from {source}: {e}"));
        *slots.entry(answer.slot).or_default() += 1;
    }
    assert_eq!(
        slots.len(),
        1,
        "{source} reached several workers: {slots:?}"
    );
    slots.into_keys().next().unwrap()
}

/// The slot of every client, `EACH` connections each.
fn placement(addr: SocketAddr, tally: &mut Tally) -> BTreeMap<IpAddr, u32> {
    (0..CLIENTS)
        .map(|i| (client(i), worker_of(client(i), addr, EACH, tally)))
        .collect()
}

/// Asserts that every client is where the Maglev table of `ready` puts it.
fn assert_placed_by_table(placed: &BTreeMap<IpAddr, u32>, ready: &[u32]) {
    let table = Maglev::build(ready);
    for (source, slot) in placed {
        assert_eq!(
            Some(*slot),
            table.slot_of(*source),
            "{source}: the program and the table of {ready:?} disagree"
        );
    }
}

/// `ck maps --json`'s live `sticky` half of the only group: entries per slot.
fn live_shares(ck: &Ck) -> BTreeMap<u32, u32> {
    let out = ck.ctl_ok(&["maps", "--json"]).expect("ck maps");
    let maps: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let group = &maps["groups"][0];
    assert_eq!(group["config"]["policy"], "sticky", "{group:#}");
    assert_eq!(group["sticky"]["used"], true, "{group:#}");
    let text = ck.ctl_ok(&["maps"]).expect("ck maps");
    assert!(text.contains("sticky:   positions per slot"), "{text}");
    group["sticky"]["live"]
        .as_array()
        .expect("live half")
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().unwrap() as u32;
            (n("slot"), n("entries"))
        })
        .collect()
}

/// Asserts that the live table splits its positions evenly over exactly `ready`.
fn assert_table_over(ck: &Ck, ready: &[u32]) {
    let shares = live_shares(ck);
    assert_eq!(
        shares.keys().copied().collect::<Vec<_>>(),
        ready,
        "{shares:?}"
    );
    assert_eq!(shares.values().sum::<u32>(), TABLE_SIZE as u32);
    let share = TABLE_SIZE as u32 / ready.len() as u32;
    for (slot, entries) in &shares {
        assert!(
            (share..=share + 1).contains(entries),
            "slot {slot}: {entries}"
        );
    }
}

#[test]
fn sticky_keeps_each_clients_worker_and_moves_only_a_drained_workers_clients() {
    let (ck, port, status) =
        start_ready("sticky", 4, &["--policy", "sticky"]).expect("start a ready ck");
    assert_eq!(status.policy, Policy::Sticky);
    let addr = local(port);
    let all = [0, 1, 2, 3];
    assert_table_over(&ck, &all);
    let mut tally = Tally::default();

    // A client keeps its worker over many new connections.
    for i in 0..3 {
        worker_of(client(i), addr, LONG, &mut tally);
    }
    let before = placement(addr, &mut tally);
    assert_placed_by_table(&before, &all);
    for slot in all {
        assert!(
            before.values().any(|s| *s == slot),
            "no client on slot {slot}: {before:?}"
        );
    }
    // Exact counts: every connection was selected by the program, and counted on the slot
    // that answered it.
    let sent = 3 * LONG + u32::from(CLIENTS) * EACH;
    assert_eq!(tally.ok, sent, "{tally:?}");
    let status = ck.status().expect("ck status");
    for s in &status.slots {
        assert_eq!(s.selected, u64::from(tally.slot(s.slot)), "{status:#?}");
    }
    assert_eq!(status.dropped, 0);

    // One worker leaves the active set: its clients move, every other client stays.
    let drained = before[&client(0)];
    ck.ctl_ok(&["drain", &drained.to_string()])
        .expect("ck drain");
    let rest: Vec<u32> = all.into_iter().filter(|s| *s != drained).collect();
    assert_table_over(&ck, &rest);
    let during = placement(addr, &mut tally);
    assert_placed_by_table(&during, &rest);
    let on_drained = before.values().filter(|s| **s == drained).count();
    let moved: Vec<_> = before
        .iter()
        .filter(|(source, slot)| during[*source] != **slot)
        .collect();
    eprintln!(
        "slot {drained} drained: {} of {CLIENTS} clients moved ({on_drained} were on it)",
        moved.len()
    );
    assert!(moved.iter().all(|(_, slot)| **slot == drained), "{moved:?}");
    assert_eq!(moved.len(), on_drained, "{before:?}\n{during:?}");
    assert!(during.values().all(|s| *s != drained), "{during:?}");

    // Back in the set: the same table again, so every client is back on its worker.
    ck.ctl_ok(&["undrain", &drained.to_string()])
        .expect("ck undrain");
    assert_table_over(&ck, &all);
    let after = placement(addr, &mut tally);
    assert_eq!(after, before);
    assert_eq!(ck.status().expect("ck status").dropped, 0);
}

#[test]
fn sticky_clients_keep_their_worker_across_an_upgrade() {
    let (mut ck, port, _) =
        start_ready("sticky-up", 3, &["--policy", "sticky"]).expect("start a ready ck");
    let addr = local(port);
    let all = [0, 1, 2];
    let mut tally = Tally::default();
    let before = placement(addr, &mut tally);
    assert_placed_by_table(&before, &all);

    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let now = ck
        .wait_status("upgrade 1 done", READY_TIMEOUT, |s| {
            s.upgrades == 1 && s.bpf
        })
        .expect("wait for the status");
    assert_eq!(now.policy, Policy::Sticky);
    assert_eq!(placement(addr, &mut tally), before);

    // The new image keeps the table current: a drain moves only the drained worker's clients.
    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    assert_table_over(&ck, &[0, 2]);
    let during = placement(addr, &mut tally);
    assert_placed_by_table(&during, &[0, 2]);
    for (source, slot) in &before {
        if *slot != 1 {
            assert_eq!(during[source], *slot, "{source} moved");
        }
    }
    assert_eq!(tally.failed(), 0, "{tally:?}");
}

/// The program reads an IPv6 client's address too (an IPv6 group beside the IPv4 one): every
/// connection from ::1 reaches the worker the table gives ::1, and both groups' tables are
/// published.
#[test]
fn sticky_keys_ipv6_clients_by_their_address() {
    let v6_port = free_port();
    let listen = format!("tcp://[::]:{v6_port}");
    let (ck, port, status) =
        start_ready("sticky-v6", 4, &["--policy", "sticky", "--listen", &listen])
            .expect("start a ready ck");
    assert_eq!(status.groups.len(), 2, "{status:#?}");
    let table = Maglev::build(&[0, 1, 2, 3]);
    let mut tally = Tally::default();
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, v6_port));
    let source = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert_eq!(
        Some(worker_of(source, v6, 50, &mut tally)),
        table.slot_of(source)
    );
    let source = client(7);
    assert_eq!(
        Some(worker_of(source, local(port), 50, &mut tally)),
        table.slot_of(source)
    );

    let out = ck.ctl_ok(&["maps", "--json"]).expect("ck maps");
    let maps: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    for group in maps["groups"].as_array().expect("groups") {
        let live = group["sticky"]["live"].as_array().expect("live half");
        assert_eq!(live.len(), 4, "{group:#}");
    }
}
