//! Tests of the demo worker: its server over real loopback connections, and `run` end to end
//! in a child process started the way `ck run` starts a worker. The fault switches are
//! tested in [`faults`].
mod faults;

use std::{future::Future, time::Instant};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

use super::*;

/// A response as a client sees it.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, v)| v.as_str())
    }
}

/// Splits the first complete response off `buf` (`Content-Length` bodies, none for HEAD).
fn take_response(buf: &mut Vec<u8>, head_only: bool) -> Option<Response> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8(buf[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| l.split_once(": ").unwrap())
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let mut response = Response {
        status,
        headers,
        body: String::new(),
    };
    let length: usize = response.header("content-length").unwrap().parse().unwrap();
    let length = if head_only { 0 } else { length };
    if buf.len() < end + 4 + length {
        return None;
    }
    response.body = String::from_utf8(buf[end + 4..end + 4 + length].to_vec()).unwrap();
    buf.drain(..end + 4 + length);
    Some(response)
}

/// Fails the test instead of hanging.
async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    let limit = Duration::from_secs(10);
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A client connection with its receive buffer.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, text: &str) {
        self.stream.write_all(text.as_bytes()).await.unwrap();
    }

    async fn response(&mut self, head_only: bool) -> Response {
        within("response", async {
            loop {
                if let Some(response) = take_response(&mut self.buf, head_only) {
                    return response;
                }
                let mut chunk = [0; 4096];
                let n = self.stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "EOF before a full response: {:?}", self.buf);
                self.buf.extend_from_slice(&chunk[..n]);
            }
        })
        .await
    }

    async fn get(&mut self, path: &str) -> Response {
        self.send(&format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n"))
            .await;
        self.response(false).await
    }

    async fn expect_eof(&mut self) {
        let mut chunk = [0; 64];
        let n = within("EOF", self.stream.read(&mut chunk)).await;
        assert!(matches!(n, Ok(0)), "expected EOF, got {n:?}");
        assert!(self.buf.is_empty(), "unread: {:?}", self.buf);
    }
}

struct Server {
    addr: SocketAddr,
    stop: crate::close::Trigger,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Server::start_on(listener, false)
    }

    fn start_on(listener: TcpListener, stopped: bool) -> Server {
        Server::start_with(listener, stopped, Faults::default())
    }

    fn start_with(listener: TcpListener, stopped: bool, faults: Faults) -> Server {
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = crate::close::channel();
        if stopped {
            stop.trigger();
        }
        let task = tokio::spawn(serve(vec![listener], identity(), faults, stop_rx));
        Server { addr, stop, task }
    }

    async fn finished(self) {
        within("serve to return", self.task).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn get_root_answers_slot_line() {
    let server = Server::start().await;
    let mut client = Client::connect(server.addr).await;
    let response = client.get("/").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.body, "slot=7 pid=1234\n");
    assert_eq!(response.header("content-type"), Some("text/plain"));
    assert_eq!(response.header("content-length"), Some("16"));
    assert_eq!(response.header("connection"), None);
    assert!(response.header("date").unwrap().ends_with(" GMT"));
}

