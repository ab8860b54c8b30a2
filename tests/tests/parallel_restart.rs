//! Replacements boot side by side: two workers SIGKILLed at once are both replaced at once, the
//! second replacement's spawn waiting neither for the first one's spawn to finish booting nor
//! for its readiness. Seen with a demo worker that takes seconds to say READY=1: both new pids
//! exist, each in its own worker cgroup, while both slots are still starting.

use std::collections::BTreeSet;

use ck_tests::sys::pid_alive;
use ck_tests::{READY_TIMEOUT, burst, ck_bin, local, start};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long each worker takes to say READY=1: long enough that a replacement spawned only
/// after the other one's readiness would leave a whole boot with one slot still dead.
const BOOT: &str = "3s";

/// The cgroup2 path of `pid` (`0::/...` in `/proc/PID/cgroup`).
fn cgroup_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        .unwrap_or_default()
}

#[test]
fn two_workers_killed_at_once_are_replaced_side_by_side() {
    let bin = ck_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let (mut ck, port) = start(
        "parallel-restart",
        &["-w", "2", "--", bin, "demo-worker", "--ready-after", BOOT],
    )
    .expect("start ck");
    let before = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let victims: BTreeSet<u32> = [before.worker_pid(0), before.worker_pid(1)].into();
    assert_eq!(victims.len(), 2, "{before:#?}");
    for pid in &victims {
        kill(Pid::from_raw(*pid as i32), Signal::SIGKILL).expect("SIGKILL a worker");
    }

    // Both replacements run before either is ready: their boots overlap.
    let booting = ck
        .wait_status("both slots starting with new workers", READY_TIMEOUT, |s| {
            (0..2).all(|i| {
                let slot = s.slot(i);
                slot.state == "starting"
                    && slot
                        .pid
                        .is_some_and(|p| !victims.contains(&p) && pid_alive(p))
            })
        })
        .expect("wait for the status");
    let fresh: BTreeSet<u32> = (0..2).map(|i| booting.worker_pid(i)).collect();
    assert_eq!(fresh.len(), 2, "{booting:#?}");
    let cgroups: BTreeSet<String> = fresh.iter().map(|p| cgroup_of(*p)).collect();
    assert_eq!(cgroups.len(), 2, "each in a cgroup of its own: {cgroups:?}");
    for (pid, cgroup) in fresh.iter().zip(&cgroups) {
        assert!(
            cgroup.contains(&format!("/ck-{}/w", ck.name())),
            "worker {pid} is in {cgroup}, not a worker cgroup of the instance"
        );
    }
    for i in 0..2 {
        assert_eq!(booting.slot(i).restarts, 1, "{booting:#?}");
    }

    // Then both become ready and serve, as the same processes.
    let after = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let serving: BTreeSet<u32> = (0..2).map(|i| after.worker_pid(i)).collect();
    assert_eq!(serving, fresh, "{after:#?}");
    let tally = burst(local(port), 20);
    assert_eq!(tally.ok, 20, "{tally:?}");
    let answered: BTreeSet<u32> = tally.per_pid.keys().copied().collect();
    assert_eq!(answered, fresh, "{tally:?}");
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(
        fresh.iter().all(|p| !pid_alive(*p)),
        "no worker outlives ck"
    );
}
