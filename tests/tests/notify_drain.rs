//! A worker's own word: `STOPPING=1` on NOTIFY_SOCKET takes it out of the active set (its socket
//! stays open and it keeps serving), and `READY=1` afterwards puts it back. The worker on slot 1
//! is the repository's example Python worker, told to say STOPPING=1 0.5 s after READY=1 and
//! READY=1 again at 2.5 s.

use std::time::Duration;

use ck_tests::app::script;
use ck_tests::http::burst_without;
use ck_tests::sys::{TempDir, pid_alive};
use ck_tests::{burst_pinned, ck_bin, local, start_ready};

/// The repository's example Python worker (`examples/worker.py`), driven to drain itself for a
/// while: it serves, says READY=1, STOPPING=1 0.5 s later, and READY=1 again at 2.5 s.
const WORKER: &str = r#"
import sys, threading, time
sys.path.insert(0, sys.argv[1])
from worker import inherited_server, sd_notify

server = inherited_server()
threading.Thread(target=server.serve_forever, daemon=True).start()
sd_notify("READY=1")
time.sleep(0.5)
sd_notify("STOPPING=1")
time.sleep(2.0)
sd_notify("READY=1")
threading.Event().wait()
"#;

#[test]
fn stopping_then_ready_drains_and_restores_a_worker() {
    let dir = TempDir::new("notify-drain");
    dir.write("drain.py", WORKER, false);
    let worker = dir.path().join("drain.py");
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "if [ \"$CK_SLOT\" = 1 ]; then exec python3 '{}' '{}'; fi\nexec '{}' demo-worker",
            worker.display(),
            examples.display(),
            ck_bin().display()
        ),
    );
    let app = app.to_str().expect("UTF-8 temp path");
    let (mut ck, port, started) =
        start_ready("stopping", 2, &["--policy", "round-robin", "--", app])
            .expect("start a ready ck");
    let pid = started.worker_pid(1);
    let addr = local(port);

    let drained = ck
        .wait_status("slot 1 draining", Duration::from_secs(5), |s| {
            s.slot(1).state == "draining" && s.active == vec![0]
        })
        .expect("wait for the status");
    assert_eq!(
        drained.worker_pid(1),
        pid,
        "slot 1 was restarted: {drained:#?}"
    );
    burst_without(burst_pinned, addr, 100, 1, "STOPPING=1");
    assert!(pid_alive(pid), "the draining worker exited");

    let back = ck
        .wait_status("slot 1 ready again", Duration::from_secs(10), |s| {
            s.slot(1).state == "ready" && s.active.len() == 2
        })
        .expect("wait for the status");
    assert_eq!(back.worker_pid(1), pid, "slot 1 was restarted: {back:#?}");
    let tally = burst_pinned(addr, 100);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert_eq!((tally.slot(0), tally.slot(1)), (50, 50), "{tally:?}");
    assert!(ck.log().contains("reason=\"STOPPING=1\""), "{}", ck.log());
}