#[tokio::test]
async fn keep_alive_serves_several_requests() {
    let server = Server::start().await;
    let mut client = Client::connect(server.addr).await;
    assert_eq!(client.get("/").await.body, "slot=7 pid=1234\n");
    assert_eq!(client.get("/healthz").await.body, "ok\n");
    assert_eq!(client.get("/nope").await.status, 404);
    client.send("HEAD / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let head = client.response(true).await;
    assert_eq!(
        (head.status, head.header("content-length")),
        (200, Some("16"))
    );
    assert_eq!(client.get("/?q=1").await.status, 200);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let server = Server::start().await;
    let mut client = Client::connect(server.addr).await;
    client
        .send(
            "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n\
             POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello\
             GET /x HTTP/1.1\r\nHost: t\r\n\r\n\
             GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .await;
    assert_eq!(client.response(false).await.body, "ok\n");
    let post = client.response(false).await;
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
    assert_eq!(client.response(false).await.status, 404);
    let last = client.response(false).await;
    assert_eq!(last.body, "slot=7 pid=1234\n");
    assert_eq!(last.header("connection"), Some("close"));
    client.expect_eof().await;
}

#[tokio::test]
async fn http10_expect_and_errors() {
    let server = Server::start().await;
    let mut client = Client::connect(server.addr).await;
    client.send("GET / HTTP/1.0\r\n\r\n").await;
    assert_eq!(
        client.response(false).await.header("connection"),
        Some("close")
    );
    client.expect_eof().await;

    let mut client = Client::connect(server.addr).await;
    client
        .send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await;
    assert_eq!(
        client.response(false).await.header("connection"),
        Some("keep-alive")
    );
    client.send("POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n").await;
    let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = [0; 25];
    within("100 Continue", client.stream.read_exact(&mut got))
        .await
        .unwrap();
    assert_eq!(&got, interim);
    client.send("abc").await;
    assert_eq!(client.response(false).await.status, 405);

    let mut client = Client::connect(server.addr).await;
    let huge = format!(
        "GET / HTTP/1.1\r\nHost: t\r\nX: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    client.send(&huge).await;
    let response = client.response(false).await;
    assert_eq!(
        (response.status, response.header("connection")),
        (431, Some("close"))
    );
    client.expect_eof().await;

    let mut client = Client::connect(server.addr).await;
    client.send("GET / HTTP/1.1\r\n\r\n").await;
    let response = client.response(false).await;
    assert_eq!(
        (response.status, response.body.as_str()),
        (400, "bad request: missing Host header\n")
    );
    client.expect_eof().await;
}

#[tokio::test]
async fn shutdown_finishes_requests_in_flight_and_closes_idle_connections() {
    let server = Server::start().await;
    let mut idle = Client::connect(server.addr).await;
    assert_eq!(idle.get("/").await.status, 200);
    let mut in_flight = Client::connect(server.addr).await;
    in_flight
        .send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab")
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    server.stop.trigger();
    idle.expect_eof().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    in_flight.send("cd").await;
    let response = in_flight.response(false).await;
    assert_eq!(
        (response.status, response.header("connection")),
        (405, Some("close"))
    );
    in_flight.expect_eof().await;
    server.finished().await;
}

/// A keep-alive client that sends its next request shortly after shutdown (within the idle
/// grace) gets it answered, with `Connection: close`, instead of a close under its request.
#[tokio::test]
async fn shutdown_answers_the_next_request_of_a_busy_keep_alive_connection() {
    let server = Server::start().await;
    let mut busy = Client::connect(server.addr).await;
    assert_eq!(busy.get("/").await.status, 200);
    server.stop.trigger();
    tokio::time::sleep(crate::close::IDLE_GRACE / 5).await;
    busy.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let response = busy.response(false).await;
    assert_eq!(
        (response.status, response.header("connection")),
        (200, Some("close"))
    );
    busy.expect_eof().await;
    server.finished().await;
}

#[tokio::test]
async fn shutdown_serves_connections_queued_on_the_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The kernel completes these handshakes; nobody has accepted them yet.
    let mut queued = Client::connect(addr).await;
    queued.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let mut slow = Client::connect(addr).await;
    let server = Server::start_on(listener, true);
    // Accepted during the close, before it sent anything: its first request is still served.
    tokio::time::sleep(Duration::from_millis(20)).await;
    slow.send("GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n").await;
    for client in [&mut queued, &mut slow] {
        let response = client.response(false).await;
        assert_eq!(
            (response.status, response.header("connection")),
            (200, Some("close"))
        );
        client.expect_eof().await;
    }
    server.finished().await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener still open"
    );
}

/// The identity every test server answers with.
fn identity() -> Identity {
    Identity {
        slot: "7".into(),
        pid: 1234,
    }
}

/// `run` in a child process given its socket, slot and notify socket the way `ck run` does
/// (bash's `$$` is the pid that `exec` keeps): boots, reports READY after `--ready-after`,
/// serves (with a failing `/healthz`), and on SIGTERM reports STOPPING, closes idle connections and exits 0. The test runs
/// itself again as that child; `CK_TEST_DEMO_CHILD` selects the child role.
#[test]
fn run_speaks_the_worker_protocol() {
    if std::env::var_os("CK_TEST_DEMO_CHILD").is_some() {
        run(DemoOptions {
            ready_after: Duration::from_millis(200),
            fail_health_after: Some(Duration::ZERO),
            ..DemoOptions::default()
        })
        .unwrap();
        return;
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(worker_protocol_parent());
}

async fn worker_protocol_parent() {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    use std::os::{linux::net::SocketAddrExt, unix::net};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    fcntl(&listener, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
    let addr = listener.local_addr().unwrap();
    let name = format!("ck-demo-test/{}", std::process::id());
    let notify_addr = net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let notify = net::UnixDatagram::bind_addr(&notify_addr).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let next_message = || {
        let mut buf = [0; 512];
        let n = notify.recv(&mut buf).expect("notify message");
        String::from_utf8(buf[..n].to_vec()).unwrap()
    };

    let test = concat!(module_path!(), "::run_speaks_the_worker_protocol");
    let test = test.split_once("::").map_or(test, |(_, rest)| rest);
    let started = Instant::now();
    let mut child = Reap(std::process::Command::new("bash")
        .arg("-c")
        .arg(r#"exec 3<&"$CK_TEST_FD" && LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=http exec "$0" "$@""#)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env("CK_TEST_FD", std::os::fd::AsRawFd::as_raw_fd(&listener).to_string())
        .env("CK_TEST_DEMO_CHILD", "1")
        .env("CK_SLOT", "3")
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap());
    let pid = child.0.id();

    assert_eq!(next_message(), "STATUS=booting");
    assert_eq!(next_message(), "READY=1\nSTATUS=serving");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "READY before --ready-after"
    );

    let mut client = Client::connect(addr).await;
    assert_eq!(client.get("/").await.body, format!("slot=3 pid={pid}\n"));
    assert_eq!(client.get("/healthz").await.status, 503);

    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(next_message(), "STOPPING=1");
    client.expect_eof().await;
    let status = within("worker to exit", async {
        loop {
            match child.0.try_wait().unwrap() {
                Some(status) => break status,
                None => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await;
    let mut stderr = String::new();
    let mut pipe = child.0.stderr.take().unwrap();
    std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    for event in [
        format!("listening on {addr}"),
        "faults: /healthz fails from 0ns".into(),
        "stopping on SIGTERM".into(),
    ] {
        let line = format!("demo worker slot=3 pid={pid} {event}\n");
        assert!(stderr.contains(&line), "{stderr}");
    }
}

/// Kills and reaps the worker if the test fails before it exits.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn options_parse_ready_after() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        demo: DemoOptions,
    }
    let cli = Cli::try_parse_from(["ck", "--ready-after", "2.5s"]).unwrap();
    assert_eq!(cli.demo.ready_after, Duration::from_millis(2500));
    assert_eq!(
        Cli::try_parse_from(["ck"]).unwrap().demo,
        DemoOptions::default()
    );
    assert!(Cli::try_parse_from(["ck", "--ready-after", "soon"]).is_err());
}
