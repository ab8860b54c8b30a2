//! `--boot-boost`: while a replacement for a worker that died boots, the rest of the fleet
//! steps back some nice levels, on every thread, and has the fleet's priority back once the
//! replacement is ready; the replacement itself boots at ck's priority. The first workers, a
//! roll and `--boot-boost 0` change nobody's priority. Priorities are read from
//! `/proc/TID/stat`, as the scheduler has them.

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

/// Waits until each worker of `pids` has started its second thread (what [`SLOW_WORKER`] does
/// first), so that the nice values read cover every thread it will have while it boots.
fn wait_second_threads(ck: &Ck, pids: &[u32]) {
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            pids.iter().all(|pid| thread_nices(*pid).len() == 2)
        }),
        "not every worker of {pids:?} started its second thread: {:?}\n{}",
        pids.iter().map(|p| thread_nices(*p)).collect::<Vec<_>>(),
        ck.log()
    );
}

fn start_slow(what: &str, flags: &[&str]) -> Ck {
    let mut args = vec!["-w", "2"];
    args.extend(flags);
    args.extend(["--", "python3", "-c", SLOW_WORKER]);
    let (mut ck, _port) = start(what, &args).expect("start ck");
    ck.wait_ready(2, Duration::from_secs(20))
        .expect("wait for ready slots");
    ck
}

/// SIGKILLs slot 0's worker and returns its replacement's pid, the nice values of its two
/// threads while it boots (once its second thread exists), and those of slot 1's worker's
/// then.
fn kill_and_watch_boot(ck: &mut Ck) -> (u32, Vec<i32>, Vec<i32>) {
    let survivor = ck.status().expect("ck status").worker_pid(1);
    let old = ck.status().expect("ck status").worker_pid(0);
    sys::signal(old, Signal::SIGKILL);
    let status = ck
        .wait_status("slot 0 replaced", Duration::from_secs(10), |s| {
            s.slot(0).pid.is_some_and(|p| p != old)
        })
        .expect("wait for the status");
    let new = status.worker_pid(0);
    wait_second_threads(ck, &[new]);
    let booting = thread_nices(new);
    let survivor_then = thread_nices(survivor);
    assert_eq!(
        ck.status().expect("ck status").slot(0).state,
        "starting",
        "the replacement was ready before its boot ended\n{}",
        ck.log()
    );
    (new, booting, survivor_then)
}

