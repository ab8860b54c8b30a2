//! A worker's own word: `STOPPING=1` on NOTIFY_SOCKET takes it out of the active set (its socket
//! stays open and it keeps serving), and `READY=1` afterwards puts it back. The worker on slot 1
//! is a small Python server that says STOPPING=1 0.5 s after READY=1 and READY=1 again at 2.5 s.

use std::time::Duration;

use ck_tests::app::script;
use ck_tests::http::burst_without;
use ck_tests::sys::{TempDir, pid_alive};
use ck_tests::{burst_pinned, ck_bin, local, start_ready};

/// A socket-activated HTTP worker that answers `slot=S pid=P` and drains itself for a while.
const WORKER: &str = r#"
import http.server, os, socket, threading, time

def notify(msg):
    addr = os.environ["NOTIFY_SOCKET"]
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(msg.encode(), addr)

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = f"slot={os.environ['CK_SLOT']} pid={os.getpid()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

class Server(http.server.ThreadingHTTPServer):
    def server_bind(self):
        pass
    def server_activate(self):
        pass

server = Server(("", 0), Handler, bind_and_activate=False)
server.socket = socket.socket(fileno=3)
threading.Thread(target=server.serve_forever, daemon=True).start()
notify("READY=1")
time.sleep(0.5)
notify("STOPPING=1")
time.sleep(2.0)
notify("READY=1")
threading.Event().wait()
"#;

#[test]
fn stopping_then_ready_drains_and_restores_a_worker() {
    let dir = TempDir::new("notify-drain");
    dir.write("worker.py", WORKER, false);
    let worker = dir.path().join("worker.py");
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "if [ \"$CK_SLOT\" = 1 ]; then exec python3 '{}'; fi\nexec '{}' demo-worker",
            worker.display(),
            ck_bin().display()
        ),
    );
    let app = app.to_str().expect("UTF-8 temp path");
    let (mut ck, port, started) =
        start_ready("stopping", 2, &["--policy", "round-robin", "--", app]);
    let pid = started.worker_pid(1);
    let addr = local(port);

    let drained = ck.wait_status("slot 1 draining", Duration::from_secs(5), |s| {
        s.slot(1).state == "draining" && s.active == vec![0]
    });
    assert_eq!(
        drained.worker_pid(1),
        pid,
        "slot 1 was restarted: {drained:#?}"
    );
    burst_without(burst_pinned, addr, 100, 1, "STOPPING=1");
    assert!(pid_alive(pid), "the draining worker exited");

    let back = ck.wait_status("slot 1 ready again", Duration::from_secs(10), |s| {
        s.slot(1).state == "ready" && s.active.len() == 2
    });
    assert_eq!(back.worker_pid(1), pid, "slot 1 was restarted: {back:#?}");
    let tally = burst_pinned(addr, 100);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert_eq!((tally.slot(0), tally.slot(1)), (50, 50), "{tally:?}");
    assert!(ck.log().contains("reason=\"STOPPING=1\""), "{}", ck.log());
}
