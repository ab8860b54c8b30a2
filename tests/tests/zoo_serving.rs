//! The zoo's servers that serve, each written the way a hurried person writes it
//! (`tests/zoo/`), taken through every operation under a load that never retries
//! (`ck_tests::zoo::tour`): `ck status --wait`, three rolls, a scale up and down, a drain and
//! undrain, `ck upgrade`, a SIGKILL of one worker, `ck stop --wait`, nothing left behind. One
//! test per row of the guide's table (`docs/src/apps-that-misbehave.md`), so a failure names
//! the row. The rows whose servers never serve are in `zoo_broken.rs`.

use std::time::Duration;

use ck_tests::churn::answers_from_after;
use ck_tests::load::LoadReport;
use ck_tests::sys::TempDir;
use ck_tests::zoo::tour::{Seen, Tour, stop_clean};
use ck_tests::zoo::{degraded_shown, servers};

/// Every roll exited 0.
fn rolls_succeeded(label: &str, seen: &Seen) {
    for (i, (ok, took, said)) in seen.reloads.iter().enumerate() {
        assert!(ok, "{label}: roll {} failed after {took:?}: {said}", i + 1);
    }
}

/// Nothing was refused, and the SIGKILL failed no more than the worker held.
fn kill_bounded(label: &str, seen: &Seen) {
    let kill = &seen.kill;
    assert_eq!(kill.refused, 0, "{label}: {}", kill.summary());
    assert!(
        kill.failed() <= seen.kill_held,
        "{label}: {} failed at the SIGKILL, more than the worker held ({}): {}",
        kill.failed(),
        seen.kill_held,
        kill.summary()
    );
}

/// Nothing failed, something was answered.
fn nothing_failed(label: &str, report: &LoadReport) {
    assert!(
        report.ok > 0,
        "{label}: nothing answered: {}",
        report.summary()
    );
    assert_eq!(
        report.failed(),
        0,
        "{label}: {}\n{:?}",
        report.summary(),
        report.errors
    );
}

/// A serving row's whole verdict: every roll exited 0, the operations failed nothing, no
/// worker restarted but the one killed, the kill failed no more than it held.
fn served_through_everything(label: &str, seen: &Seen) {
    rolls_succeeded(label, seen);
    nothing_failed(label, &seen.ops);
    kill_bounded(label, seen);
    assert_eq!(
        seen.restarts(),
        1,
        "{label}: only the killed worker restarts: {:#?}",
        seen.after.slots
    );
}

/// A blocking accept-then-read loop that dies on any socket error and never says READY=1:
/// ck's readiness check and probes must never be what kills it.
#[test]
fn accept_then_read_loop_that_dies_on_any_socket_error() {
    let label = "accept-read";
    let (ck, port, seen) = Tour::new(label, servers::python("accept_read.py", &[])).run();
    served_through_everything(label, &seen);
    stop_clean(ck, port, label);
}

/// A server that accepts and never reads nor answers: clients time out (nothing is refused or
/// reset by ck: the only resets are of connections a worker still held at its stop signal or
/// its SIGKILL), and `ck status` says the worker does not answer.
#[test]
fn never_reads_the_request() {
    let label = "never-reads";
    let tour = Tour::new(label, servers::python("never_reads.py", &[]))
        .rate(40.0)
        .timeout(Duration::from_secs(2));
    let (mut ck, port, seen) = tour.run();
    rolls_succeeded(label, &seen);
    let ops = &seen.ops;
    assert_eq!(ops.ok, 0, "{label}: {}", ops.summary());
    assert!(ops.timeout > 0, "{label}: {}", ops.summary());
    assert_eq!(
        (ops.refused, ops.other),
        (0, 0),
        "{label}: {}",
        ops.summary()
    );
    assert!(
        ops.reset <= seen.held_at_stops,
        "{label}: {} reset, more than the retired workers held at their stop signal ({})",
        ops.reset,
        seen.held_at_stops
    );
    // At the SIGKILL too the clients time out, but those the killed worker held.
    let kill = &seen.kill;
    assert_eq!(
        (kill.ok, kill.refused, kill.other),
        (0, 0, 0),
        "{label}: {}",
        kill.summary()
    );
    assert!(
        kill.reset <= seen.kill_held,
        "{label}: {} reset at the SIGKILL, more than the worker held ({})",
        kill.reset,
        seen.kill_held
    );
    let (line, status) = degraded_shown(&mut ck, &["does not answer"], Duration::from_secs(10));
    eprintln!("{label}: DEGRADED: {line}");
    let pids = status.worker_pids();
    assert!(
        pids.iter().any(|p| line.contains(&format!("(pid {p})"))),
        "{label}: names a worker of {pids:?}: {line}"
    );
    stop_clean(ck, port, label);
}

