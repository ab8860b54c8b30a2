//! Tests of the load client against a small loopback HTTP server that answers `slot=1 pid=42`
//! (or misbehaves on purpose), and of the response parsing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use super::client::{Head, parse_body, parse_head};
use super::*;

const SECOND: Duration = Duration::from_secs(1);

/// How the test server answers.
#[derive(Debug, Clone, Copy)]
enum Behavior {
    /// `200` with `slot=1 pid=42\n`.
    Answer,
    /// Like `Answer`, but closes a keep-alive connection idle for this long.
    CloseWhenIdle(Duration),
    /// Reads requests, never answers.
    Silent,
    /// Answers with this status.
    Status(u16),
    /// Answers `200` with this body.
    Body(&'static str),
}

/// A loopback HTTP/1.1 server on a runtime of its own, counting connections and requests.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    _runtime: Runtime,
}

impl Server {
    fn start(behavior: Behavior) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let (conns, reqs) = (connections.clone(), requests.clone());
        runtime.spawn(async move {
            for _ in 0..100_000 {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                conns.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(serve(stream, behavior, reqs.clone()));
            }
        });
        Server {
            addr,
            connections,
            requests,
            _runtime: runtime,
        }
    }

    fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

async fn serve(mut stream: TcpStream, behavior: Behavior, requests: Arc<AtomicU64>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    for served in 0..1_000_000 {
        let wait = match behavior {
            Behavior::CloseWhenIdle(idle) if served > 0 => idle,
            _ => Duration::from_secs(10),
        };
        let mut head_end = None;
        for _ in 0..1000 {
            head_end = buf.windows(4).position(|w| w == b"\r\n\r\n");
            if head_end.is_some() {
                break;
            }
            match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
        let Some(end) = head_end else { return };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end + 4);
        assert!(head.starts_with("get / http/1.1\r\n"), "{head}");
        assert!(head.contains("\r\nhost: ck"), "{head}");
        requests.fetch_add(1, Ordering::Relaxed);
        let close = head.contains("connection: close");
        let (status, body) = match behavior {
            Behavior::Silent => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                return;
            }
            Behavior::Answer | Behavior::CloseWhenIdle(_) => (200, "slot=1 pid=42\n"),
            Behavior::Status(status) => (status, "no\n"),
            Behavior::Body(body) => (200, body),
        };
        let response = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
        );
        if stream.write_all(response.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

/// An address where nothing listens.
fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn counts_answers_on_keep_alive_connections() {
    let server = Server::start(Behavior::Answer);
    let report = run(LoadSpec::for_requests(server.addr, Mode::KeepAlive, 4, 200));
    assert_eq!(
        (report.ok, report.failed(), report.retried),
        (200, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.by_slot.get("1"), Some(&200));
    assert_eq!(report.by_slot.len(), 1);
    assert_eq!(report.by_pid.get(&42), Some(&200));
    assert_eq!(report.answers.len(), 200);
    assert!(report.answers.iter().all(|&(_, pid)| pid == 42));
    assert!(report.answers.is_sorted_by_key(|&(at, _)| at));
    assert_eq!(report.samples.len(), 200);
    assert!(report.samples.is_sorted_by_key(|s| s.at_us));
    assert!(
        report
            .samples
            .iter()
            .all(|s| s.latency() > Duration::ZERO && s.latency() <= s.at()),
        "{:?}",
        report.samples
    );
    assert_eq!(report.latency.len(), 200);
    assert!(report.p50() > Duration::ZERO);
    assert!(report.p50() <= report.p99() && report.p99() <= report.p999());
    assert!(report.rps() > 0.0);
    assert!(
        report
            .summary()
            .starts_with("ok=200 refused=0 reset=0 timeout=0 other=0")
    );
    assert_eq!(server.requests(), 200);
    let connections = server.connections();
    assert!((1..=4).contains(&connections), "{connections} connections");
}

#[test]
fn new_connection_mode_opens_one_connection_per_request() {
    let server = Server::start(Behavior::Answer);
    let report = run(LoadSpec::for_requests(
        server.addr,
        Mode::NewConnection,
        4,
        50,
    ));
    assert_eq!(
        (report.ok, report.failed()),
        (50, 0),
        "{}",
        report.summary()
    );
    assert_eq!((server.requests(), server.connections()), (50, 50));
}

#[test]
fn retries_when_the_server_closed_an_idle_connection() {
    let server = Server::start(Behavior::CloseWhenIdle(Duration::from_millis(20)));
    // Each connection sends every 100 ms: the server has closed it by then.
    let spec = LoadSpec {
        rate: Some(20.0),
        ..LoadSpec::for_requests(server.addr, Mode::KeepAlive, 2, 12)
    };
    let report = run(spec);
    assert_eq!((report.ok, report.failed()), (12, 0), "{report:?}");
    assert!(report.retried >= 6, "{}", report.summary());
    assert!(server.connections() >= 8, "{}", server.connections());
}

#[test]
fn without_retry_a_closed_idle_connection_is_a_failure_like_in_wrk() {
    let server = Server::start(Behavior::CloseWhenIdle(Duration::from_millis(20)));
    let spec = LoadSpec {
        rate: Some(20.0),
        retry: false,
        ..LoadSpec::for_requests(server.addr, Mode::KeepAlive, 2, 12)
    };
    let report = run(spec);
    assert_eq!(report.retried, 0, "{}", report.summary());
    assert!(report.reset >= 6, "{}", report.summary());
    assert_eq!(report.ok + report.failed(), 12, "{}", report.summary());
    // Each failure names the connection it was on: a client port of the load's own.
    assert_eq!(report.failed_on.len() as u64, report.failed());
    assert!(
        report
            .failed_on
            .iter()
            .all(|(_, port)| port.is_some_and(|p| p != server.addr.port())),
        "{:?}",
        report.failed_on
    );
}

#[test]
fn never_retries_in_new_connection_mode() {
    let report = run(LoadSpec::for_requests(
        closed_port(),
        Mode::NewConnection,
        2,
        10,
    ));
    assert_eq!((report.refused, report.retried, report.ok), (10, 0, 0));
}

#[test]
fn counts_refused_connections() {
    let report = run(LoadSpec::for_requests(
        closed_port(),
        Mode::KeepAlive,
        2,
        10,
    ));
    assert_eq!(
        (report.refused, report.failed(), report.ok),
        (10, 10, 0),
        "{report:?}"
    );
    assert_eq!(report.failures.len(), 10);
    assert!(
        report
            .failures
            .iter()
            .all(|&(_, kind)| kind == FailureKind::Refused)
    );
    assert_eq!(report.failures_within(Duration::ZERO, 10 * SECOND), 10);
    // Refused: no connection was made, so none is named.
    assert!(report.failed_on.iter().all(|(_, port)| port.is_none()));
    assert!(!report.errors.is_empty() && report.errors.len() <= 20);
    assert!(report.errors[0].contains("refused"), "{:?}", report.errors);
    assert_eq!(report.p99(), Duration::ZERO);
}

#[test]
fn times_out_on_a_silent_server() {
    let server = Server::start(Behavior::Silent);
    let spec = LoadSpec {
        timeout: Duration::from_millis(200),
        ..LoadSpec::for_requests(server.addr, Mode::KeepAlive, 2, 4)
    };
    let report = run(spec);
    assert_eq!((report.timeout, report.failed()), (4, 4), "{report:?}");
    assert!(
        report.elapsed >= Duration::from_millis(350),
        "{:?}",
        report.elapsed
    );
    assert!(report.elapsed < 3 * SECOND, "{:?}", report.elapsed);
}

#[test]
fn paces_at_the_requested_rate() {
    let server = Server::start(Behavior::Answer);
    let spec = LoadSpec {
        rate: Some(200.0),
        ..LoadSpec::for_duration(server.addr, Mode::KeepAlive, 4, SECOND)
    };
    let report = run(spec);
    assert_eq!(report.failed(), 0, "{report:?}");
    assert!((150..=250).contains(&report.ok), "{}", report.summary());
}

#[test]
fn stops_early_when_asked() {
    let server = Server::start(Behavior::Answer);
    let begin = Instant::now();
    let handle = start(LoadSpec::for_duration(
        server.addr,
        Mode::KeepAlive,
        2,
        30 * SECOND,
    ));
    std::thread::sleep(Duration::from_millis(200));
    handle.stop();
    let report = handle.join();
    assert!(begin.elapsed() < 5 * SECOND, "{:?}", begin.elapsed());
    assert!(
        report.ok > 0 && report.failed() == 0,
        "{}",
        report.summary()
    );
}

#[test]
fn other_statuses_and_bodies() {
    let server = Server::start(Behavior::Status(503));
    let report = run(LoadSpec::for_requests(server.addr, Mode::KeepAlive, 1, 5));
    assert_eq!((report.other, report.ok), (5, 0), "{report:?}");
    assert!(
        report.errors[0].contains("status 503"),
        "{:?}",
        report.errors
    );
    // A non-2xx answer does not spoil the connection.
    assert_eq!(server.connections(), 1);

    let server = Server::start(Behavior::Body("hello\n"));
    let report = run(LoadSpec::for_requests(server.addr, Mode::KeepAlive, 1, 5));
    assert_eq!(report.ok, 5);
    assert_eq!(report.by_slot.get("?"), Some(&5));
    assert!(report.by_pid.is_empty());
}

#[test]
fn get_once_answers_and_fails() {
    let server = Server::start(Behavior::Answer);
    assert_eq!(get_once(server.addr, SECOND), Ok(("1".to_string(), 42)));
    assert_eq!(server.connections(), 1);
    assert_eq!(get_once(closed_port(), SECOND), Err(FailureKind::Refused));
    let silent = Server::start(Behavior::Silent);
    let timeout = Duration::from_millis(200);
    assert_eq!(get_once(silent.addr, timeout), Err(FailureKind::Timeout));
    let odd = Server::start(Behavior::Body("hello\n"));
    assert_eq!(get_once(odd.addr, SECOND), Err(FailureKind::Other));
}

#[test]
#[should_panic(expected = "duration or a number of requests")]
fn a_spec_needs_an_end() {
    let spec = LoadSpec {
        duration: None,
        ..LoadSpec::for_duration(closed_port(), Mode::KeepAlive, 1, SECOND)
    };
    start(spec);
}

#[test]
fn parses_response_heads() {
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
    assert_eq!(
        parse_head(ok),
        Ok(Some(Head {
            status: 200,
            head_len: 38,
            body_len: 5,
            close: false
        }))
    );
    assert_eq!(parse_head(&ok[..20]), Ok(None));
    let close = b"HTTP/1.1 503 Busy\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n";
    assert!(matches!(parse_head(close), Ok(Some(h)) if h.close && h.status == 503));
    let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
    assert!(matches!(parse_head(old), Ok(Some(h)) if h.close));
    let no_length = b"HTTP/1.1 200 OK\r\n\r\n";
    assert!(parse_head(no_length).is_err());
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert!(parse_head(chunked).is_err());
    assert!(parse_head(b"SSH-2.0-OpenSSH\r\n").is_err());
    assert!(parse_head(b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n").is_err());
}

#[test]
fn parses_demo_bodies() {
    assert_eq!(parse_body(b"slot=3 pid=1234\n"), (Some("3"), Some(1234)));
    assert_eq!(parse_body(b"slot=web-1 pid=7"), (Some("web-1"), Some(7)));
    assert_eq!(parse_body(b"hello\n"), (None, None));
    assert_eq!(parse_body(b"slot= pid=x\n"), (None, None));
}
