//! `--udp-mode quic`'s routes, one by one, with hand-made QUIC headers sent to demo workers (which
//! answer any datagram with their slot and pid): a short header whose connection ID carries a
//! slot's cookie reaches that slot's worker from any client port; a cookie of an older
//! generation of the slot is stale; the datagrams of one handshake (Initials with one original
//! connection ID, from several ports) reach one worker, also across a roll's flip; truncated
//! headers are dropped and counted; a flood of Initials with random connection IDs keeps the
//! pending table bounded while the fleet keeps answering. Every datagram counts under one route.

use std::{
    collections::BTreeSet,
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use ck_tests::{
    Ck,
    udp::{pid_of, udp_fleet},
};

/// The size of the `pending` table (`ck_common::udp::MAX_PENDING`, as `ck maps` shows it).
const PENDING_MAX: u64 = 16_384;

/// Starts a UDP-only quic-mode fleet of `workers` demo workers and waits until ready.
fn fleet(what: &str, workers: usize) -> (Ck, SocketAddr) {
    udp_fleet(what, workers, &["--udp-mode", "quic"])
}

/// Sends `packet` from a new client port and returns who answered.
fn send(addr: SocketAddr, packet: &[u8]) -> Option<u32> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a client socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    socket.send_to(packet, addr).expect("sending");
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).ok()?;
    pid_of(std::str::from_utf8(&buf[..n]).ok()?)
}

/// A short-header packet whose destination connection ID carries `slot`'s cookie of
/// generation `generation` (ck's layout: configuration 0, slot, generation, random).
fn short_header(slot: u32, generation: u32) -> Vec<u8> {
    let mut packet = vec![0x40, 0x07, slot as u8, generation as u8, 1, 2, 3, 4, 5];
    packet.resize(40, 0xaa);
    packet
}

/// A QUIC v1 Initial from a client with original destination connection ID `dcid`, padded to
/// 1200 bytes as clients pad them.
fn initial(dcid: &[u8]) -> Vec<u8> {
    let mut packet = vec![0xc0, 0, 0, 0, 1, dcid.len() as u8];
    packet.extend_from_slice(dcid);
    packet.extend_from_slice(&[8, 9, 9, 9, 9, 9, 9, 9, 9]);
    packet.resize(1200, 0);
    packet
}

#[test]
fn a_cookie_reaches_its_slot_from_any_port_and_an_old_generation_is_stale() {
    let (ck, addr) = fleet("quic-cookie", 3);
    let status = ck.status().expect("ck status");
    for slot in &status.slots {
        let pid = slot.pid.expect("a worker");
        for _ in 0..5 {
            assert_eq!(
                send(addr, &short_header(slot.slot, slot.generation)),
                Some(pid),
                "slot {}'s cookie",
                slot.slot
            );
        }
    }
    // A cookie of the slot's earlier worker goes by the consistent table, counted stale.
    let stale = status.slots[0].generation.wrapping_sub(1);
    assert!(send(addr, &short_header(status.slots[0].slot, stale)).is_some());
    // A truncated header is dropped and counted.
    assert_eq!(send(addr, &[0x40, 0x07]), None);
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert_eq!(udp.routes["cookie"], 15, "{udp:#?}");
    assert_eq!(udp.routes["stale"], 1, "{udp:#?}");
    assert_eq!(udp.routes["malformed"], 1, "{udp:#?}");
}

#[test]
fn the_datagrams_of_one_handshake_reach_one_worker_across_a_flip() {
    let (ck, addr) = fleet("quic-pending", 3);
    let old = ck.status().expect("ck status").worker_pids();
    let mut seen = BTreeSet::new();
    let dcids: Vec<Vec<u8>> = (0..16u8)
        .map(|i| vec![0xe0 | (i >> 4), i, 7, 7, 7, 7, 7, 7])
        .collect();
    let first: Vec<u32> = dcids
        .iter()
        .map(|dcid| send(addr, &initial(dcid)).expect("an answer"))
        .collect();
    seen.extend(first.iter().copied());
    assert!(
        seen.len() > 1,
        "handshakes spread over the workers: {first:?}"
    );
    // Further datagrams of each handshake (other client ports too: a ClientHello in several
    // datagrams, a NAT rebinding) go where its first went.
    for (dcid, pid) in dcids.iter().zip(&first) {
        assert_eq!(send(addr, &initial(dcid)), Some(*pid));
    }
    // After a roll's flip, while the old workers still run (the demo worker answers until its
    // socket is quiet), a handshake begun before it stays with its worker.
    let name = ck.name().to_string();
    let reload = std::thread::spawn(move || ck_tests::ck::ck_output(&["reload", "--name", &name]));
    // Keep the old workers busy until the roll has flipped.
    while !reload.is_finished() {
        for (dcid, pid) in dcids.iter().zip(&first) {
            assert_eq!(send(addr, &initial(dcid)), Some(*pid));
        }
    }
    assert!(reload.join().expect("reload").status.success());
    for (dcid, pid) in dcids.iter().zip(&first) {
        assert_eq!(send(addr, &initial(dcid)), Some(*pid), "after the flip");
    }
    // A new handshake goes to the new generation.
    let fresh = send(addr, &initial(&[0xe5, 1, 2, 3, 4, 5, 6, 7])).expect("an answer");
    assert!(
        !old.contains(&fresh),
        "a new handshake reached an old worker"
    );
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert!(udp.routes["pending"] >= 16, "{udp:#?}");
}

#[test]
fn a_flood_of_initials_keeps_the_pending_table_bounded_and_the_fleet_serving() {
    let (ck, addr) = fleet("quic-flood", 2);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
    // 20000 handshakes with random connection IDs, more than the table holds.
    let mut dcid = [0u8; 8];
    for i in 0..20_000u32 {
        dcid[..4].copy_from_slice(&i.to_be_bytes());
        dcid[4..].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        // Sent without waiting for the answers (the workers' replies are dropped unread).
        let _ = socket.send_to(&initial(&dcid), addr);
    }
    std::thread::sleep(Duration::from_millis(300));
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert!(udp.pending <= PENDING_MAX, "{udp:#?}");
    assert!(udp.pending > 1000, "{udp:#?}");
    // The fleet still answers new handshakes and known cookies.
    let status = ck.status().expect("ck status");
    let slot = &status.slots[0];
    assert_eq!(
        send(addr, &short_header(slot.slot, slot.generation)),
        slot.pid
    );
    assert!(send(addr, &initial(&[0xe9; 8])).is_some());
}