/// A C server that keeps SIGPIPE's default action: it dies the moment it writes to a
/// connection its client reset, so ck must never reset (or write to) a connection of its own.
#[test]
fn exits_on_sigpipe() {
    let label = "sigpipe";
    let (ck, port, seen) = Tour::new(label, servers::c("sigpipe")).run();
    served_through_everything(label, &seen);
    stop_clean(ck, port, label);
}

/// A Node server that ignores SIGTERM: each retired worker is killed at `--drain-timeout`
/// (the roll goes on), failing no more than it held then.
#[test]
fn ignores_sigterm() {
    let label = "ignores-sigterm";
    let tour =
        Tour::new(label, servers::node("ignores_sigterm.js")).args(&["--drain-timeout", "2s"]);
    let (ck, port, seen) = tour.run();
    rolls_succeeded(label, &seen);
    assert!(
        seen.ops.failed() <= seen.held_at_stops,
        "{label}: {} failed, more than the retired workers held ({}): {}",
        seen.ops.failed(),
        seen.held_at_stops,
        seen.ops.summary()
    );
    let killed = ck.log_lines("worker killed (SIGKILL)");
    // Three rolls of two workers and a scale-down retire seven workers.
    assert!(
        killed
            .iter()
            .filter(|l| l.contains("drain timeout"))
            .count()
            >= 7,
        "{label}: every retired worker is killed at --drain-timeout: {killed:#?}"
    );
    kill_bounded(label, &seen);
    stop_clean(ck, port, label);
}

/// A server that crashes after N requests: every death fails at most the request it died on
/// (the queue it leaves migrates), nothing is refused, and each crashed worker is replaced.
#[test]
fn crashes_after_n_requests() {
    let label = "crashes-after";
    let tour = Tour::new(label, servers::python("crashes_after.py", &["200"]));
    let (ck, port, seen) = tour.run();
    rolls_succeeded(label, &seen);
    let crashes = ck
        .log_lines("worker exited")
        .iter()
        .filter(|l| l.contains("exit 1"))
        .count() as u64;
    eprintln!("{label}: {crashes} crash(es)");
    assert!(crashes > 0, "{label}: no worker crashed");
    for report in [&seen.ops, &seen.kill] {
        assert_eq!(report.refused, 0, "{label}: {}", report.summary());
    }
    let failed = seen.ops.failed() + seen.kill.failed();
    assert!(
        failed <= crashes + seen.kill_held,
        "{label}: {failed} failed, more than the {crashes} crash(es) and the killed worker ({}) \
         held: {} / {}",
        seen.kill_held,
        seen.ops.summary(),
        seen.kill.summary()
    );
    stop_clean(ck, port, label);
}

/// A C server that calls `listen(fd, 1)` on its socket: a load within its capacity fails
/// nothing, and ck's log names the backlog the kernel now holds.
#[test]
fn listen_backlog_of_one() {
    let label = "backlog-one";
    let (ck, port, seen) = Tour::new(label, servers::c("backlog_one")).run();
    served_through_everything(label, &seen);
    let warned = ck.log_lines("lowered its backlog");
    assert!(
        warned.iter().any(|l| l.contains("backlog=1")),
        "{label}: ck names the backlog of 1: {warned:#?}"
    );
    stop_clean(ck, port, label);
}

/// A server that writes megabytes a second to stderr: ck reads it all (or drops what its own
/// output cannot take), its memory stays bounded and it answers `ck status` on time. The
/// figures are printed; the bounds asserted are far from any timing.
#[test]
fn writes_megabytes_to_stderr_per_second() {
    let label = "floods-stderr";
    let tour = Tour::new(label, servers::python("floods_stderr.py", &["2048"])).watch_ck();
    let (ck, port, seen) = tour.run();
    served_through_everything(label, &seen);
    let rss = seen.ck_rss_kib.expect("watched");
    let (slowest, median) = seen.status_time.expect("ck status answered");
    eprintln!(
        "{label}: ck's largest RSS {rss} KiB; `ck status` slowest {slowest:?}, median {median:?}"
    );
    assert!(rss < 128 * 1024, "{label}: ck grew to {rss} KiB");
    assert!(
        slowest < Duration::from_secs(5),
        "{label}: `ck status` took {slowest:?}"
    );
    let lines = ck.log_lines("debug: xxxx").len();
    assert!(
        lines > 1000,
        "{label}: only {lines} of the workers' lines in ck's log"
    );
    stop_clean(ck, port, label);
}

