//! Fleet changes under continuous load, with BPF steering: SIGKILLing two of three workers,
//! five rolling restarts in a row, and scaling down then up. Each runs under a paced load of
//! new connections and again of keep-alive connections, and counts failed requests: none, except
//! (with new connections) the few requests a killed worker had already accepted.

use std::time::Duration;

use ck_tests::churn::{self, Background, CONNECTIONS, SETTLE};
use ck_tests::load::Mode;
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, burst_pinned, local, start_ready};

/// The demo worker's close: a keep-alive connection idle this long is closed (`IDLE_GRACE` in
/// `ck-worker/src/close.rs`).
const CLOSE_IDLE_GRACE: Duration = Duration::from_millis(500);

/// SIGKILLs the workers of slots 1 and 2 of a round-robin fleet of 3 under load in `mode`,
/// asserts on the failures, then checks that all 3 slots serve again.
fn kill_two_of_three(what: &str, mode: Mode) {
    let (mut ck, port, status) =
        start_ready(what, 3, &["--policy", "round-robin"]).expect("start a ready ck");
    assert!(status.migration, "migration is off: {status:#?}");
    let run = churn::kill_two(&mut ck, port, mode);
    let report = &run.report;
    churn::print_report(what, report);
    eprintln!(
        "{what}: {} failed request(s) with {CONNECTIONS} connections, {} retried",
        report.failed(),
        report.retried
    );
    assert!(report.ok > 0, "{}", report.summary());
    assert_eq!(report.refused, 0, "refused: {}", report.summary());
    assert_eq!(report.timeout, 0, "timed out: {}", report.summary());
    match mode {
        // A request already accepted by a killed worker dies with it (one per connection at
        // most: each connection has one request in flight); nothing else may fail.
        Mode::NewConnection => assert!(
            report.failed() <= CONNECTIONS as u64,
            "more failures than requests in flight: {}\n{:?}",
            report.summary(),
            report.errors
        ),
        // A keep-alive connection held by a killed worker fails before any byte of its next
        // answer and is retried on a new connection, which goes to a live worker.
        Mode::KeepAlive => churn::assert_no_failures(report),
    }
    for victim in &run.victims {
        assert!(
            !run.after.worker_pids().contains(victim),
            "killed worker {victim} still listed: {:#?}",
            run.after
        );
    }
    for index in [1, 2] {
        let slot = run.after.slot(index);
        assert_eq!(
            slot.last_exit.as_deref(),
            Some("signal SIGKILL"),
            "{:#?}",
            run.after
        );
        assert!(slot.restarts >= 1, "{:#?}", run.after);
    }

    // Every slot serves again: round-robin from one CPU reaches each of the 3.
    let status = ck
        .wait_ready(3, READY_TIMEOUT)
        .expect("wait for ready slots");
    let tally = burst_pinned(local(port), 300);
    eprintln!("{what}: burst after the kill: {tally:?}");
    assert_eq!(tally.failed(), 0, "{tally:?}");
    for index in 0..3 {
        assert!(tally.slot(index) > 0, "slot {index} got nothing: {tally:?}");
    }
    let pids = status.worker_pids();
    assert!(
        tally.only_from(&pids),
        "answers from pids not in {pids:?}: {tally:?}"
    );
}

#[test]
fn sigkill_two_of_three_new_connections() {
    kill_two_of_three("kill-nc", Mode::NewConnection);
}

#[test]
fn sigkill_two_of_three_keep_alive() {
    kill_two_of_three("kill-ka", Mode::KeepAlive);
}

