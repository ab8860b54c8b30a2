//! A small blocking HTTP/1.1 client for the demo worker: one request per fresh connection,
//! keep-alive connections, requests sent now and read later, and tallies of who answered.
//!
//! Every socket operation has a 5 s timeout; failures are classified (refused, reset, timeout,
//! EOF, other) so tests can count them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// Timeout of every connect, read and write.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Who answered `GET /`: the body `slot=<slot> pid=<pid>\n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Answer {
    /// The worker's slot.
    pub slot: u32,
    /// The worker's pid.
    pub pid: u32,
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The connection was refused (nothing listening, or the SYN was dropped as refused).
    Refused,
    /// The connection was reset (or the pipe broke) before the whole answer arrived.
    Reset,
    /// Connect, read or write timed out.
    Timeout,
    /// The peer closed the connection before the whole answer arrived.
    Eof,
    /// Anything else: an unexpected status, a malformed answer, another I/O error.
    Other(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Refused => f.write_str("refused"),
            Failure::Reset => f.write_str("reset"),
            Failure::Timeout => f.write_str("timeout"),
            Failure::Eof => f.write_str("eof"),
            Failure::Other(what) => write!(f, "other: {what}"),
        }
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        use io::ErrorKind::*;
        match e.kind() {
            ConnectionRefused => Failure::Refused,
            ConnectionReset | ConnectionAborted | BrokenPipe => Failure::Reset,
            WouldBlock | TimedOut => Failure::Timeout,
            UnexpectedEof => Failure::Eof,
            _ => Failure::Other(e.to_string()),
        }
    }
}

/// `127.0.0.1:port`, where ck's `--port` groups (bound on 0.0.0.0) are reached.
pub fn local(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn connect(addr: SocketAddr) -> Result<TcpStream, Failure> {
    configure(TcpStream::connect_timeout(&addr, IO_TIMEOUT)?)
}

/// Connects from source address `source` (bound first, any port).
fn connect_from(source: IpAddr, addr: SocketAddr) -> Result<TcpStream, Failure> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect_timeout(&addr.into(), IO_TIMEOUT)?;
    configure(socket.into())
}

fn configure(stream: TcpStream) -> Result<TcpStream, Failure> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

fn request(close: bool) -> &'static [u8] {
    if close {
        b"GET / HTTP/1.1\r\nHost: ck-test\r\nConnection: close\r\n\r\n"
    } else {
        b"GET / HTTP/1.1\r\nHost: ck-test\r\n\r\n"
    }
}

/// Opens a fresh connection, sends one `GET /` with `Connection: close` and reads the answer.
pub fn get_new_conn(addr: SocketAddr) -> Result<Answer, Failure> {
    send_new_conn(addr)?.finish()
}

/// Like [`get_new_conn`], from source address `source` (e.g. one of 127.0.0.0/8: many
/// clients on one machine, each with its own address).
pub fn get_new_conn_from(source: IpAddr, addr: SocketAddr) -> Result<Answer, Failure> {
    let mut stream = connect_from(source, addr)?;
    stream.write_all(request(true))?;
    Pending { stream }.finish()
}

/// Opens a fresh connection, sends `GET path` with `Connection: close` and returns the answer's
/// status code (for endpoints other than the demo worker's `GET /`).
pub fn get_status(addr: SocketAddr, path: &str) -> Result<u16, Failure> {
    get_path(addr, path).map(|(code, _)| code)
}

/// Like [`get_status`], with the answer's body (`/readyz` says why).
pub fn get_path(addr: SocketAddr, path: &str) -> Result<(u16, String), Failure> {
    let mut stream = connect(addr)?;
    stream.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: ck-test\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let code = text
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3)?.parse().ok())
        .ok_or_else(|| Failure::Other(format!("not an HTTP answer: {text:?}")))?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.to_string()))
}

/// The text of ck's `/metrics` at `addr` (as `ck status` names the listener); panics, naming
/// the address, when it does not answer 200.
pub fn metrics_text(addr: &str) -> String {
    let socket: SocketAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("metrics address {addr:?}: {e}"));
    match get_path(socket, "/metrics") {
        Ok((200, body)) => body,
        other => panic!("GET /metrics on {addr}: {other:?}"),
    }
}

/// A connection on which one `GET /` was sent and whose answer is not read yet.
#[derive(Debug)]
pub struct Pending {
    stream: TcpStream,
}

/// Opens a fresh connection and sends one `GET /` (`Connection: close`) without reading the
/// answer: the connection may sit unaccepted in a listener's queue meanwhile.
pub fn send_new_conn(addr: SocketAddr) -> Result<Pending, Failure> {
    let mut stream = connect(addr)?;
    stream.write_all(request(true))?;
    Ok(Pending { stream })
}

