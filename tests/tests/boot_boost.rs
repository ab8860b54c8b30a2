//! `--boot-boost`: a replacement for a worker that died boots some nice levels above the
//! fleet's CPU priority, with every thread it starts, and has the fleet's priority back on all
//! of them once it is ready. The first workers, a roll's new workers and `--boot-boost 0` boot
//! at the fleet's priority. Priorities are read from `/proc/TID/stat`, as the scheduler has
//! them.

use std::time::Duration;

use ck_tests::sys::{self, poll_until};
use ck_tests::{Ck, start};
use nix::sys::signal::Signal;

/// A worker on ck's socket (fd 3) that starts a second thread, boots for 2 s, then accepts
/// (ready by the accept probe, so that its death is a served worker's, replaced at once).
const SLOW_WORKER: &str = "import socket, threading, time\n\
                           threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()\n\
                           time.sleep(2)\n\
                           s = socket.socket(fileno=3)\n\
                           while True:\n    c, _ = s.accept()\n    c.close()";

/// The nice value of thread `tid` (`/proc/TID/stat`'s 19th field), if it exists.
fn nice_of(tid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // The fields after the command name, whose `(...)` may hold spaces: state is the 3rd.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19 - 3)?.parse().ok()
}

/// The nice values of every thread of `pid`.
fn thread_nices(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(nice_of)
                .collect()
        })
        .unwrap_or_default()
}

fn start_slow(what: &str, flags: &[&str]) -> Ck {
    let mut args = vec!["-w", "2"];
    args.extend(flags);
    args.extend(["--", "python3", "-c", SLOW_WORKER]);
    let (mut ck, _port) = start(what, &args);
    ck.wait_ready(2, Duration::from_secs(20));
    ck
}

/// SIGKILLs slot 0's worker and returns its replacement's pid and the nice values of its two
/// threads while it boots (once its second thread exists).
fn kill_and_watch_boot(ck: &mut Ck) -> (u32, Vec<i32>) {
    let old = ck.status().worker_pid(0);
    sys::signal(old, Signal::SIGKILL);
    let status = ck.wait_status("slot 0 replaced", Duration::from_secs(10), |s| {
        s.slot(0).pid.is_some_and(|p| p != old)
    });
    let new = status.worker_pid(0);
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            thread_nices(new).len() == 2
        }),
        "the replacement {new} did not start its second thread: {:?}\n{}",
        thread_nices(new),
        ck.log()
    );
    let booting = thread_nices(new);
    assert_eq!(
        ck.status().slot(0).state,
        "starting",
        "the replacement was ready before its boot ended\n{}",
        ck.log()
    );
    (new, booting)
}

#[test]
fn a_replacement_boots_above_the_fleet_and_gets_its_priority_back_when_ready() {
    let mut ck = start_slow("boot-boost", &[]);
    let fleet = nice_of(ck.pid()).expect("ck's nice");
    let first = ck.status();
    for slot in [0, 1] {
        assert_eq!(
            thread_nices(first.worker_pid(slot)),
            [fleet, fleet],
            "a first worker boots at the fleet's priority"
        );
    }
    let survivor = first.worker_pid(1);
    let (new, booting) = kill_and_watch_boot(&mut ck);
    let boosted = (fleet - 5).max(-20);
    assert_eq!(
        booting,
        [boosted, boosted],
        "the replacement and the thread it started boot 5 levels above the fleet ({fleet})"
    );
    assert_eq!(
        thread_nices(survivor),
        [fleet, fleet],
        "the survivor is untouched"
    );
    ck.wait_status("the replacement ready", Duration::from_secs(20), |s| {
        s.slot(0).state == "ready" && s.slot(0).pid == Some(new)
    });
    assert_eq!(
        thread_nices(new),
        [fleet, fleet],
        "every thread of the ready replacement has the fleet's priority back\n{}",
        ck.log()
    );
    let started = ck.log_lines("worker started");
    assert!(
        started
            .last()
            .is_some_and(|l| l.contains(&format!("boot_nice={boosted}"))),
        "the replacement's start line says its boot priority: {started:?}"
    );
    ck.sigterm();
    ck.wait_clean_exit();
}

#[test]
fn a_rolls_workers_and_boot_boost_0_boot_at_the_fleets_priority() {
    let mut ck = start_slow("boot-boost-roll", &[]);
    let fleet = nice_of(ck.pid()).expect("ck's nice");
    let before = ck.status().worker_pids();
    // `ck reload` answers when the roll is done: it runs beside the checks.
    let reload = ck_tests::ck::ck_command()
        .args(["reload", "--name", ck.name()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting ck reload");
    let status = ck.wait_status("a roll's new worker", Duration::from_secs(10), |s| {
        s.slots
            .iter()
            .any(|slot| slot.pid.is_some_and(|p| !before.contains(&p)))
    });
    let new = status
        .slots
        .iter()
        .find_map(|slot| slot.pid.filter(|p| !before.contains(p)))
        .expect("a new worker");
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            thread_nices(new).len() == 2
        }),
        "the roll's worker did not start its second thread"
    );
    assert_eq!(
        thread_nices(new),
        [fleet, fleet],
        "a roll's worker boots at the fleet's priority (capacity is not short)"
    );
    let rolled = reload.wait_with_output().expect("ck reload");
    assert!(rolled.status.success(), "the roll failed\n{}", ck.log());
    ck.sigterm();
    ck.wait_clean_exit();

    let mut ck = start_slow("boot-boost-off", &["--boot-boost", "0"]);
    let (_new, booting) = kill_and_watch_boot(&mut ck);
    assert_eq!(
        booting,
        [fleet, fleet],
        "--boot-boost 0: the replacement boots at the fleet's priority"
    );
    ck.sigterm();
    ck.wait_clean_exit();
}
