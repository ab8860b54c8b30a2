//! The HTTP/1.1 client, by hand: request bytes, response-head parsing (status, `Content-Length`,
//! `Connection`), reading one response into a reused buffer, the classification of failures,
//! and a blocking one-shot `GET` on std sockets.
//!
//! Responses must carry a `Content-Length` (the demo worker's do); chunked ones are rejected.

use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::FailureKind;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest response body accepted.
const MAX_BODY: usize = 1024 * 1024;
/// Free room made in the read buffer before each read.
const READ_ROOM: usize = 4 * 1024;

/// The bytes of `GET {path}`, with `Connection: close` when `close`.
pub(crate) fn request_bytes(path: &str, close: bool) -> Vec<u8> {
    let close = if close { "Connection: close\r\n" } else { "" };
    format!("GET {path} HTTP/1.1\r\nHost: ck\r\n{close}\r\n").into_bytes()
}

/// Why one request failed.
#[derive(Debug)]
pub(crate) struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// Whether no byte of the response had arrived (what makes a request safe to retry).
    pub early: bool,
    /// What happened, for diagnostics.
    pub detail: Detail,
}

/// What happened to a failed request.
#[derive(Debug)]
pub(crate) enum Detail {
    /// An I/O error while doing the named step.
    Io(&'static str, io::Error),
    /// A described problem.
    Msg(&'static str),
    /// The answer had this status.
    Status(u16),
}

impl Failure {
    /// An I/O error of `step`, classified.
    pub fn io(step: &'static str, err: io::Error, early: bool) -> Failure {
        Failure {
            kind: classify(&err),
            early,
            detail: Detail::Io(step, err),
        }
    }

    /// A failure of `kind` described by `msg`.
    pub fn msg(kind: FailureKind, msg: &'static str, early: bool) -> Failure {
        Failure {
            kind,
            early,
            detail: Detail::Msg(msg),
        }
    }

    /// The request got no complete answer within its time limit.
    pub fn timeout(early: bool) -> Failure {
        Failure::msg(FailureKind::Timeout, "no complete answer in time", early)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.kind)?;
        match &self.detail {
            Detail::Io(step, err) => write!(f, "{step}: {err}")?,
            Detail::Msg(msg) => f.write_str(msg)?,
            Detail::Status(status) => write!(f, "status {status}")?,
        }
        if self.early {
            f.write_str(" (before any response byte)")?;
        }
        Ok(())
    }
}

/// The class of an I/O error.
pub(crate) fn classify(err: &io::Error) -> FailureKind {
    use io::ErrorKind::*;
    match err.kind() {
        ConnectionRefused => FailureKind::Refused,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof => FailureKind::Reset,
        TimedOut | WouldBlock => FailureKind::Timeout,
        _ => FailureKind::Other,
    }
}

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    /// The status code.
    pub status: u16,
    /// Length of the head, blank line included: where the body starts.
    pub head_len: usize,
    /// `Content-Length`.
    pub body_len: usize,
    /// Whether the server closes the connection after this response.
    pub close: bool,
}

impl Head {
    /// Length of the whole response.
    pub fn total(&self) -> usize {
        self.head_len + self.body_len
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Parses the response head at the start of `buf`: `Ok(None)` while it is incomplete.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<Head>, &'static str> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Err("response head too large")
        } else if buf.len() >= 5 && !buf.starts_with(b"HTTP/") {
            Err("not an HTTP response")
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "response head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let (version, rest) = status_line.split_once(' ').ok_or("malformed status line")?;
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err("not an HTTP/1.x response"),
    };
    let code = rest.get(..3).ok_or("malformed status line")?;
    if !code.bytes().all(|b| b.is_ascii_digit())
        || rest.as_bytes().get(3).is_some_and(|&b| b != b' ')
    {
        return Err("malformed status code");
    }
    let status: u16 = code.parse().map_err(|_| "malformed status code")?;
    let mut body_len = None;
    let (mut close, mut keep_alive) = (false, false);
    for line in lines {
        let (name, value) = line.split_once(':').ok_or("malformed header line")?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let len: usize = value.parse().map_err(|_| "malformed Content-Length")?;
            if body_len.is_some_and(|l| l != len) {
                return Err("conflicting Content-Length headers");
            }
            body_len = Some(len);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("Transfer-Encoding is not supported");
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close |= token.eq_ignore_ascii_case("close");
                keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    let body_len = body_len.ok_or("response without Content-Length")?;
    if body_len > MAX_BODY {
        return Err("response body too large");
    }
    Ok(Some(Head {
        status,
        head_len: end + 4,
        body_len,
        close: close || (http10 && !keep_alive),
    }))
}

/// The slot and pid of a body `slot=<slot> pid=<pid>` (either may be missing).
pub(crate) fn parse_body(body: &[u8]) -> (Option<&str>, Option<u32>) {
    let Ok(text) = std::str::from_utf8(body) else {
        return (None, None);
    };
    let (mut slot, mut pid) = (None, None);
    for word in text.split_ascii_whitespace() {
        if let Some(s) = word.strip_prefix("slot=") {
            slot = slot.or(Some(s).filter(|s| !s.is_empty()));
        } else if let Some(p) = word.strip_prefix("pid=") {
            pid = pid.or(p.parse().ok());
        }
    }
    (slot, pid)
}

/// Connects to `addr` with `TCP_NODELAY`.
pub(crate) async fn connect(addr: SocketAddr) -> Result<TcpStream, Failure> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|e| Failure::io("connect", e, true))?;
    stream
        .set_nodelay(true)
        .map_err(|e| Failure::io("set TCP_NODELAY", e, true))?;
    Ok(stream)
}

