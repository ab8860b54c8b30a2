//! The stop of a UDP worker seen by a server that refuses new flows once told to stop (as a
//! QUIC server refuses new connections after GOAWAY): `tests/servers/udp-refuser/server.py`
//! under ck, two rolls and a scale up and down while clients keep opening flows. Every flow
//! whose first datagram reached a worker before ck flipped new flows away from it must be
//! answered by that worker, so none may be refused.
//!
//! `tests/tests/udp_stop_signal.rs` runs [`check`] once per mode; `cargo xtask soak udp` runs
//! it many times and sums the refusals.
use std::{
    net::{Ipv4Addr, SocketAddr, UdpSocket},
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

use crate::ck::{Ck, Proto, StartOptions};
use crate::{READY_TIMEOUT, instance_name, probe_base_for, sys};

/// How the fleet routes, and what a flow is to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--udp-mode flow`: a flow is a client address and port.
    Flow,
    /// `--udp-mode quic`: a flow is a QUIC-like connection (a handshake of two Initial
    /// datagrams by the client's connection ID, then short-header datagrams by the server's,
    /// which carries ck's cookie).
    Quic,
}

impl Mode {
    /// The mode's name, as `--udp-mode` and the server take it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Flow => "flow",
            Mode::Quic => "quic",
        }
    }
}

/// What one run of the check counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Flows the clients opened.
    pub flows: u64,
    /// Flows a worker refused (as the clients saw it).
    pub refused: u64,
    /// Flows the servers counted as refused (what they wrote at exit).
    pub refused_by_servers: u64,
    /// Flows answered by more than one worker.
    pub moved: u64,
    /// Flows with a datagram left unanswered.
    pub unanswered: u64,
    /// Workers that wrote their counts at exit.
    pub servers: u64,
}

impl Refusals {
    /// One line: the flows and how many were refused, moved or unanswered.
    pub fn summary(&self) -> String {
        format!(
            "{} flows, {} refused ({} by the servers' count, {} servers), {} moved, {} unanswered",
            self.flows,
            self.refused,
            self.refused_by_servers,
            self.servers,
            self.moved,
            self.unanswered
        )
    }
}

/// New flows opened at once, and how often: the server spends 8 ms on a new flow, so after a
/// burst each of two workers has about 100 ms of new flows waiting on its socket (half its
/// time), and a flip often finds some unread. Each flow has a thread (and a socket) of its own.
const BURST: usize = 24;
const BURST_EVERY: Duration = Duration::from_millis(200);
/// Datagrams a flow sends after its opening, and the gap between them.
const LATER_DATAGRAMS: usize = 3;
const GAP: Duration = Duration::from_millis(30);
/// How long a client waits for an answer.
const ANSWER_WAIT: Duration = Duration::from_secs(3);
/// Traffic between two changes of the fleet.
const PAUSE: Duration = Duration::from_millis(600);

/// The server: `tests/servers/udp-refuser/server.py`.
fn server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("servers/udp-refuser/server.py")
}

/// Runs the server under ck (`-w 2`, `--udp-mode MODE`) while clients open flows, through a
/// roll, a scale to 3, a scale back to 2 and another roll; stops ck and returns what the
/// clients and the servers counted.
pub fn check(mode: Mode) -> Result<Refusals> {
    let counts = sys::TempDir::new("udp-refusals");
    let port = sys::free_port();
    let server = server();
    let server = server.to_str().context("the server's path is not UTF-8")?;
    let counts_dir = counts.path().to_str().context("a temp path is not UTF-8")?;
    let mut ck = StartOptions::new()
        .listen(Proto::Udp, port)
        .args(&["--probe-port-base", &probe_base_for(port).to_string()])
        .args(&["-w", "2", "--udp-mode", mode.name()])
        .args(&["--", "python3", server, mode.name()])
        .env(&[("REFUSALS_DIR", counts_dir)])
        .start(&instance_name(
            &format!("udp-refusals-{}", mode.name()),
            port,
        ))?;
    ck.wait_ready(2, READY_TIMEOUT)?;
    let clients = Clients::start(ck.addr(), mode);
    let churned = churn(&mut ck);
    let mut refusals = clients.finish();
    let stopped = ck.stop();
    churned?;
    let status = stopped?;
    if !status.success() {
        bail!("ck stopped with {status}:\n{}", ck.log());
    }
    for entry in std::fs::read_dir(counts.path())? {
        let text = std::fs::read_to_string(entry?.path())?;
        refusals.servers += 1;
        refusals.refused_by_servers += text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("refused=")?.parse::<u64>().ok())
            .with_context(|| format!("a server wrote {text:?}"))?;
    }
    Ok(refusals)
}

