//! Probe steering: a loopback connection whose source port is `--probe-port-base + S` reaches
//! slot S's worker whatever its state, drained included, while ordinary new connections
//! follow the active set; `ck status` counts those probes, and `ck probe S` uses the same path.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use ck_tests::http::{burst_without, parse_body};
use ck_tests::sys::pid_alive;
use ck_tests::{Answer, Ck, burst_pinned, local, probe_base_for, start_ready};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Probes sent per round.
const PROBES: u32 = 100;
/// Ordinary new connections sent while the probed slot is drained.
const NORMAL: u32 = 200;
/// The slot that is probed (and drained).
const PROBED: u32 = 2;

/// Starts a ready fleet and returns it with its port and its probe port base.
fn start_with_probe_base(what: &str, workers: usize, args: &[&str]) -> (Ck, u16, u16) {
    let (ck, port, _) = start_ready(what, workers, args).expect("start a ready ck");
    (ck, port, probe_base_for(port))
}

/// One probe of `slot` by hand: a connection from `127.0.0.1:(base + slot)` (SO_REUSEADDR, and
/// linger 0 so that closing leaves no TIME_WAIT to block the next probe from that port) to
/// `127.0.0.1:port`, one `GET /`, the answer read to the end. `Err` says what went wrong.
fn probe(port: u16, base: u16, slot: u32) -> Result<Answer, String> {
    let source_port = u16::try_from(u32::from(base) + slot).map_err(|e| e.to_string())?;
    let source = SocketAddr::from(([127, 0, 0, 1], source_port));
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_reuse_address(true)
        .map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    socket
        .set_linger(Some(Duration::ZERO))
        .map_err(|e| format!("SO_LINGER: {e}"))?;
    socket
        .bind(&SockAddr::from(source))
        .map_err(|e| format!("bind {source}: {e}"))?;
    socket
        .connect_timeout(&SockAddr::from(local(port)), Duration::from_secs(5))
        .map_err(|e| format!("connect from {source}: {e}"))?;
    let mut stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(5))))
        .map_err(|e| format!("timeouts: {e}"))?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
    if head.split_whitespace().nth(1) != Some("200") {
        return Err(format!("not a 200: {head:?}"));
    }
    parse_body(body).ok_or_else(|| format!("unexpected body {body:?}"))
}

/// Sends `n` probes of `slot` one after the other; returns the answers and the failures.
fn probes(port: u16, base: u16, slot: u32, n: u32) -> (Vec<Answer>, Vec<String>) {
    let (mut answers, mut failures) = (Vec::new(), Vec::new());
    for _ in 0..n {
        match probe(port, base, slot) {
            Ok(answer) => answers.push(answer),
            Err(why) => failures.push(why),
        }
    }
    (answers, failures)
}

/// Sends [`PROBES`] probes of slot [`PROBED`] (while it is `when`) and asserts that its worker
/// `pid` answered every one.
fn assert_probes_reach(port: u16, base: u16, pid: u32, when: &str) {
    let (answers, failures) = probes(port, base, PROBED, PROBES);
    assert!(failures.is_empty(), "failed probes: {failures:?}");
    let by_probed = answers
        .iter()
        .filter(|a| a.slot == PROBED && a.pid == pid)
        .count();
    eprintln!("probes while {when}: {by_probed}/{PROBES} answered by slot {PROBED} (pid {pid})");
    assert_eq!(by_probed, PROBES as usize, "answers: {answers:?}");
}

/// `probe_hits` of `slot` in `ck status`.
fn probe_hits(ck: &Ck, slot: u32) -> u64 {
    ck.status().expect("ck status").slot(slot).probe_hits
}

#[test]
fn probes_reach_their_slot_even_when_it_is_drained() {
    let (ck, port, base) = start_with_probe_base("probe-steer", 4, &["--policy", "round-robin"]);
    let addr = local(port);
    let pid = ck.status().expect("ck status").worker_pid(PROBED);
    eprintln!("port {port}, probe base {base}, slot {PROBED} pid {pid}");
    // Probes ck sent itself (a starting worker's accept probe) are not the test's.
    let ck_probes: Vec<u64> = (0..4).map(|s| probe_hits(&ck, s)).collect();

    // Ready: every probe from base+2 is answered by slot 2's worker.
    assert_probes_reach(port, base, pid, "ready");

    let said = ck
        .ctl_ok(&["drain", &PROBED.to_string()])
        .expect("ck drain");
    eprintln!("ck drain {PROBED}: {said}");
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(PROBED).state, "draining", "{status:#?}");
    assert!(!status.active.contains(&PROBED), "{status:#?}");

    // Drained: probes still reach it, ordinary connections never do.
    assert_probes_reach(port, base, pid, "drained");
    let normal = burst_without(burst_pinned, addr, NORMAL, PROBED, "drained");
    assert_eq!(normal.pid(pid), 0, "drained worker got some: {normal:?}");

    let hits = probe_hits(&ck, PROBED) - ck_probes[PROBED as usize];
    eprintln!("probe_hits of slot {PROBED}: {hits}");
    assert!(
        hits >= u64::from(2 * PROBES),
        "probe_hits {hits} < {}",
        2 * PROBES
    );
    for other in (0..4).filter(|s| *s != PROBED) {
        assert_eq!(
            probe_hits(&ck, other),
            ck_probes[other as usize],
            "slot {other} was never probed"
        );
    }

    // `ck probe 2` goes the same way.
    let said = ck
        .ctl_ok(&["probe", &PROBED.to_string()])
        .expect("ck probe");
    eprintln!("ck probe {PROBED}: {said}");
    assert!(said.contains(&format!("pid {pid}")), "{said}");
    assert!(
        said.contains(&format!("slot={PROBED} pid={pid}")),
        "answered by another worker: {said}"
    );
    assert!(said.contains("draining"), "{said}");
    assert!(
        probe_hits(&ck, PROBED) - ck_probes[PROBED as usize] > hits,
        "ck probe not counted"
    );
    assert!(pid_alive(pid), "drained worker {pid} died");
}
