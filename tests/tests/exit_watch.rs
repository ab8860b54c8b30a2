//! The exit watch: ck learns of a worker's death from the kernel's `sched_process_exit`
//! tracepoint, as the process begins to exit, not when its pidfd reports it torn down. A worker
//! with 1 GiB of memory takes the kernel over 100 ms to tear down on these machines: a worker
//! that died on its own is replaced while the old process still exists, with the exit status
//! the kernel will report; a worker ck stops is reported gone only once its process is. Forced
//! to the pidfds (`CK_EXIT_WATCH=pidfd`, the path of a kernel without the tracepoint's
//! `group_dead`), the replacement comes only once the old process is gone.

use std::path::Path;
use std::time::Duration;

use ck_tests::sys::{self, poll_until};
use ck_tests::{Ck, Status, start, start_with_env};
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

/// Starts `-w 1` of [`BIG_WORKER`] with `env` and returns ck and the worker's pid once it is
/// ready, holds its 1 GiB, and (unless `env` forces the pidfds) its exit is watched.
fn big_worker(what: &str, env: &[(&str, &str)]) -> (Ck, u32) {
    let (mut ck, _port) =
        start_with_env(what, &["-w", "1", "--", "python3", "-c", BIG_WORKER], env)
            .expect("start ck");
    let watched = env.is_empty();
    // The watch loads beside the first worker; `ck status` lists the pids in its map.
    let status = ck
        .wait_status(
            "a ready worker (whose exit is watched)",
            Duration::from_secs(20),
            |s| {
                s.slot(0).state == "ready"
                    && s.slot(0).pid.is_some_and(|pid| {
                        !watched || s.exits_watched.as_ref().is_some_and(|w| w.contains(&pid))
                    })
            },
        )
        .expect("wait for the status");
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

/// SIGKILLs slot 0's worker `old`, waits for its replacement, and returns whether `old` still
/// existed when `ck status` first showed the replacement, with the status then.
fn kill_and_replace(ck: &Ck, old: u32) -> (bool, Status) {
    sys::signal(old, Signal::SIGKILL);
    let mut existed = None;
    poll_until(Duration::from_secs(10), Duration::from_millis(1), || {
        let Ok(status) = ck.status() else {
            return false;
        };
        let replaced = status.slot(0).pid.is_some_and(|p| p != old);
        if replaced {
            existed = Some(exists(old));
        }
        replaced
    });
    let status = ck.status().expect("ck status");
    let existed =
        existed.unwrap_or_else(|| panic!("slot 0 was not replaced: {status:#?}\n{}", ck.log()));
    (existed, status)
}

/// The `worker exited` lines of `pid`.
fn exit_lines(ck: &Ck, pid: u32) -> Vec<String> {
    ck.log_lines(&format!("pid={pid} "))
        .into_iter()
        .filter(|l| l.contains("worker exited"))
        .collect()
}

/// Slot 0's last exit is `old`'s SIGKILL, logged in one `worker exited` line as `seen`.
fn assert_killed_once(ck: &Ck, status: &Status, old: u32, seen: &str) {
    assert_eq!(
        status.slot(0).last_exit.as_deref(),
        Some("signal SIGKILL"),
        "{status:#?}"
    );
    // The status may answer before the log line is on disk (ck's log is written by its own
    // thread): wait for it, then give a second report time to show if there were one.
    poll_until(Duration::from_secs(5), Duration::from_millis(20), || {
        !exit_lines(ck, old).is_empty()
    });
    std::thread::sleep(Duration::from_millis(300));
    let exits = exit_lines(ck, old);
    assert_eq!(exits.len(), 1, "{exits:#?}");
    assert!(exits[0].contains(&format!("seen=\"{seen}\"")), "{exits:#?}");
}

#[test]
fn a_killed_worker_is_replaced_while_the_kernel_still_tears_it_down() {
    let (mut ck, old) = big_worker("exitwatch", &[]);
    let (existed, status) = kill_and_replace(&ck, old);
    assert!(
        existed,
        "slot 0 was not replaced while the killed worker {old} still existed: {status:#?}\n{}",
        ck.log()
    );
    // The pidfd's later report is not a second exit: one line, one restart.
    assert_killed_once(&ck, &status, old, "exit tracepoint");
    assert_eq!(status.slot(0).restarts, 1, "{status:#?}");
    // And the zombie is reaped.
    assert!(
        poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
            !exists(old)
        }),
        "the killed worker {old} was never reaped"
    );
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn forced_to_the_pidfds_a_killed_worker_is_replaced_once_it_is_gone() {
    let (mut ck, old) = big_worker("exitpidfd", &[("CK_EXIT_WATCH", "pidfd")]);
    let status = ck.status().expect("ck status");
    assert_eq!(status.exits_watched, None, "{status:#?}");
    let said = ck.log_lines("worker exits are seen when");
    assert_eq!(said.len(), 1, "{said:#?}");
    assert!(said[0].contains("CK_EXIT_WATCH=pidfd"), "{said:#?}");
    let (existed, status) = kill_and_replace(&ck, old);
    assert!(
        !existed,
        "replaced while {old} still existed without the watch: {status:#?}"
    );
    assert_killed_once(&ck, &status, old, "pidfd");
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
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
    )
    .expect("start ck");
    let mut exits = Vec::new();
    let seen = poll_until(Duration::from_secs(15), Duration::from_millis(50), || {
        exits = ck.log_lines("worker exited");
        exits.iter().any(|l| l.contains("seen=\"exit tracepoint\""))
    });
    assert!(seen, "no exit seen from the tracepoint: {exits:#?}");
    for line in &exits {
        assert!(line.contains("reason=exit 3"), "{line}");
    }
    let status = ck.status().expect("ck status");
    assert_eq!(
        status.slot(0).last_exit.as_deref(),
        Some("exit 3"),
        "{status:#?}"
    );
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn a_worker_ck_stops_is_gone_when_ck_says_so() {
    let (mut ck, pid) = big_worker("exitstop", &[]);
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
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