/// Sends `request` on `stream` and reads one response into `buf` (cleared first; its capacity
/// is reused). The response is `buf[..head.total()]`.
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    request: &[u8],
) -> Result<Head, Failure> {
    buf.clear();
    stream
        .write_all(request)
        .await
        .map_err(|e| Failure::io("send", e, true))?;
    // Each pass reads at least one byte, and parse_head bounds the head and the body.
    let head = loop {
        let parsed = parse_head(buf).map_err(|m| Failure::msg(FailureKind::Other, m, false))?;
        if let Some(head) = parsed {
            break head;
        }
        read_more(stream, buf).await?;
    };
    while buf.len() < head.total() {
        read_more(stream, buf).await?;
    }
    Ok(Head {
        // Bytes past the response: the connection is out of step, do not reuse it.
        close: head.close || buf.len() > head.total(),
        ..head
    })
}

/// Reads what `stream` has into the free room of `buf`; EOF is a failure.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(), Failure> {
    let early = buf.is_empty();
    if buf.capacity() - buf.len() < READ_ROOM {
        buf.reserve(READ_ROOM);
    }
    match stream.read_buf(buf).await {
        Ok(0) if early => Err(Failure::msg(
            FailureKind::Reset,
            "connection closed before the response",
            true,
        )),
        Ok(0) => Err(Failure::msg(
            FailureKind::Reset,
            "connection closed in the middle of the response",
            false,
        )),
        Ok(_) => Ok(()),
        Err(e) => Err(Failure::io("receive", e, early)),
    }
}

/// One `GET /` with `Connection: close` on a new blocking connection, within `timeout`:
/// the slot and pid that answered.
pub(crate) fn get_once(addr: SocketAddr, timeout: Duration) -> Result<(String, u32), Failure> {
    let deadline = Instant::now() + timeout;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| Failure::io("connect", e, true))?;
    let left = |early| {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(Failure::timeout(early))
        } else {
            Ok(left)
        }
    };
    let setup = |e| Failure::io("set up the socket", e, true);
    stream.set_nodelay(true).map_err(setup)?;
    stream.set_write_timeout(Some(left(true)?)).map_err(setup)?;
    stream
        .write_all(&request_bytes("/", true))
        .map_err(|e| Failure::io("send", e, true))?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    // Each pass reads at least one byte, and parse_head bounds the head and the body.
    let head = loop {
        let parsed = parse_head(&buf).map_err(|m| Failure::msg(FailureKind::Other, m, false))?;
        if let Some(head) = parsed.filter(|h| buf.len() >= h.total()) {
            break head;
        }
        let early = buf.is_empty();
        stream.set_read_timeout(Some(left(early)?)).map_err(setup)?;
        match stream.read(&mut chunk) {
            Ok(0) => {
                let msg = "connection closed before the whole response";
                return Err(Failure::msg(FailureKind::Reset, msg, early));
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(Failure::io("receive", e, early)),
        }
    };
    if !head.is_success() {
        return Err(Failure {
            kind: FailureKind::Other,
            early: false,
            detail: Detail::Status(head.status),
        });
    }
    match parse_body(&buf[head.head_len..head.total()]) {
        (Some(slot), Some(pid)) => Ok((slot.to_string(), pid)),
        _ => Err(Failure::msg(
            FailureKind::Other,
            "body is not `slot=<slot> pid=<pid>`",
            false,
        )),
    }
}
