//! DNS servers in a UDP group, `--udp-mode stateless`: the example server on ck's sockets
//! (`examples/python/dns.py`), and an unmodified dnsmasq that binds the port itself
//! (`--adopt`). Every query from many client sockets is answered, every worker gets its share,
//! and after a `ck reload` the new workers (adopted again) answer every query.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use ck_tests::{Ck, READY_TIMEOUT, udp::udp_fleet};

/// DNS types asked for.
const TYPE_A: u16 = 1;
const TYPE_TXT: u16 = 16;

/// dnsmasq answering `dns.test` from its own table: no upstream, no cache, no files, in the
/// foreground, as root, on 127.0.0.1:$PORT only (it also listens with TCP there).
const DNSMASQ: &str = "exec dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv \
                       --no-hosts --cache-size=0 --pid-file= --user=root --bind-interfaces \
                       --listen-address=127.0.0.1 --port=\"$PORT\" --address=/dns.test/127.0.0.1";

/// A query for `dns.test` of `qtype` with id `id`.
fn query(id: u16, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend([0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend(b"\x03dns\x04test\x00");
    q.extend(qtype.to_be_bytes());
    q.extend(1u16.to_be_bytes());
    q
}

/// Asks `qtype` from each of `n` client sockets of their own, once; returns each answer's
/// record data (`None`: no answer within 2 s, or no answer record).
fn ask(server: SocketAddr, n: usize, qtype: u16) -> Vec<Option<Vec<u8>>> {
    (0..n)
        .map(|i| {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let id = i as u16;
            socket.send_to(&query(id, qtype), server).unwrap();
            let mut buf = [0u8; 512];
            let n = socket.recv(&mut buf).ok()?;
            record_data(&buf[..n], id)
        })
        .collect()
}

/// The data of the one answer record of `answer` to query `id`. After the header (12 bytes)
/// and the question (`dns.test`: 10 bytes of name, type and class), the record is a pointer to
/// the question's name (2), type, class, TTL (4), RDLENGTH, then the data.
fn record_data(answer: &[u8], id: u16) -> Option<Vec<u8>> {
    const RDLENGTH_AT: usize = 12 + 14 + 2 + 2 + 2 + 4;
    let answers = u16::from_be_bytes([*answer.get(6)?, *answer.get(7)?]);
    if answer.get(..2)? != id.to_be_bytes() || answers != 1 {
        return None;
    }
    let len = u16::from_be_bytes([*answer.get(RDLENGTH_AT)?, *answer.get(RDLENGTH_AT + 1)?]);
    let data = RDLENGTH_AT + 2;
    Some(answer.get(data..data + usize::from(len))?.to_vec())
}

/// Asks an A query from each of 32 client sockets: every one is answered with 127.0.0.1.
fn every_a_query_answered(server: SocketAddr) {
    let answers = ask(server, 32, TYPE_A);
    assert!(
        answers
            .iter()
            .all(|r| r.as_deref() == Some(&[127, 0, 0, 1][..])),
        "{answers:?}"
    );
}

/// The per-slot datagram counts of the instance's UDP group.
fn datagrams_by_slot(ck: &Ck) -> Vec<(u32, u64)> {
    let status = ck.status().expect("ck status");
    let group = status.udp.first().expect("a UDP group in the status");
    group.slots.iter().map(|s| (s.slot, s.datagrams)).collect()
}

/// Starts `args` on a free UDP port with 2 workers in stateless mode.
fn fleet(what: &str, args: &[&str]) -> (Ck, SocketAddr) {
    let mut all = vec!["--udp-mode", "stateless"];
    all.extend_from_slice(args);
    udp_fleet(what, 2, &all)
}

#[test]
fn the_example_dns_server_answers_every_query_from_every_worker() {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python/dns.py");
    let script = script.to_str().unwrap();
    let (mut ck, addr) = fleet("udp-dns-example", &["--", "python3", script]);
    every_a_query_answered(addr);
    // TXT answers name the worker: both answer, and only the fleet's workers.
    let txt = ask(addr, 32, TYPE_TXT);
    let pids: std::collections::BTreeSet<u32> = txt
        .iter()
        .map(|r| {
            let text = String::from_utf8_lossy(&r.as_ref().expect("an answer")[1..]).into_owned();
            ck_tests::udp::pid_of(&text).expect("slot=S pid=P")
        })
        .collect();
    assert_eq!(
        pids,
        ck.status().expect("ck status").worker_pids(),
        "{txt:?}"
    );
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn an_unmodified_dnsmasq_is_adopted_answers_and_is_rolled() {
    let (mut ck, addr) = fleet("udp-dns-dnsmasq", &["--adopt", "--", "sh", "-c", DNSMASQ]);
    let status = ck.status().expect("ck status");
    assert!(status.adopt && status.bpf, "{status:#?}");
    every_a_query_answered(addr);
    let counts = datagrams_by_slot(&ck);
    assert!(
        counts.len() == 2 && counts.iter().all(|(_, n)| *n > 0),
        "each worker gets queries: {counts:?}"
    );
    // dnsmasq also listens with TCP on the port: ck says it does not steer that socket, and how.
    let log = ck.log();
    assert!(
        log.contains("where the instance has no tcp group")
            && log.contains("add --listen tcp://HOST:"),
        "{log}"
    );

    let before = status.worker_pids();
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let rolled = ck
        .wait_status("two new workers ready", READY_TIMEOUT, |s| {
            s.ready_count() == 2 && s.worker_pids().is_disjoint(&before)
        })
        .expect("wait for the status");
    every_a_query_answered(addr);
    let slots: Vec<u32> = rolled.slots.iter().map(|s| s.slot).collect();
    let counts = datagrams_by_slot(&ck);
    for slot in slots {
        assert!(
            counts.iter().any(|(s, n)| *s == slot && *n > 0),
            "new slot {slot} gets queries: {counts:?}"
        );
    }
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}
