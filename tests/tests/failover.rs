//! Failover: connections queued on a worker that dies are not lost; the kernel migrates them
//! (through ck's program) to a live worker, and the dead worker is replaced.

use std::time::Duration;

use ck_tests::http::{finish_all, send_new_conn};
use ck_tests::sys::{kill_hard, on_one_cpu, signal};
use ck_tests::{local, start_ready};
use nix::sys::signal::Signal;

/// Connections opened while slot 1's worker is frozen.
const N: usize = 20;

#[test]
fn queued_connections_survive_a_worker_death() {
    let (mut ck, port, status) =
        start_ready("failover", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    assert!(status.migration, "migration is off: {status:#?}");
    let victim = status.slot(1).pid.expect("slot 1 has a worker");
    let survivor = status.slot(0).pid.expect("slot 0 has a worker");

    // Freeze slot 1's worker: connections steered to it complete the handshake in the kernel
    // and wait in its accept queue, unaccepted, with their request.
    signal(victim, Signal::SIGSTOP);
    let addr = local(port);
    let pending = on_one_cpu(move || {
        (0..N)
            .map(|i| send_new_conn(addr).unwrap_or_else(|e| panic!("connection {i}: {e}")))
            .collect::<Vec<_>>()
    });
    let selected = ck.status().expect("ck status");
    assert_eq!(selected.slot(1).selected, (N / 2) as u64, "{selected:#?}");

    kill_hard(victim);
    let tally = finish_all(pending);
    eprintln!("after killing slot 1's worker {victim}: {tally:?}");
    assert_eq!(
        tally.ok, N as u32,
        "queued connections were lost: {tally:?}"
    );
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert_eq!(
        tally.pid(victim),
        0,
        "the killed worker answered: {tally:?}"
    );
    assert!(tally.pid(survivor) >= (N / 2) as u32, "{tally:?}");

    let status = ck
        .wait_status("slot 1 restarted and ready", Duration::from_secs(15), |s| {
            let slot = s.slot(1);
            slot.state == "ready" && slot.generation == 2
        })
        .expect("wait for the status");
    eprintln!("{status:#?}");
    let slot1 = status.slot(1);
    assert_ne!(slot1.pid, Some(victim));
    assert_eq!(slot1.restarts, 1, "{status:#?}");
    assert_eq!(slot1.breaker, "closed", "{status:#?}");
    assert_eq!(
        slot1.last_exit.as_deref(),
        Some("signal SIGKILL"),
        "{status:#?}"
    );
    // Every connection the killed worker left in its queue was migrated, none dropped.
    assert!(status.migrated() > 0, "no migration counted: {status:#?}");
    assert_eq!(status.migrated(), (N / 2) as u64, "{status:#?}");
    assert_eq!(status.dropped, 0, "{status:#?}");
    // Answers not from slot 0's worker came from slot 1's replacement.
    for (pid, count) in &tally.per_pid {
        assert!(
            *pid == survivor || Some(*pid) == slot1.pid,
            "{count} answers from unknown pid {pid}: {tally:?}"
        );
    }
}
