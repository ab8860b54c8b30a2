//! Readiness without the notify protocol (`--ready auto`): a worker that never says READY=1 is
//! ready as soon as it accepts on its socket, long before the grace would take it as ready.
//! Once the program steers, ck sees it by the accept probe: a connection left in the starting
//! worker's queue, and the queue's length. Before that, where the probe cannot work (the
//! worker set `TCP_DEFER_ACCEPT`), or with `CK_READY_DETECT=proc`, the `/proc` scan sees it: its
//! listening socket in its epoll set (Node's event loop), a thread blocked in accept() (a
//! thread-per-connection server) or in poll().

use std::time::Duration;

use ck_tests::app::script;
use ck_tests::slow_boot::poll_server;
use ck_tests::sys::{TempDir, free_port, kill_hard};
use ck_tests::{Ck, READY_TIMEOUT, burst, instance_name, local, probe_base_for};

/// The `/proc` scan alone.
const PROC_ONLY: [(&str, &str); 1] = [(ck::supervisor::READY_DETECT_ENV, "proc")];

/// The `worker ready` lines of ck's log.
fn ready_lines(ck: &Ck) -> Vec<String> {
    ck.log()
        .lines()
        .filter(|l| l.contains("worker ready"))
        .map(str::to_string)
        .collect()
}

/// The `boot_ms=` of a `worker ready` line.
fn boot_ms(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("boot_ms=")?.parse().ok())
        .unwrap_or_else(|| panic!("no boot_ms in {line}"))
}

/// Starts `app` (none: the demo worker) as the only worker (with `env`) and a grace far beyond the test's patience, so
/// that only detection can make it ready; waits until it is ready and serves.
fn start_one(what: &str, app: &[&str], env: &[(&str, &str)]) -> (Ck, u16) {
    let port = free_port();
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let mut args = vec!["--port", &port_text, "--probe-port-base", &base];
    args.extend([
        "-w",
        "1",
        "--ready-grace",
        "1h",
        "--ready-timeout",
        "90s",
        "--",
    ]);
    args.extend_from_slice(app);
    let mut ck = Ck::start_with_env(&instance_name(what, port), &args, env).expect("start ck");
    ck.wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let tally = burst(local(port), 5);
    assert_eq!(tally.ok, 5, "{tally:?}");
    (ck, port)
}

/// SIGKILLs the worker (the program steers by now) and returns the replacement's `worker
/// ready` line, once it serves.
fn replacement_ready(ck: &mut Ck, port: u16) -> String {
    let old = ck.status().expect("ck status").worker_pid(0);
    kill_hard(old);
    let status = ck
        .wait_status("the replacement ready", Duration::from_secs(90), |s| {
            s.ready_count() == 1 && s.worker_pid(0) != old
        })
        .expect("wait for the status");
    let tally = burst(local(port), 5);
    assert_eq!(tally.ok, 5, "{tally:?}");
    let pid = format!("pid={}", status.worker_pid(0));
    ready_lines(ck)
        .into_iter()
        .find(|l| l.contains(&pid))
        .unwrap_or_else(|| panic!("no ready line for {pid}:\n{}", ck.log()))
}

fn node_app() -> String {
    let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker.js");
    app.to_str().unwrap().to_string()
}

#[test]
fn a_node_worker_is_ready_when_its_socket_is_in_its_epoll_set() {
    let node = node_app();
    let (mut ck, port) = start_one("detect-epoll", &["node", &node], &PROC_ONLY);
    let line = replacement_ready(&mut ck, port);
    assert!(line.contains("epoll set"), "{line}");
    assert!(!line.contains("accept probe"), "{line}");
}

#[test]
fn a_replaced_node_worker_is_ready_when_it_accepts_the_probe() {
    let node = node_app();
    let (mut ck, port) = start_one("detect-probe", &["node", &node], &[]);
    for _ in 0..2 {
        let line = replacement_ready(&mut ck, port);
        assert!(line.contains("(accept probe)"), "{line}");
    }
}

/// What the Python servers below do with a connection: answer `slot=S pid=P`, or drop a client
/// that gave up (ck's accept probe is one).
const SERVE: &str = r#"
import os, select, socket
def serve(conn):
    try:
        conn.recv(4096)
        body = f"slot={os.environ['CK_SLOT']} pid={os.getpid()}\n".encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    conn.close()
listener = socket.socket(fileno=3)
"#;

/// Writes a Python server: [`SERVE`] followed by `body`, its accept loop.
fn python_server(dir: &TempDir, body: &str) -> String {
    let server = script(dir, "server.py", &format!("{SERVE}{body}"));
    server.to_str().unwrap().to_string()
}

/// A server that accepts in a blocking loop on fd 3 and never speaks NOTIFY_SOCKET.
const BLOCKING: &str = r#"
while True:
    serve(listener.accept()[0])
"#;

#[test]
fn a_blocking_worker_is_ready_when_a_thread_waits_in_accept() {
    let dir = TempDir::new("detect-accept");
    let server = python_server(&dir, BLOCKING);
    let app = ["python3", server.as_str()];
    let (mut ck, port) = start_one("detect-accept", &app, &PROC_ONLY);
    let line = replacement_ready(&mut ck, port);
    assert!(line.contains("accept()"), "{line}");
}

#[test]
fn a_slow_silent_server_is_ready_by_the_probe_only_after_its_boot() {
    let dir = TempDir::new("detect-probe-slow");
    let server = poll_server(&dir);
    let app = ["python3", server.to_str().unwrap(), "3"];
    let (mut ck, port) = start_one("detect-probe-slow", &app, &[]);
    let line = replacement_ready(&mut ck, port);
    assert!(line.contains("(accept probe)"), "{line}");
    assert!(boot_ms(&line) >= 3000, "ready before it booted: {line}");
}

/// A server that sets `TCP_DEFER_ACCEPT` on its socket (a connection is queued only once it
/// carries data, so the probe's never is) and then waits in poll().
const DEFER_ACCEPT: &str = r#"
listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 30)
poller = select.poll()
poller.register(listener, select.POLLIN)
while True:
    poller.poll()
    serve(listener.accept()[0])
"#;

#[test]
fn with_tcp_defer_accept_the_proc_scan_decides() {
    let dir = TempDir::new("detect-defer");
    let server = python_server(&dir, DEFER_ACCEPT);
    let app = ["python3", server.as_str()];
    let (mut ck, port) = start_one("detect-defer", &app, &[]);
    let line = replacement_ready(&mut ck, port);
    assert!(line.contains("poll()"), "{line}");
}

/// A worker that speaks the notify protocol (the demo worker) becomes ready on READY=1; an
/// accept probe sent while it was still silent is reset then, so it holds no connection of ck's
/// (the kernel's open count of its slot goes back to 0).
#[test]
fn a_worker_that_says_ready_keeps_no_probe_connection() {
    let (mut ck, port) = start_one("detect-notify", &[], &[]);
    let line = replacement_ready(&mut ck, port);
    assert!(line.contains("READY=1"), "{line}");
    ck.wait_status("no open connection", Duration::from_secs(10), |s| {
        s.slot(0).connections == Some(0)
    })
    .expect("wait for the status");
}