#[test]
fn while_a_replacement_boots_the_rest_of_the_fleet_steps_back() {
    let mut ck = start_slow("boot-boost", &[]);
    let fleet = nice_of(ck.pid()).expect("ck's nice");
    let first = ck.status().expect("ck status");
    for slot in [0, 1] {
        assert_eq!(
            thread_nices(first.worker_pid(slot)),
            [fleet, fleet],
            "a first worker boots at the fleet's priority"
        );
    }
    let survivor = first.worker_pid(1);
    let (new, booting, survivor_then) = kill_and_watch_boot(&mut ck);
    let back = (fleet + 5).min(19);
    assert_eq!(
        booting,
        [fleet, fleet],
        "the replacement boots at ck's priority"
    );
    assert_eq!(
        survivor_then,
        [back, back],
        "both threads of the survivor step back 5 levels while it boots"
    );
    let status = ck.status().expect("ck status");
    assert_eq!(
        status.slot(1).nice,
        Some(back),
        "ck status reads it from the kernel"
    );
    ck.wait_status("the replacement ready", Duration::from_secs(20), |s| {
        s.slot(0).state == "ready" && s.slot(0).pid == Some(new)
    })
    .expect("wait for the status");
    assert!(
        poll_until(Duration::from_secs(2), Duration::from_millis(10), || {
            thread_nices(survivor) == [fleet, fleet]
        }),
        "every thread of the survivor has the fleet's priority back: {:?}\n{}",
        thread_nices(survivor),
        ck.log()
    );
    assert_eq!(
        thread_nices(new),
        [fleet, fleet],
        "the replacement is untouched"
    );
    let lines = ck.log_lines("worker priority");
    assert_eq!(
        lines.len(),
        2,
        "one line stepping back, one coming back: {lines:?}"
    );
    assert!(
        lines[0].contains(&format!("slot=1 pid={survivor} nice={back}")),
        "{lines:?}"
    );
    assert!(
        lines[1].contains(&format!("slot=1 pid={survivor} nice={fleet}")),
        "{lines:?}"
    );
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn a_rolls_workers_and_boot_boost_0_boot_at_the_fleets_priority() {
    let mut ck = start_slow("boot-boost-roll", &[]);
    let fleet = nice_of(ck.pid()).expect("ck's nice");
    let before = ck.status().expect("ck status").worker_pids();
    // `ck reload` answers when the roll is done: it runs beside the checks.
    let reload = ck_tests::ck::ck_command()
        .args(["reload", "--name", ck.name()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting ck reload");
    let status = ck
        .wait_status("a roll's new worker", Duration::from_secs(10), |s| {
            s.slots
                .iter()
                .any(|slot| slot.pid.is_some_and(|p| !before.contains(&p)))
        })
        .expect("wait for the status");
    let new = status
        .slots
        .iter()
        .find_map(|slot| slot.pid.filter(|p| !before.contains(p)))
        .expect("a new worker");
    wait_second_threads(&ck, &[new]);
    let old_nices: Vec<Vec<i32>> = before.iter().map(|pid| thread_nices(*pid)).collect();
    assert_eq!(
        thread_nices(new),
        [fleet, fleet],
        "a roll's worker boots at the fleet's priority (capacity is not short)"
    );
    assert!(
        old_nices.iter().all(|n| n.iter().all(|v| *v == fleet)),
        "nobody steps back for a roll: {old_nices:?}"
    );
    let rolled = reload.wait_with_output().expect("ck reload");
    assert!(rolled.status.success(), "the roll failed\n{}", ck.log());
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");

    let mut ck = start_slow("boot-boost-off", &["--boot-boost", "0"]);
    let (_new, booting, survivor_then) = kill_and_watch_boot(&mut ck);
    assert_eq!(
        (booting, survivor_then),
        (vec![fleet, fleet], vec![fleet, fleet]),
        "--boot-boost 0: nobody's priority changes"
    );
    assert!(ck.log_lines("worker priority").is_empty());
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

/// Every slot at once: both workers SIGKILLed together, so both replacements boot at the
/// fleet's priority (neither steps the other back), and once both are ready every thread is at
/// the fleet's priority. (Whichever becomes ready first steps back until the other is ready,
/// as a survivor would; the first replacement's spawn may step back the other killed worker
/// before ck has seen its exit, which sets no thread.)
#[test]
fn when_every_worker_died_both_replacements_boot_at_the_fleets_priority() {
    let mut ck = start_slow("boot-boost-all", &[]);
    let fleet = nice_of(ck.pid()).expect("ck's nice");
    let old = ck.status().expect("ck status").worker_pids();
    for pid in &old {
        sys::signal(*pid, Signal::SIGKILL);
    }
    let status = ck
        .wait_status("both slots replaced", Duration::from_secs(10), |s| {
            s.slots
                .iter()
                .all(|slot| slot.pid.is_some_and(|p| !old.contains(&p)))
        })
        .expect("wait for the status");
    let new: Vec<u32> = status.worker_pids().into_iter().collect();
    wait_second_threads(&ck, &new);
    for pid in &new {
        assert_eq!(thread_nices(*pid), [fleet, fleet], "replacement {pid}");
    }
    ck.wait_ready(2, Duration::from_secs(20))
        .expect("wait for ready slots");
    assert!(
        poll_until(Duration::from_secs(2), Duration::from_millis(10), || {
            new.iter().all(|pid| thread_nices(*pid) == [fleet, fleet])
        }),
        "every thread at the fleet's priority once both are ready\n{}",
        ck.log()
    );
    let lines = ck.log_lines("worker priority");
    assert!(
        lines
            .last()
            .is_none_or(|l| l.contains("no replacement boots")),
        "the last priority change brings the fleet back: {lines:?}"
    );
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}
