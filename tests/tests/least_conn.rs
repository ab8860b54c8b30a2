//! `least-conn`: the least loaded of up to 4 candidates by the kernel's connection counts (open
//! connections, queued ones included). With two workers both are candidates of every
//! connection, so each new connection goes to the one holding fewer: exact counts.
//!
//! Slot 0 is loaded first with clients' connections held open while slot 1 is drained (out of
//! the active set, so every new connection goes to slot 0; ck's own probes would not do: they
//! never count as open). Then a scale-up from 2 to 4: every worker is a candidate, so the new
//! workers take every new connection until they hold as many as the old ones.

use std::collections::BTreeMap;
use std::time::Duration;

use ck_tests::http::{KeepAlive, hold, hold_from_cpu};
use ck_tests::sys::{allowed_cpus, first_allowed_cpu};
use ck_tests::{Ck, Status, local, start_ready, start_with_env};

/// Connections held on slot 0 before the ordinary ones.
const HELD: u8 = 6;
/// Ordinary connections opened next.
const NEXT: usize = 4;
/// How long the kernel's counts get to reach what the clients hold or closed.
const SETTLE: Duration = Duration::from_secs(10);

/// [`HELD`] keep-alive connections held open on slot 0, opened from CPU `cpu` while slot 1 is
/// drained (so all go to slot 0), slot 1 back in the active set after.
fn held_on_slot0(ck: &Ck, port: u16, cpu: usize) -> Vec<KeepAlive> {
    ck.ctl_ok(&["drain", "1"]).expect("ck control command");
    let (held, answered) = hold_from_cpu(local(port), usize::from(HELD), cpu);
    assert_eq!(answered, BTreeMap::from([(0, u64::from(HELD))]));
    ck.ctl_ok(&["undrain", "1"]).expect("ck control command");
    held
}

/// Waits until the kernel's open counts per slot are `want`.
fn wait_counts(ck: &mut Ck, want: &BTreeMap<u32, u64>) -> Status {
    ck.wait_status(&format!("open connections {want:?}"), SETTLE, |s| {
        s.connections() == *want
    })
    .expect("wait for a status")
}

#[test]
fn least_conn_sends_the_next_connections_to_the_emptiest_worker() {
    let (ck, port, status) =
        start_ready("lconn", 2, &["--policy", "least-conn"]).expect("start a ready ck");
    assert_eq!(status.policy.name(), "least-conn", "{status:#?}");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    assert_eq!(
        status.conn_steering.as_deref(),
        Some("kernel (BPF)"),
        "{status:#?}"
    );
    assert!(
        ck.log()
            .contains("least-conn sums each candidate's kernel-counted connections in BPF"),
        "{}",
        ck.log()
    );
    emptiest_worker_takes_the_next(ck, port, Duration::ZERO);
}

/// Where the program cannot sum the kernel's counts (Linux 5.14 to 5.18, forced here), least-conn
/// compares the counts the supervisor samples: the same choices, once a sample has seen the
/// change (the test waits [`SAMPLE_WAIT`] after each).
#[test]
fn the_forced_fallback_says_so_and_steers_by_sampled_counts() {
    let (mut ck, port) = start_least_conn("lconn-sampled", &[("CK_LEAST_CONN", "sampled")]);
    let status = ck
        .wait_ready(2, ck_tests::READY_TIMEOUT)
        .expect("wait for ready slots");
    let said = "sampled (forced by CK_LEAST_CONN=sampled)";
    assert_eq!(status.conn_steering.as_deref(), Some(said), "{status:#?}");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck control command");
    assert!(
        text.contains(&format!("least-conn counts: {said}")),
        "{text}"
    );
    let warned = ck.log_lines("least-conn steers by sampled connection counts");
    assert_eq!(warned.len(), 1, "one warning line: {}", ck.log());
    assert!(warned[0].contains("CK_LEAST_CONN=sampled"), "{warned:?}");
    emptiest_worker_takes_the_next(ck, port, SAMPLE_WAIT);
}

/// Where the kernel does not count connections at all (forced: `CK_CONN_COUNT=scan`),
/// least-conn has nothing to compare, says so, and spreads round-robin: 4 connections from one
/// CPU go 2 and 2 although slot 0 holds 6.
#[test]
fn without_kernel_counts_least_conn_says_so_and_spreads_round_robin() {
    let (mut ck, port) = start_least_conn("lconn-rr", &[("CK_CONN_COUNT", "scan")]);
    let status = ck
        .wait_ready(2, ck_tests::READY_TIMEOUT)
        .expect("wait for ready slots");
    let steering = status.conn_steering.clone().unwrap_or_default();
    assert!(
        steering.starts_with("round-robin (the kernel does not count connections here")
            && steering.contains("CK_CONN_COUNT=scan"),
        "{status:#?}"
    );
    assert_eq!(
        ck.log()
            .matches("least-conn has no connection counts to steer by")
            .count(),
        1,
        "{}",
        ck.log()
    );
    let on_slot0 = held_on_slot0(&ck, port, first_allowed_cpu());
    let (next, answered) = hold(local(port), NEXT);
    assert_eq!(answered, BTreeMap::from([(0, 2), (1, 2)]));
    drop((on_slot0, next));
}