impl Pending {
    /// Waits at most `wait` for the answer to start: `None` when nothing came meanwhile (the
    /// connection sits in the queue of a worker that does not accept; [`Pending::finish`] can
    /// read it later), else the answer.
    pub fn answer_within(&mut self, wait: Duration) -> Option<Result<Answer, Failure>> {
        if let Err(e) = self.stream.set_read_timeout(Some(wait)) {
            return Some(Err(e.into()));
        }
        let peeked = self.stream.peek(&mut [0u8; 1]);
        if let Err(e) = self.stream.set_read_timeout(Some(IO_TIMEOUT)) {
            return Some(Err(e.into()));
        }
        match peeked {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                None
            }
            _ => Some(read_answer(&mut self.stream, &mut Vec::new())),
        }
    }

    /// Reads the answer.
    pub fn finish(mut self) -> Result<Answer, Failure> {
        let mut buf = Vec::new();
        read_answer(&mut self.stream, &mut buf)
    }
}

/// Reads the answer of every pending request, in order, and tallies them.
pub fn finish_all(pending: Vec<Pending>) -> Tally {
    let mut tally = Tally::default();
    for p in pending {
        tally.add(&p.finish());
    }
    tally
}

/// One keep-alive connection that sends `GET /` again and again.
#[derive(Debug)]
pub struct KeepAlive {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl KeepAlive {
    /// Connects.
    pub fn connect(addr: SocketAddr) -> Result<KeepAlive, Failure> {
        Ok(KeepAlive {
            stream: connect(addr)?,
            buf: Vec::new(),
        })
    }

    /// Sends `GET /` on the connection and reads the answer.
    pub fn get(&mut self) -> Result<Answer, Failure> {
        self.stream.write_all(request(false))?;
        read_answer(&mut self.stream, &mut self.buf)
    }

    /// Sends `times` more requests and asserts that each is answered by `first` (the worker
    /// that answered the connection's first request: a keep-alive connection stays with it).
    pub fn assert_stays_with(&mut self, first: Answer, times: usize) {
        for i in 0..times {
            let again = self
                .get()
                .unwrap_or_else(|e| panic!("keep-alive request {i} on slot {}: {e}", first.slot));
            assert_eq!(again, first, "keep-alive connection moved");
        }
    }
}

/// Opens keep-alive connections (at most 40) until one is answered by slot `slot`, and returns
/// it with that first answer.
///
/// # Panics
/// When none of the 40 lands there, or a connection or its first request fails.
pub fn keep_alive_on(addr: SocketAddr, slot: u32) -> (KeepAlive, Answer) {
    (0..40)
        .map(|_| {
            let mut conn = KeepAlive::connect(addr).expect("keep-alive connect");
            let answer = conn.get().expect("first answer on a keep-alive connection");
            (conn, answer)
        })
        .find(|(_, answer)| answer.slot == slot)
        .unwrap_or_else(|| panic!("no keep-alive connection out of 40 landed on slot {slot}"))
}

/// Opens `n` keep-alive connections from one CPU (so round-robin alternates exactly) and sends
/// each one request: the connections, held open, with how many each slot answered.
///
/// # Panics
/// When a connection or its request fails.
pub fn hold(addr: SocketAddr, n: usize) -> (Vec<KeepAlive>, BTreeMap<u32, u64>) {
    hold_from_cpu(addr, n, crate::sys::first_allowed_cpu())
}

/// Like [`hold`], from CPU `cpu` (the kernel counts each connection on the CPU that opened it).
///
/// # Panics
/// When a connection or its request fails.
pub fn hold_from_cpu(
    addr: SocketAddr,
    n: usize,
    cpu: usize,
) -> (Vec<KeepAlive>, BTreeMap<u32, u64>) {
    crate::sys::on_cpu(cpu, move || {
        let mut per_slot = BTreeMap::new();
        let conns = (0..n)
            .map(|i| {
                let mut conn = KeepAlive::connect(addr).unwrap_or_else(|e| panic!("conn {i}: {e}"));
                let answer = conn.get().unwrap_or_else(|e| panic!("answer {i}: {e}"));
                *per_slot.entry(answer.slot).or_insert(0) += 1;
                conn
            })
            .collect();
        (conns, per_slot)
    })
}

/// Opens `n` keep-alive connections to `addr` from its first moment: a refused connection (no
/// socket listens yet) is tried again at once, for up to `within`, so the first ones land in
/// the first microseconds a socket listens. Then sends each one request: the connections, held
/// open, with how many each slot answered.
///
/// # Panics
/// When `within` passes before `n` are open, or a request fails.
pub fn hold_from_first(
    addr: SocketAddr,
    n: usize,
    within: std::time::Duration,
) -> (Vec<KeepAlive>, BTreeMap<u32, u64>) {
    let deadline = std::time::Instant::now() + within;
    let mut conns = Vec::with_capacity(n);
    while conns.len() < n {
        match KeepAlive::connect(addr) {
            Ok(conn) => conns.push(conn),
            Err(Failure::Refused) if std::time::Instant::now() < deadline => {}
            Err(e) => panic!("connection {} of {n} to {addr}: {e}", conns.len()),
        }
    }
    let mut per_slot = BTreeMap::new();
    for (i, conn) in conns.iter_mut().enumerate() {
        let answer = conn.get().unwrap_or_else(|e| panic!("answer {i}: {e}"));
        *per_slot.entry(answer.slot).or_insert(0) += 1;
    }
    (conns, per_slot)
}

/// Reads one response from `stream`, with `buf` holding bytes already read past the previous
/// response (and left holding those past this one).
fn read_answer(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Answer, Failure> {
    let head_end = loop {
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos + 4;
        }
        fill(stream, buf)?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    if status_line.split_whitespace().nth(1) != Some("200") {
        return Err(Failure::Other(format!("status line {status_line:?}")));
    }
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .ok_or_else(|| Failure::Other(format!("no Content-Length in {head:?}")))?;
    while buf.len() < head_end + length {
        fill(stream, buf)?;
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    buf.drain(..head_end + length);
    parse_body(&body).ok_or_else(|| Failure::Other(format!("unexpected body {body:?}")))
}

/// Parses `slot=<slot> pid=<pid>\n`.
pub fn parse_body(body: &str) -> Option<Answer> {
    let rest = body.strip_suffix('\n')?.strip_prefix("slot=")?;
    let (slot, pid) = rest.split_once(" pid=")?;
    Some(Answer {
        slot: slot.parse().ok()?,
        pid: pid.parse().ok()?,
    })
}

fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), Failure> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk)? {
        0 => Err(Failure::Eof),
        n => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Counts of outcomes: answers per slot and per pid, failures per kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Answered requests.
    pub ok: u32,
    /// Answers per slot.
    pub per_slot: BTreeMap<u32, u32>,
    /// Answers per worker pid.
    pub per_pid: BTreeMap<u32, u32>,
    /// Failures per kind (as displayed).
    pub failures: BTreeMap<String, u32>,
}

impl Tally {
    /// Records one outcome.
    pub fn add(&mut self, outcome: &Result<Answer, Failure>) {
        match outcome {
            Ok(answer) => {
                self.ok += 1;
                *self.per_slot.entry(answer.slot).or_default() += 1;
                *self.per_pid.entry(answer.pid).or_default() += 1;
            }
            Err(failure) => *self.failures.entry(failure.to_string()).or_default() += 1,
        }
    }

