//! Readiness without the notify protocol (`--ready auto`): a worker that never says READY=1 is
//! ready as soon as it accepts on its socket, seen from `/proc`: its listening socket in its
//! epoll set (Node's event loop) or a thread blocked in accept() (a thread-per-connection
//! server), long before the grace would take it as ready.

use ck_tests::app::script;
use ck_tests::sys::TempDir;
use ck_tests::{READY_TIMEOUT, burst, local, start};

/// Starts `app` as the only worker with a grace far beyond the test's patience, so that only
/// detection can make it ready, and returns the log line that says why it is ready.
fn ready_reason(what: &str, app: &[&str]) -> String {
    let mut args = vec!["-w", "1", "--ready-grace", "1h", "--"];
    args.extend_from_slice(app);
    let (mut ck, port) = start(what, &args);
    ck.wait_ready(1, READY_TIMEOUT);
    let tally = burst(local(port), 5);
    assert_eq!(tally.ok, 5, "{tally:?}");
    let log = ck.log();
    log.lines()
        .find(|l| l.contains("worker ready"))
        .unwrap_or_else(|| panic!("no ready line:\n{log}"))
        .to_string()
}

#[test]
fn a_node_worker_is_ready_when_its_socket_is_in_its_epoll_set() {
    let app = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/worker.js");
    let line = ready_reason("detect-epoll", &["node", app.to_str().unwrap()]);
    assert!(line.contains("epoll set"), "{line}");
}

/// A server that accepts in a blocking loop on fd 3 and never speaks NOTIFY_SOCKET.
const BLOCKING: &str = r#"
import os, socket
listener = socket.socket(fileno=3)
while True:
    conn, _ = listener.accept()
    conn.recv(4096)
    body = f"slot={os.environ['CK_SLOT']} pid={os.getpid()}\n".encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    conn.close()
"#;

#[test]
fn a_blocking_worker_is_ready_when_a_thread_waits_in_accept() {
    let dir = TempDir::new("detect-accept");
    let server = script(&dir, "server.py", BLOCKING);
    let line = ready_reason("detect-accept", &["python3", server.to_str().unwrap()]);
    assert!(line.contains("accept()"), "{line}");
}
