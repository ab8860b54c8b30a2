//! One probe of one worker through its own listening socket: the connection comes from the
//! source port that the BPF program maps to the worker's slot (probe steering), so it reaches
//! that worker whatever its state. Used by the supervisor's periodic probes, by `ck probe`, and
//! by `--ready auto`'s accept probe ([`conn::ProbeConn`]: one connection left in a starting
//! worker's accept queue, so that its first `accept` shows in the queue's length). Every one
//! of them is a well-behaved client: it sends its request (if any), reads the whole answer,
//! then shuts down writing, reads until the worker closes and closes last ([`conn`]), never
//! with a reset. It shuts down writing only after the answer: some servers (puma) drop a
//! request whose client has already half-closed, as they would a client that left.
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpSocket, TcpStream},
    time::Instant,
};

use crate::settings::health::ProbeKind;

pub mod accept;
pub mod conn;

/// Largest probe answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// How long a probe waits before it tries its port again while ck's earlier connection from it
/// is still open (see [`conn`]).
const PORT_RETRY: Duration = Duration::from_millis(10);

/// What a passing probe saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// HTTP status (None for a TCP probe).
    pub status: Option<u16>,
    /// The response body (empty for a TCP probe).
    pub body: String,
}

/// What one probe found, and its connection, if it was made, still to be ended politely
/// ([`conn::finish`]).
#[derive(Debug)]
pub struct Probed {
    /// The answer, or why the probe failed.
    pub answer: Result<ProbeAnswer, String>,
    /// The connection.
    pub conn: Option<TcpStream>,
}

/// Where to connect to reach a group bound to `bound`: its own address, or loopback of the same
/// family for a wildcard address.
pub fn target_of(bound: SocketAddr) -> SocketAddr {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bound.port())
}

/// The probe source address of `slot`: loopback of the target's family, port `base + slot`.
pub fn source_of(target: SocketAddr, base: u16, slot: u32) -> Option<SocketAddr> {
    let port = u16::try_from(u32::from(base) + slot).ok()?;
    let ip = if target.is_ipv4() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    };
    Some(SocketAddr::new(ip, port))
}

/// Probes `target` from `source` and ends the connection politely before it returns (`ck
/// probe`). `Err` says why the probe failed.
pub async fn probe(
    target: SocketAddr,
    source: SocketAddr,
    kind: &ProbeKind,
    timeout: Duration,
) -> Result<ProbeAnswer, String> {
    let probed = probe_once(target, source, kind, timeout).await;
    if let Some(stream) = probed.conn {
        conn::finish(stream).await;
    }
    probed.answer
}

/// Probes `target` from `source`: the answer as soon as it is known (within `timeout`), and the
/// connection, which the caller ends ([`conn::finish`]), in the background if the answer must
/// not wait for the worker to close.
pub async fn probe_once(
    target: SocketAddr,
    source: SocketAddr,
    kind: &ProbeKind,
    timeout: Duration,
) -> Probed {
    let deadline = Instant::now() + timeout;
    let late = || format!("no answer within {timeout:?}");
    let mut stream = match connect(target, source, deadline).await {
        Ok(Some(stream)) => stream,
        Ok(None) => {
            return Probed {
                answer: Err(late()),
                conn: None,
            };
        }
        Err(why) => {
            return Probed {
                answer: Err(why),
                conn: None,
            };
        }
    };
    let answer = match kind {
        ProbeKind::Tcp => Ok(ProbeAnswer {
            status: None,
            body: String::new(),
        }),
        ProbeKind::Http(path) => tokio::time::timeout_at(deadline, ask(&mut stream, path))
            .await
            .unwrap_or_else(|_| Err(late())),
    };
    Probed {
        answer,
        conn: Some(stream),
    }
}

/// Connects from `source` to `target` before `deadline` (`Ok(None)`: not in time). While ck's
/// earlier connection from the port to the same socket is still open (EADDRNOTAVAIL: the
/// worker has not closed it), tries again until the deadline.
async fn connect(
    target: SocketAddr,
    source: SocketAddr,
    deadline: Instant,
) -> Result<Option<TcpStream>, String> {
    loop {
        let socket = conn::bound_socket(target, source).map_err(|e| {
            format!(
                "cannot bind probe source {source}: {e} (another socket holds that port; \
                 choose another --probe-port-base)"
            )
        })?;
        let socket = TcpSocket::from_std_stream(socket.into());
        match tokio::time::timeout_at(deadline, socket.connect(target)).await {
            Ok(Ok(stream)) => return Ok(Some(stream)),
            Ok(Err(e)) if e.raw_os_error() == Some(libc::EADDRNOTAVAIL) => {
                if Instant::now() + PORT_RETRY >= deadline {
                    return Err(format!(
                        "the probe port {source} still holds ck's earlier connection to the \
                         worker, which has not closed it (or TCP timestamps are off, \
                         net.ipv4.tcp_timestamps=0, and the port waits out TIME_WAIT)"
                    ));
                }
                tokio::time::sleep(PORT_RETRY).await;
            }
            Ok(Err(e)) => return Err(format!("connect {target}: {e}")),
            Err(_) => return Ok(None),
        }
    }
}

/// Sends `GET path` and reads the answer until it is whole (or the worker closes). Writing
/// stays open until then (see the module's note); [`conn::finish`] ends the connection.
async fn ask(stream: &mut TcpStream, path: &str) -> Result<ProbeAnswer, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: ck-probe\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.len() > MAX_ANSWER || complete(&answer) {
            break;
        }
    }
    parse_answer(&answer)
}

