//! The exit watch: ck learns of a worker's death from the kernel's `sched_process_exit`
//! tracepoint, as the process begins to exit, not when its pidfd reports it torn down. A worker
//! with 1 GiB of memory takes the kernel over 100 ms to tear down on these machines: a worker
//! that died on its own is replaced while the old process still exists, with the exit status
//! the kernel will report; a worker ck stops is reported gone only once its process is.

use std::path::Path;
use std::time::Duration;

use ck_tests::start;
use ck_tests::sys::{self, poll_until};
use nix::sys::signal::Signal;

/// A worker that fills 1 GiB of memory (so that the kernel takes a while to free it), then
/// accepts on its socket (ck's fd 3): ready by the accept probe, so that its death is a served
/// worker's, replaced at once (not a boot crash, which waits for the backoff).
const BIG_WORKER: &str = "b = b'x' * (1 << 30)\nimport socket\ns = socket.socket(fileno=3)\n\
                          while True:\n    c, _ = s.accept()\n    c.close()";

/// Whether process `pid` exists (running, exiting, or a zombie not reaped yet).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Resident memory of `pid` in bytes (0 when it cannot be read).
fn resident(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Starts `-w 1` of [`BIG_WORKER`] and returns ck and the worker's pid once it is ready and
/// holds its 1 GiB.
fn big_worker(what: &str) -> (ck_tests::ck::Ck, u32) {
    let (mut ck, _port) = start(what, &["-w", "1", "--", "python3", "-c", BIG_WORKER]);
    // The watch loads beside the first worker; `ck status` lists the pids in its map.
    let status = ck.wait_status(
        "a ready worker whose exit is watched",
        Duration::from_secs(20),
        |s| {
            s.slot(0).state == "ready"
                && s.slot(0)
                    .pid
                    .is_some_and(|pid| s.exits_watched.as_ref().is_some_and(|w| w.contains(&pid)))
        },
    );
    let pid = status.worker_pid(0);
    assert!(
        poll_until(Duration::from_secs(20), Duration::from_millis(50), || {
            resident(pid) > 1 << 30
        }),
        "worker {pid} did not fill 1 GiB: {} bytes resident",
        resident(pid)
    );
    (ck, pid)
}

#[test]
fn a_killed_worker_is_replaced_while_the_kernel_still_tears_it_down() {
    let (mut ck, old) = big_worker("exitwatch");
    sys::signal(old, Signal::SIGKILL);
    let mut replaced_while_old_existed = None;
    poll_until(Duration::from_secs(10), Duration::from_millis(1), || {
        let Ok(status) = ck.try_status() else {
            return false;
        };
        let replaced = status.slot(0).pid.is_some_and(|p| p != old);
        if replaced {
            replaced_while_old_existed = Some(exists(old));
        }
        replaced
    });
    let status = ck.status();
    assert_eq!(
        replaced_while_old_existed,
        Some(true),
        "slot 0 was not replaced while the killed worker {old} still existed: {status:#?}\n{}",
        ck.log()
    );
    assert_eq!(
        status.slot(0).last_exit.as_deref(),
        Some("signal SIGKILL"),
        "{status:#?}"
    );
    let seen = ck.log_lines(&format!("pid={old} "));
    assert!(
        seen.iter()
            .any(|l| l.contains("worker exited") && l.contains("seen=\"exit tracepoint\"")),
        "the exit of {old} was not seen from the tracepoint: {seen:#?}"
    );
    // The pidfd's later report is not a second exit: one line, one restart.
    assert_eq!(
        seen.iter().filter(|l| l.contains("worker exited")).count(),
        1,
        "{seen:#?}"
    );
    assert_eq!(status.slot(0).restarts, 1, "{status:#?}");
    // And the zombie is reaped.
    assert!(
        poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
            !exists(old)
        }),
        "the killed worker {old} was never reaped"
    );
    ck.sigterm();
    ck.wait_clean_exit();
}

#[test]
fn an_exit_code_reads_from_the_tracepoint_as_waitid_reports_it() {
    // The first worker may exit before the watch is loaded (its exit is then the pidfd's);
    // its replacements' exits are the tracepoint's.
    let (mut ck, _port) = start(
        "exitcode",
        &[
            "-w",
            "1",
            "--restart-backoff",
            "100ms",
            "--",
            "sh",
            "-c",
            "sleep 0.3; exit 3",
        ],
    );
    let mut exits = Vec::new();
    let seen = poll_until(Duration::from_secs(15), Duration::from_millis(50), || {
        exits = ck.log_lines("worker exited");
        exits.iter().any(|l| l.contains("seen=\"exit tracepoint\""))
    });
    assert!(seen, "no exit seen from the tracepoint: {exits:#?}");
    for line in &exits {
        assert!(line.contains("reason=exit 3"), "{line}");
    }
    let status = ck.status();
    assert_eq!(
        status.slot(0).last_exit.as_deref(),
        Some("exit 3"),
        "{status:#?}"
    );
    ck.sigterm();
    ck.wait_clean_exit();
}

#[test]
fn a_worker_ck_stops_is_gone_when_ck_says_so() {
    let (mut ck, pid) = big_worker("exitstop");
    ck.sigterm();
    ck.wait_clean_exit();
    assert!(
        !exists(pid),
        "ck exited while its worker {pid} still existed"
    );
    let exits = ck.log_lines(&format!("pid={pid} "));
    assert!(
        exits
            .iter()
            .any(|l| l.contains("worker exited") && l.contains("seen=\"pidfd\"")),
        "{exits:#?}"
    );
}