    /// Answers from `slot`.
    pub fn slot(&self, slot: u32) -> u32 {
        self.per_slot.get(&slot).copied().unwrap_or(0)
    }

    /// Answers from `pid`.
    pub fn pid(&self, pid: u32) -> u32 {
        self.per_pid.get(&pid).copied().unwrap_or(0)
    }

    /// Total failures.
    pub fn failed(&self) -> u32 {
        self.failures.values().sum()
    }

    /// Whether every answer came from a pid in `pids`.
    pub fn only_from(&self, pids: &BTreeSet<u32>) -> bool {
        self.per_pid.keys().all(|p| pids.contains(p))
    }
}

/// Sends `n` requests, each on a fresh connection, one after the other, and tallies them.
pub fn burst(addr: SocketAddr, n: u32) -> Tally {
    let mut tally = Tally::default();
    for _ in 0..n {
        tally.add(&get_new_conn(addr));
    }
    tally
}

/// Like [`burst`], from a thread pinned to one CPU, so that ck's per-CPU round-robin cursor
/// spreads the connections exactly (see [`crate::sys::on_one_cpu`]).
pub fn burst_pinned(addr: SocketAddr, n: u32) -> Tally {
    crate::sys::on_one_cpu(move || burst(addr, n))
}

/// Sends `n` requests with `send` ([`burst`] or [`burst_pinned`]) while slot `slot` is held
/// out of the active set (`why`: `drained`, `unhealthy`, `stalled`), prints the tally, asserts
/// that every request was answered and none by that slot, and returns the tally.
pub fn burst_without(
    send: fn(SocketAddr, u32) -> Tally,
    addr: SocketAddr,
    n: u32,
    slot: u32,
    why: &str,
) -> Tally {
    let tally = send(addr, n);
    eprintln!("while slot {slot} is {why}: {tally:?}");
    assert_eq!(tally.ok, n, "every request answered: {tally:?}");
    assert_eq!(
        tally.slot(slot),
        0,
        "{why} slot {slot} got new connections: {tally:?}"
    );
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_demo_bodies() {
        assert_eq!(
            parse_body("slot=3 pid=1234\n"),
            Some(Answer { slot: 3, pid: 1234 })
        );
        assert_eq!(parse_body("slot=3 pid=1234"), None);
        assert_eq!(parse_body("hello\n"), None);
    }

    #[test]
    fn tally_counts() {
        let mut t = Tally::default();
        t.add(&Ok(Answer { slot: 1, pid: 10 }));
        t.add(&Ok(Answer { slot: 1, pid: 10 }));
        t.add(&Err(Failure::Reset));
        assert_eq!(
            (t.ok, t.slot(1), t.slot(0), t.pid(10), t.failed()),
            (2, 2, 0, 2, 1)
        );
    }
}