/// Reloads a fleet of 4 five times under load in `mode`: every reload succeeds, no request
/// fails, and no worker replaced by a reload answers a request sent after that reload was done
/// (with keep-alive, but for the one next request of each connection it still holds, answered
/// with `Connection: close`: the graceful close).
fn reload_five_times(what: &str, mode: Mode) {
    let (mut ck, port, _) = start_ready(what, 4, &[]).expect("start a ready ck");
    let run = churn::reload_times(&mut ck, port, mode, 4, 5);
    let report = &run.report;
    churn::print_report(what, report);
    run.assert_all_succeeded(&ck);
    for (i, reload) in run.reloads.iter().enumerate() {
        assert!(
            reload.said().contains("reloaded 4 worker(s)"),
            "reload {}: {}",
            i + 1,
            reload.said()
        );
    }
    churn::assert_no_failures(report);
    // Once a reload is done, the workers it replaced answer no request sent after that. The
    // report has when each answer arrived, not when its request was sent; an answer that
    // arrived the longest latency of the run after the reload was done was sent after it. The
    // earlier ones may be requests an old worker had already accepted (or, on a keep-alive
    // connection, received before it handled its SIGTERM): they are counted, not refused.
    let slowest = churn::max_latency(report);
    for (i, reload) in run.reloads.iter().enumerate() {
        let in_flight = churn::answers_from_after(report, reload.done, &reload.before);
        let sent_after = reload.done + slowest;
        let stale = churn::answers_from_after(report, sent_after, &reload.before);
        eprintln!(
            "{what}: reload {} done at {:?}: {} later answer(s) from the {} earlier worker(s), \
             {} of them to requests sent after it ({} answers arrived from {sent_after:?} on)",
            i + 1,
            reload.done,
            in_flight.len(),
            reload.before.len(),
            stale.len(),
            churn::answers_after(report, sent_after)
        );
        // Keep-alive: each connection an old worker holds carries one more request, answered
        // with `Connection: close`; none comes after the close's idle grace.
        let (allowed, grace) = match mode {
            Mode::NewConnection => (0, Duration::ZERO),
            Mode::KeepAlive => (CONNECTIONS, CLOSE_IDLE_GRACE),
        };
        let late = churn::answers_from_after(report, sent_after + grace, &reload.before);
        assert!(
            stale.len() <= allowed && late.is_empty(),
            "reload {} (done at {:?}, {}): old workers {:?} answered {} request(s) sent after it \
             was done (slowest answer {slowest:?}; {allowed} allowed, none after {grace:?}): \
             {stale:?}",
            i + 1,
            reload.done,
            reload.wall.1,
            reload.before,
            stale.len()
        );
    }
    let last = run.reloads.last().expect("five reloads");
    eprintln!(
        "{what}: {} answer(s) to requests sent after the last reload (slowest answer {slowest:?})",
        churn::answers_after(report, last.done + slowest)
    );
    // And new connections opened now all reach the workers of the last reload.
    let tally = burst(local(port), 100);
    eprintln!("{what}: after the last reload: {tally:?}");
    assert_eq!(tally.ok, 100, "{tally:?}");
    let stale: Vec<&u32> = tally
        .per_pid
        .keys()
        .filter(|p| last.before.contains(p))
        .collect();
    assert!(
        stale.is_empty(),
        "workers {stale:?} replaced by the last reload answered: {tally:?}"
    );
    let status = wait_fleet(&mut ck, 4);
    assert!(!status.reloading, "{status:#?}");
    assert!(
        status.worker_pids().is_disjoint(&run.reloads[0].before),
        "an original worker survived five reloads: {status:#?}"
    );
}

#[test]
fn reload_five_times_new_connections() {
    reload_five_times("reload-nc", Mode::NewConnection);
}

#[test]
fn reload_five_times_keep_alive() {
    reload_five_times("reload-ka", Mode::KeepAlive);
}

/// Waits until the fleet is exactly `n` ready slots with a target of `n` workers (slots that
/// were retired are gone).
fn wait_fleet(ck: &mut Ck, n: usize) -> Status {
    ck.wait_status(
        &format!("exactly {n} ready slots"),
        Duration::from_secs(15),
        |s| s.workers as usize == n && s.slots.len() == n && s.ready_count() == n,
    )
    .expect("wait for the status")
}

/// `ck scale N` while `load` runs: waits for exactly `n` ready slots ([`wait_fleet`]), checks
/// the target and the active set, and lets the load run on a while.
fn scale_to(ck: &mut Ck, what: &str, load: &Background, n: usize) {
    let said = ck.ctl_ok(&["scale", &n.to_string()]).expect("ck scale");
    eprintln!("{what}: scale {n}: {}", said.trim());
    let fleet = wait_fleet(ck, n);
    eprintln!("{what}: {n} slots at {:?}: {:?}", load.now(), fleet.active);
    assert_eq!(fleet.workers as usize, n, "{fleet:#?}");
    assert_eq!(fleet.active.len(), n, "{fleet:#?}");
    std::thread::sleep(SETTLE);
}

/// Scales a fleet of 4 to 2, then to 6, under load in `mode`: no request fails.
fn scale_down_then_up(what: &str, mode: Mode) {
    let (mut ck, port, _) = start_ready(what, 4, &[]).expect("start a ready ck");
    let load = Background::start(port, mode);
    std::thread::sleep(SETTLE);
    scale_to(&mut ck, what, &load, 2);
    scale_to(&mut ck, what, &load, 6);
    let report = load.finish_and_print(what);
    churn::assert_served(&report);
}

#[test]
fn scale_down_then_up_new_connections() {
    scale_down_then_up("scale-nc", Mode::NewConnection);
}

#[test]
fn scale_down_then_up_keep_alive() {
    scale_down_then_up("scale-ka", Mode::KeepAlive);
}