/// Whether `answer` holds the whole response: its head, and the body its Content-Length
/// announces, or the last chunk of a chunked body. A body with neither ends when the worker
/// closes.
fn complete(answer: &[u8]) -> bool {
    let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let field = |wanted: &str| {
        head.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case(wanted)
                .then(|| value.trim().to_ascii_lowercase())
        })
    };
    let body = &answer[head_end + 4..];
    if let Some(len) = field("content-length").and_then(|v| v.parse::<usize>().ok()) {
        return body.len() >= len;
    }
    field("transfer-encoding").is_some_and(|v| v.ends_with("chunked"))
        && (body.starts_with(b"0\r\n\r\n") || body.ends_with(b"\r\n0\r\n\r\n"))
}

/// Reads the status and body of an HTTP answer; a non-2xx status is a failure.
fn parse_answer(answer: &[u8]) -> Result<ProbeAnswer, String> {
    let text = String::from_utf8_lossy(answer);
    let status: u16 = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| "no HTTP answer".to_string())?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(ProbeAnswer {
            status: Some(status),
            body,
        })
    } else {
        Err(format!("HTTP {status}: {}", body.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_sources() {
        let t = target_of("0.0.0.0:8080".parse().unwrap());
        assert_eq!(t, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            target_of("[::]:8080".parse().unwrap()),
            "[::1]:8080".parse().unwrap()
        );
        assert_eq!(
            source_of(t, 19800, 3),
            Some("127.0.0.1:19803".parse().unwrap())
        );
        assert_eq!(source_of(t, 65535, 3), None);
    }

    #[test]
    fn answers_parse() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
        assert!(complete(ok));
        assert_eq!(parse_answer(ok).unwrap().body, "ok\n");
        assert!(!complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok\n"
        ));
        let bad = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nunhealthy\n";
        assert!(parse_answer(bad).unwrap_err().contains("503"));
        assert!(parse_answer(b"garbage").is_err());
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nok\n\r\n";
        assert!(!complete(chunked));
        assert!(complete(&[&chunked[..], b"0\r\n\r\n"].concat()));
    }

    /// A server like puma, which drops a request whose client has already shut down writing
    /// (it reads the end right after the request and takes the client for gone), answers ck's
    /// HTTP probe: ck keeps writing open until the answer is read.
    #[tokio::test]
    async fn http_probe_passes_a_server_that_drops_half_closed_clients() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await.unwrap();
            let ended = tokio::time::timeout(Duration::from_millis(100), s.read(&mut buf)).await;
            if matches!(ended, Ok(Ok(0))) {
                return "dropped: the client had left";
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                .await
                .unwrap();
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            "answered"
        });
        let answer = probe(
            target,
            "127.0.0.1:0".parse().unwrap(),
            &ProbeKind::Http("/".into()),
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(server.await.unwrap(), "answered");
        assert_eq!(answer.unwrap().body, "ok\n");
    }

    /// A server that answers each of `n` connections once and reports how reading after its
    /// answer went (the end of the connection, or an error).
    async fn answering_server(n: usize) -> (SocketAddr, tokio::task::JoinHandle<Vec<String>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut after = Vec::new();
            for _ in 0..n {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await.unwrap();
                s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                    .await
                    .unwrap();
                after.push(match s.read(&mut buf).await {
                    Ok(0) => "end".to_string(),
                    Ok(n) => format!("{n} more bytes"),
                    Err(e) => e.to_string(),
                });
            }
            after
        });
        (target, server)
    }

    #[tokio::test]
    async fn http_probe_against_a_local_server() {
        let (target, server) = answering_server(1).await;
        let source = SocketAddr::from(([127, 0, 0, 1], 0));
        let answer = probe(
            target,
            source,
            &ProbeKind::Http("/healthz".into()),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, Some(200));
        assert_eq!(answer.body, "ok\n");
        assert_eq!(server.await.unwrap(), ["end"]);
    }

    /// Probes from one fixed port, one after the other (as the slot's periodic probes are):
    /// each reuses the four-tuple its predecessor left in TIME_WAIT, and the server reads the
    /// end of every connection, never a reset.
    #[tokio::test]
    async fn probes_in_a_row_from_one_port_pass_and_end_politely() {
        let (target, server) = answering_server(3).await;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let source = SocketAddr::from(([127, 0, 0, 1], port));
        let http = ProbeKind::Http("/".into());
        for kind in [&http, &ProbeKind::Tcp, &http] {
            let answer = probe(target, source, kind, Duration::from_secs(2)).await;
            assert!(answer.is_ok(), "{answer:?}");
        }
        assert_eq!(server.await.unwrap(), ["end", "end", "end"]);
    }

    /// A probe whose port still holds ck's open connection to the same socket waits for it
    /// within its timeout, then says so.
    #[tokio::test]
    async fn a_probe_port_still_held_fails_in_time_saying_why() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        let first = probe_once(
            target,
            "127.0.0.1:0".parse().unwrap(),
            &ProbeKind::Tcp,
            Duration::from_secs(2),
        )
        .await;
        assert!(first.answer.is_ok(), "{first:?}");
        let held = first.conn.expect("connected");
        let source = held.local_addr().unwrap();
        let second = probe_once(target, source, &ProbeKind::Tcp, Duration::from_millis(100)).await;
        let why = second.answer.unwrap_err();
        assert!(why.contains("still holds"), "{why}");
        drop(listener);
        drop(held);
    }
}