/// A roll, a scale to 3, a scale back to 2 and another roll, with traffic between them.
fn churn(ck: &mut Ck) -> Result<()> {
    std::thread::sleep(PAUSE);
    ck.ctl_ok(&["reload"])?;
    std::thread::sleep(PAUSE);
    ck.ctl_ok(&["scale", "3"])?;
    ck.wait_ready(3, READY_TIMEOUT)?;
    std::thread::sleep(PAUSE);
    ck.ctl_ok(&["scale", "2"])?;
    ck.wait_status("scaled down to 2", READY_TIMEOUT, |s| {
        s.slots.len() == 2 && s.ready_count() == 2
    })?;
    std::thread::sleep(PAUSE);
    ck.ctl_ok(&["reload"])?;
    std::thread::sleep(PAUSE);
    Ok(())
}

/// How one flow went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    /// Every datagram answered `ok` by one worker.
    Served,
    /// A worker answered `refused`.
    Refused,
    /// Answered `ok` by more than one worker.
    Moved,
    /// A datagram got no answer.
    Unanswered,
}

/// Clients opening [`BURST`] flows every [`BURST_EVERY`], each flow on a thread of its own and
/// from a loopback address of its own (127.2.0.0/16, in turn): a flow's address and port are
/// never an earlier flow's, which the fleet would take for that flow (and send to its worker,
/// perhaps as it exits).
struct Clients {
    stop: Arc<AtomicBool>,
    opener: JoinHandle<Vec<JoinHandle<Flow>>>,
}

impl Clients {
    /// Starts opening flows to `target`.
    fn start(target: SocketAddr, mode: Mode) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let opener = std::thread::spawn(move || {
            let mut flows = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                for _ in 0..BURST {
                    let n = flows.len() as u16;
                    let [high, low] = n.to_be_bytes();
                    let source = Ipv4Addr::new(127, 2, high, low);
                    flows.push(std::thread::spawn(move || run_flow(source, target, mode)));
                }
                std::thread::sleep(BURST_EVERY);
            }
            flows
        });
        Clients { stop, opener }
    }

    /// Stops opening flows, waits for those open and counts them.
    fn finish(self) -> Refusals {
        self.stop.store(true, Ordering::Relaxed);
        let flows = self.opener.join().expect("the flow opener panicked");
        let mut refusals = Refusals::default();
        for flow in flows {
            refusals.flows += 1;
            match flow.join().expect("a flow panicked") {
                Flow::Served => {}
                Flow::Refused => refusals.refused += 1,
                Flow::Moved => refusals.moved += 1,
                Flow::Unanswered => refusals.unanswered += 1,
            }
        }
        refusals
    }
}