/// Starts `-w 2 --policy least-conn` with `env` on a free port (probe steering on its own base).
fn start_least_conn(what: &str, env: &[(&str, &str)]) -> (Ck, u16) {
    start_with_env(what, &["-w", "2", "--policy", "least-conn"], env).expect("start ck")
}

/// How long the fallback's samples take to see a change (sampled every `--sample-interval`,
/// 1 ms, under traffic; 50 ms idle).
const SAMPLE_WAIT: Duration = Duration::from_millis(300);

/// Slot 0 holds 6 (opened while slot 1 was drained), then the next 4 go to slot 1, the
/// emptier; slot 0's closed, the next 4 go to slot 0. `settle`: how long a sample takes to see
/// each change.
fn emptiest_worker_takes_the_next(mut ck: Ck, port: u16, settle: Duration) {
    let selected = ck.status().expect("ck status").slot(0).selected;
    let on_slot0 = held_on_slot0(&ck, port, first_allowed_cpu());
    let before = wait_counts(&mut ck, &BTreeMap::from([(0, u64::from(HELD)), (1, 0)]));
    assert_eq!(
        before.slot(0).selected - selected,
        u64::from(HELD),
        "{before:#?}"
    );
    std::thread::sleep(settle);

    // Slot 1 holds fewer until it holds 6: all 4 go there.
    let (next, answered) = hold(local(port), NEXT);
    assert_eq!(answered, BTreeMap::from([(1, NEXT as u64)]));
    let after = wait_counts(
        &mut ck,
        &BTreeMap::from([(0, u64::from(HELD)), (1, NEXT as u64)]),
    );
    assert_eq!(after.slot(0).selected - before.slot(0).selected, 0);
    assert_eq!(
        after.slot(1).selected - before.slot(1).selected,
        NEXT as u64
    );

    // Slot 0's connections closed: now it is the emptiest, and takes the next 4.
    drop(on_slot0);
    let emptied = wait_counts(&mut ck, &BTreeMap::from([(0, 0), (1, NEXT as u64)]));
    std::thread::sleep(settle);
    let (again, answered) = hold(local(port), NEXT);
    assert_eq!(answered, BTreeMap::from([(0, NEXT as u64)]));
    let last = wait_counts(
        &mut ck,
        &BTreeMap::from([(0, NEXT as u64), (1, NEXT as u64)]),
    );
    assert_eq!(
        last.slot(0).selected - emptied.slot(0).selected,
        NEXT as u64
    );
    assert_eq!(last.slot(1).selected - emptied.slot(1).selected, 0);
    drop((next, again));
    wait_counts(&mut ck, &BTreeMap::from([(0, 0), (1, 0)]));
}

/// The kernel counts per CPU and each selection sums them: slot 0's connections, established on
/// the last CPU, keep the next ones (opened from the first CPU, whose own counts are all 0) off
/// slot 0.
#[test]
fn least_conn_sums_the_counts_of_connections_opened_on_another_cpu() {
    let cpus = allowed_cpus();
    let (first, last) = (cpus[0], cpus[cpus.len() - 1]);
    assert_ne!(first, last, "this test needs two CPUs: {cpus:?}");
    let (mut ck, port, _) =
        start_ready("lconn-cpus", 2, &["--policy", "least-conn"]).expect("start a ready ck");
    let on_slot0 = held_on_slot0(&ck, port, last);
    wait_counts(&mut ck, &BTreeMap::from([(0, u64::from(HELD)), (1, 0)]));
    let (next, answered) = hold_from_cpu(local(port), NEXT, first);
    assert_eq!(answered, BTreeMap::from([(1, NEXT as u64)]));
    drop((on_slot0, next));
    wait_counts(&mut ck, &BTreeMap::from([(0, 0), (1, 0)]));
}

#[test]
fn least_conn_fills_the_workers_a_scale_up_adds() {
    let (mut ck, port, _) =
        start_ready("lconn-scale", 2, &["--policy", "least-conn"]).expect("start a ready ck");
    let (first, answered) = hold(local(port), 10);
    assert_eq!(answered, BTreeMap::from([(0, 5), (1, 5)]));
    ck.ctl_ok(&["scale", "4"]).expect("ck control command");
    ck.wait_ready(4, ck_tests::READY_TIMEOUT)
        .expect("wait for ready slots");
    // Every worker is a candidate (4 of 4): the two new ones take all 10 until they hold 5.
    let (second, answered) = hold(local(port), 10);
    assert_eq!(answered.values().sum::<u64>(), 10, "{answered:?}");
    assert!(
        !answered.contains_key(&0) && !answered.contains_key(&1),
        "{answered:?}"
    );
    let status = ck
        .wait_status("20 connections counted", SETTLE, |s| {
            s.connections().values().sum::<u64>() == 20
        })
        .expect("wait for a status");
    let counts: Vec<u64> = status
        .ready()
        .map(|s| s.connections.expect("kernel count"))
        .collect();
    assert_eq!(counts, [5, 5, 5, 5], "{status:#?}");
    drop((first, second));
}
