//! UDP clients for UDP groups: flows (one client socket each, so one source port each) that
//! send a datagram and read who answered (the demo worker answers `slot=S pid=P`).
use std::{
    net::{SocketAddr, UdpSocket},
    time::Duration,
};

use crate::ck::{Proto, StartOptions};
use crate::{Ck, READY_TIMEOUT, instance_name, probe_base_for, sys::free_port};

/// Starts a UDP-only fleet of `workers` on a free loopback port, with `extra` options (and
/// the command after `--`, if any), waits until they are ready, and returns it with its
/// address.
pub fn udp_fleet(what: &str, workers: usize, extra: &[&str]) -> (Ck, SocketAddr) {
    let port = free_port();
    let mut ck = StartOptions::new()
        .listen(Proto::Udp, port)
        .args(&["--probe-port-base", &probe_base_for(port).to_string()])
        .args(&["-w", &workers.to_string()])
        .args(extra)
        .start(&instance_name(what, port))
        .expect("start ck");
    ck.wait_ready(workers, READY_TIMEOUT)
        .expect("wait for ready slots");
    let addr = ck.addr();
    (ck, addr)
}

/// How long a flow waits for its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Client flows to one UDP address: each its own socket on loopback (of the address's family),
/// so its own source port.
pub struct Flows {
    target: SocketAddr,
    sockets: Vec<UdpSocket>,
}

impl Flows {
    /// `n` new flows to `target`.
    pub fn open(target: SocketAddr, n: usize) -> Flows {
        let sockets = (0..n)
            .map(|_| {
                let local = match target {
                    SocketAddr::V4(_) => "127.0.0.1:0",
                    SocketAddr::V6(_) => "[::1]:0",
                };
                let socket = UdpSocket::bind(local).expect("binding a client socket");
                socket
                    .set_read_timeout(Some(ANSWER_WAIT))
                    .expect("setting the read timeout");
                socket
            })
            .collect();
        Flows { target, sockets }
    }

    /// Sends one datagram on every flow, then reads each flow's answer: who answered
    /// (`slot=S pid=P`), or None when nothing came within the wait.
    pub fn round(&self) -> Vec<Option<String>> {
        for socket in &self.sockets {
            socket
                .send_to(b"ping", self.target)
                .expect("sending a datagram");
        }
        self.sockets
            .iter()
            .map(|socket| {
                let mut buf = [0u8; 256];
                let n = socket.recv(&mut buf).ok()?;
                Some(String::from_utf8_lossy(&buf[..n]).trim().to_string())
            })
            .collect()
    }
}

/// Asserts that every flow was answered; returns the distinct workers (pids) that answered.
pub fn answered_by(answers: &[Option<String>]) -> std::collections::BTreeSet<u32> {
    assert!(
        answers.iter().all(Option::is_some),
        "unanswered flows: {answers:?}"
    );
    answers.iter().flatten().filter_map(|a| pid_of(a)).collect()
}

/// The pid in an answer `slot=S pid=P`.
pub fn pid_of(answer: &str) -> Option<u32> {
    answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid=")?.parse().ok())
}

/// How many flows `after` answered from another worker than `before` (a flow that went
/// unanswered in either round counts as moved).
pub fn moved(before: &[Option<String>], after: &[Option<String>]) -> usize {
    before
        .iter()
        .zip(after)
        .filter(|(b, a)| b.is_none() || b != a)
        .count()
}

/// Runs `ck reload` while `held` keeps sending (so no held worker goes quiet); asserts that no
/// held flow moved meanwhile (their answers stay `first`).
pub fn reload_while_sending(ck: &Ck, held: &Flows, first: &[Option<String>]) {
    let name = ck.name().to_string();
    let reload = std::thread::spawn(move || crate::ck::ck_output(&["reload", "--name", &name]));
    while !reload.is_finished() {
        assert_eq!(held.round(), first, "a held flow moved during the roll");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = reload.join().expect("the reload thread");
    assert!(out.status.success(), "{out:?}");
}