/// A server that binds a second socket of its own on the group's port with SO_REUSEPORT: ck
/// warns, naming the worker, and never steers a connection to it.
#[test]
fn binds_a_second_reuseport_socket() {
    let label = "reuseport-twice";
    let (mut ck, port, seen) = Tour::new(label, servers::python("reuseport_twice.py", &[])).run();
    served_through_everything(label, &seen);
    for report in [&seen.ops, &seen.kill] {
        assert!(
            !report.by_slot.contains_key("own"),
            "{label}: the worker's own socket got connections: {:?}",
            report.by_slot
        );
    }
    let status = ck
        .wait_status("its own socket listed", Duration::from_secs(5), |s| {
            !s.foreign.is_empty()
        })
        .expect("ck status lists the foreign socket");
    let pids = status.worker_pids();
    assert!(
        status
            .foreign
            .iter()
            .all(|f| f.pid.is_some_and(|p| pids.contains(&p))),
        "{label}: the foreign listeners are the workers': {:#?}",
        status.foreign
    );
    let warned = ck.log_lines("opened a socket of its own on the group's port");
    assert!(!warned.is_empty(), "{label}: ck warns:\n{}", ck.log());
    assert!(warned.iter().all(|l| l.contains(" WARN ")), "{warned:#?}");
    stop_clean(ck, port, label);
}

/// A server that serves fd 3 and listens on another port of its own too (its admin page):
/// it is served, and ck's log names the other port.
#[test]
fn serves_fd_3_and_listens_on_another_port() {
    let label = "admin-port";
    let base = ck_tests::sys::free_port();
    let app = servers::python("admin_port.py", &[&base.to_string()]);
    let (ck, port, seen) = Tour::new(label, app).run();
    served_through_everything(label, &seen);
    for slot in &seen.after.slots {
        let addr = format!("addr=127.0.0.1:{}", base + slot.slot as u16);
        let named = ck
            .log_lines("also listens on a port of its own")
            .iter()
            .any(|l| l.contains(&addr) && l.contains(&format!("slot={}", slot.slot)));
        assert!(
            named,
            "{label}: slot {} ({addr}) not named:\n{}",
            slot.slot,
            ck.log()
        );
    }
    stop_clean(ck, port, label);
}

/// A server that boots for a minute and says nothing meanwhile: one roll under load (both
/// workers at once, `--reload-batch 2`) fails nothing, the old workers serving until their
/// replacements accept (`--ready-timeout` gives them the minute).
#[test]
fn boots_in_a_minute_and_says_nothing() {
    let label = "slow-boot";
    let dir = TempDir::new("zoo-slow-boot");
    let boot = dir.write("boot-seconds", "1", false);
    let app = servers::python("slow_boot.py", &[boot.to_str().expect("UTF-8 path")]);
    let tour = Tour::new(label, app)
        .args(&["--ready-timeout", "3m", "--reload-batch", "2"])
        .ctl_timeout(Duration::from_secs(200));
    let (ck, port) = tour.start(Duration::from_secs(30));
    let old = ck.status().expect("ck status").worker_pids();
    std::fs::write(&boot, "60").expect("writing the boot time");
    let load = tour.load(port);
    std::thread::sleep(ck_tests::churn::SETTLE);
    let asked = load.now();
    let out = ck.ctl(&["reload"]).expect("ck reload");
    let done = load.now();
    std::thread::sleep(ck_tests::churn::SETTLE);
    let report = load.finish_and_print(label);
    assert!(
        out.status.success(),
        "{label}: {}",
        ck_tests::ck::said(&out)
    );
    eprintln!("{label}: the roll took {:?}", done - asked);
    nothing_failed(label, &report);
    // Half a minute into the roll, the old workers still answered.
    let late = answers_from_after(&report, asked + Duration::from_secs(30), &old);
    assert!(
        !late.is_empty(),
        "{label}: the old workers stopped serving during the boot"
    );
    let new = ck.status().expect("ck status").worker_pids();
    assert!(
        new.is_disjoint(&old),
        "{label}: {old:?} still listed: {new:?}"
    );
    stop_clean(ck, port, label);
}
