//! A server that boots slowly and says nothing, for `tests/tests/ready_slow.rs` and `cargo
//! xtask bench ready-slow`: Python on ck's socket (fd 3) that sleeps for its boot, then waits for
//! connections in `poll` and answers `slot=S pid=P`.

use std::path::PathBuf;

use crate::sys::TempDir;

/// A server on fd 3 that boots in `argv[1]` seconds and then waits for connections in `poll`
/// (with a timeout, to see SIGTERM: it stops once no connection came for 100 ms). With
/// `argv[2]`, it says READY=1 at once and answers `GET /healthz` 503 until that file exists.
pub const POLL_SERVER: &str = r#"
import os, select, signal, socket, sys, time
boot = float(sys.argv[1])
health = sys.argv[2] if len(sys.argv) > 2 else None
stopping = False
def stop(*_):
    global stopping
    stopping = True
signal.signal(signal.SIGTERM, stop)
if health:
    addr = os.environ["NOTIFY_SOCKET"]
    addr = "\0" + addr[1:] if addr.startswith("@") else addr
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"READY=1", addr)
time.sleep(boot)
listener = socket.socket(fileno=3)
listener.setblocking(False)
poller = select.poll()
poller.register(listener, select.POLLIN)
def answer(status, body):
    head = b"HTTP/1.1 %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % (status, len(body))
    return head + body
me = f"slot={os.environ['CK_SLOT']} pid={os.getpid()}\n".encode()
while True:
    if not poller.poll(100):
        if stopping:
            break
        continue
    try:
        conn, _ = listener.accept()
    except BlockingIOError:
        continue
    try:
        conn.setblocking(True)
        request = conn.recv(4096)
        if health and request.startswith(b"GET /healthz "):
            up = os.path.exists(health)
            conn.sendall(answer(b"200 OK", b"up\n") if up else answer(b"503 Unavailable", b"booting\n"))
        else:
            conn.sendall(answer(b"200 OK", me))
    except OSError:
        pass  # a client that gave up (a probe past its timeout resets its connection)
    finally:
        conn.close()
"#;

/// Writes [`POLL_SERVER`] as `poll_server.py` in `dir` and returns its path (run it with
/// `python3 PATH BOOT_SECONDS [HEALTH_FILE]`).
pub fn poll_server(dir: &TempDir) -> PathBuf {
    dir.write("poll_server.py", POLL_SERVER, false)
}