/// One flow from `source`: its opening (flow mode: one datagram; quic: a ClientHello in two
/// Initial datagrams), then [`LATER_DATAGRAMS`] more, [`GAP`] apart.
fn run_flow(source: Ipv4Addr, target: SocketAddr, mode: Mode) -> Flow {
    let socket = UdpSocket::bind((source, 0)).expect("binding a client socket");
    socket
        .set_read_timeout(Some(ANSWER_WAIT))
        .expect("setting the read timeout");
    let mut answers = Vec::new();
    let mut cid = None;
    match mode {
        Mode::Flow => answers.push(ask(&socket, target, b"hello")),
        Mode::Quic => {
            let odcid: [u8; 8] = std::array::from_fn(|_| rand_byte());
            let initial = initial_packet(&odcid);
            // A ClientHello too large for one datagram: two Initials, sent back to back.
            for _ in 0..2 {
                socket.send_to(&initial, target).expect("sending");
            }
            for _ in 0..2 {
                let answer = receive(&socket);
                cid = cid.or_else(|| answer.as_deref().and_then(cid_of));
                answers.push(answer);
            }
        }
    }
    for _ in 0..LATER_DATAGRAMS {
        if answers.iter().any(|a| refused(a.as_deref())) {
            break;
        }
        std::thread::sleep(GAP);
        let datagram = match (mode, &cid) {
            (Mode::Flow, _) => b"more".to_vec(),
            (Mode::Quic, Some(cid)) => [&[0x40][..], cid, b"more"].concat(),
            (Mode::Quic, None) => break,
        };
        answers.push(ask(&socket, target, &datagram));
    }
    judge(&answers)
}

/// Whether an answer is a refusal.
fn refused(answer: Option<&str>) -> bool {
    answer.is_some_and(|a| a.starts_with("refused"))
}

/// How a flow went, from its answers.
fn judge(answers: &[Option<String>]) -> Flow {
    if answers.iter().any(|a| refused(a.as_deref())) {
        return Flow::Refused;
    }
    if answers.iter().any(Option::is_none) {
        return Flow::Unanswered;
    }
    let pids: std::collections::BTreeSet<u32> = answers
        .iter()
        .flatten()
        .filter_map(|a| crate::udp::pid_of(a))
        .collect();
    match pids.len() {
        1 => Flow::Served,
        _ => Flow::Moved,
    }
}

/// Sends `datagram` and reads the answer.
fn ask(socket: &UdpSocket, target: SocketAddr, datagram: &[u8]) -> Option<String> {
    socket.send_to(datagram, target).expect("sending");
    receive(socket)
}

/// The next answer, None when none came in time.
fn receive(socket: &UdpSocket) -> Option<String> {
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).trim().to_string())
}

/// The server's connection ID in an answer `ok pid=P cid=HEX`.
fn cid_of(answer: &str) -> Option<Vec<u8>> {
    let hex = answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("cid="))?;
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A QUIC v1 Initial packet's header with destination connection ID `odcid`, padded to 1200
/// octets as clients pad their Initials.
fn initial_packet(odcid: &[u8; 8]) -> Vec<u8> {
    let mut packet = vec![0xc0, 0, 0, 0, 1, odcid.len() as u8];
    packet.extend_from_slice(odcid);
    packet.push(0);
    packet.resize(1200, 0);
    packet
}

/// A random octet (the clock's nanoseconds, mixed).
fn rand_byte() -> u8 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish() as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_is_judged_by_its_answers() {
        let ok = |pid: u32| Some(format!("ok pid={pid}"));
        assert_eq!(judge(&[ok(1), ok(1)]), Flow::Served);
        assert_eq!(judge(&[ok(1), ok(2)]), Flow::Moved);
        assert_eq!(judge(&[ok(1), None]), Flow::Unanswered);
        assert_eq!(judge(&[ok(1), Some("refused pid=2".into())]), Flow::Refused);
        assert_eq!(
            cid_of("ok pid=3 cid=07000104a1b2c3d4").as_deref(),
            Some(&[7, 0, 1, 4, 0xa1, 0xb2, 0xc3, 0xd4][..])
        );
        let initial = initial_packet(&[9; 8]);
        assert_eq!((initial.len(), initial[5], initial[6]), (1200, 8, 9));
    }
}
