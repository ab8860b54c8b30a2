//! Worker health: a worker that fails its probes (`--probe`), misses its watchdog heartbeats
//! (`--watchdog`) or stops accepting (`--stall-timeout`) leaves the active set and gets no new
//! connection, while its socket stays open: its process lives on, its keep-alive connections
//! and the connections queued on it are still served, and it comes back once healthy again.

use std::net::SocketAddr;
use std::time::Duration;

use ck_tests::app::demo_app_on_slot;
use ck_tests::http::{Pending, burst_without, finish_all, keep_alive_on, send_new_conn};
use ck_tests::sys::{TempDir, on_one_cpu, pid_alive, signal};
use ck_tests::{Ck, Status, burst, burst_pinned, local, start_ready};
use nix::sys::signal::Signal;

/// Slot `slot` is unhealthy for `reason` (among others) and out of the active set.
fn out_for(status: &Status, slot: u32, reason: &str) -> bool {
    let s = status.slot(slot);
    s.unhealthy
        .as_deref()
        .is_some_and(|r| r.split('+').any(|r| r == reason))
        && s.state == "unhealthy"
        && !status.active.contains(&slot)
}

/// Slot `slot` is healthy, ready and back in the active set.
fn back_in(status: &Status, slot: u32) -> bool {
    let s = status.slot(slot);
    s.unhealthy.is_none() && s.state == "ready" && status.active.contains(&slot)
}

/// Waits (at most `timeout`) until slot `slot` is out for `reason` ([`out_for`]), prints why,
/// its queue depth and the active set, and returns that status.
fn wait_out(ck: &mut Ck, slot: u32, reason: &str, timeout: Duration) -> Status {
    let status = ck
        .wait_status(&format!("slot {slot} unhealthy ({reason})"), timeout, |s| {
            out_for(s, slot, reason)
        })
        .expect("wait for the status");
    let s = status.slot(slot);
    eprintln!(
        "slot {slot} out: unhealthy={:?}, queue_depth={}, active={:?}",
        s.unhealthy, s.queue_depth, status.active
    );
    status
}

/// Waits (at most `timeout`) until slot `slot` is back in ([`back_in`]), asserts that its worker
/// is still `pid` (not restarted), prints the health lines of ck's log, and returns that status.
fn wait_back(ck: &mut Ck, slot: u32, pid: u32, timeout: Duration) -> Status {
    let status = ck
        .wait_status(
            &format!("slot {slot} back in the active set"),
            timeout,
            |s| back_in(s, slot),
        )
        .expect("wait for the status");
    assert_eq!(
        status.worker_pid(slot),
        pid,
        "slot {slot} was restarted: {status:#?}"
    );
    eprintln!("health log:\n{}", health_lines(ck));
    status
}

/// Starts a ready fleet of `workers` with `--policy POLICY --stall-timeout STALL`, stops slot
/// `slot`'s worker (SIGSTOP: it accepts nothing until SIGCONT), and returns ck, the address and
/// that worker's pid.
fn start_and_freeze(
    what: &str,
    workers: usize,
    policy: &str,
    stall: &str,
    slot: u32,
) -> (Ck, SocketAddr, u32) {
    let (ck, port, ready) = start_ready(
        what,
        workers,
        &["--policy", policy, "--stall-timeout", stall],
    )
    .expect("start a ready ck");
    let pid = ready.worker_pid(slot);
    signal(pid, Signal::SIGSTOP);
    (ck, local(port), pid)
}

/// The lines of ck's log that mention health.
fn health_lines(ck: &Ck) -> String {
    ck.log()
        .lines()
        .filter(|l| l.contains("healthy") || l.contains("stall"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn failing_probes_take_a_worker_out_until_they_pass_again() {
    let dir = TempDir::new("health-probe");
    let app = demo_app_on_slot(
        &dir,
        1,
        "--fail-health-after 1500ms --recover-health-after 5s",
    );
    let (mut ck, port, _) = start_ready(
        "hprobe",
        3,
        &[
            "--policy",
            "round-robin",
            "--probe",
            "http:/healthz",
            "--probe-interval",
            "200ms",
            "--probe-fails",
            "2",
            "--probe-passes",
            "2",
            "--",
            &app,
        ],
    )
    .expect("start a ready ck");
    let addr = local(port);

    // Before the failure: a keep-alive connection on slot 1.
    let (mut kept, first) = keep_alive_on(addr, 1);
    eprintln!("keep-alive connection on slot 1 (pid {})", first.pid);

    let status = wait_out(&mut ck, 1, "probe", Duration::from_secs(5));
    assert_eq!(
        status.worker_pid(1),
        first.pid,
        "slot 1 was restarted: {status:#?}"
    );
    assert_eq!(status.active, vec![0, 2], "{status:#?}");

    let out = burst_without(burst_pinned, addr, 400, 1, "unhealthy");
    assert_eq!(out.slot(0), 200, "{out:?}");
    assert_eq!(out.slot(2), 200, "{out:?}");

    // Its socket is open and its worker serves the connection it has.
    kept.assert_stays_with(first, 5);
    assert!(pid_alive(first.pid), "unhealthy worker {} died", first.pid);
    let status = ck.status().expect("ck status");
    assert!(
        out_for(&status, 1, "probe"),
        "slot 1 came back before the checks above were done (they would prove nothing): \
         {status:#?}"
    );

    // /healthz answers 200 again 5 s after the worker started: two passes bring it back.
    let status = wait_back(&mut ck, 1, first.pid, Duration::from_secs(10));
    assert_eq!(status.active, vec![0, 1, 2], "{status:#?}");

    let back = burst_pinned(addr, 300);
    eprintln!("after recovery: {back:?}");
    assert_eq!(back.ok, 300, "every request answered: {back:?}");
    for slot in 0..3 {
        assert_eq!(back.slot(slot), 100, "slot {slot}: {back:?}");
    }
    assert_eq!(back.pid(first.pid), 100, "same worker back: {back:?}");
}

#[test]
fn a_worker_that_misses_its_watchdog_leaves_the_active_set() {
    let dir = TempDir::new("health-watchdog");
    let app = demo_app_on_slot(&dir, 1, "--watchdog-stop-after 1s");
    let (mut ck, port, ready) = start_ready("hwatchdog", 2, &["--watchdog", "300ms", "--", &app])
        .expect("start a ready ck");
    let addr = local(port);
    let pid1 = ready.worker_pid(1);

    let status = wait_out(&mut ck, 1, "watchdog", Duration::from_secs(5));
    assert_eq!(status.slot(0).state, "ready", "{status:#?}");
    assert_eq!(status.slot(0).unhealthy, None, "{status:#?}");
    assert_eq!(status.active, vec![0], "{status:#?}");
    assert_eq!(
        status.worker_pid(1),
        pid1,
        "slot 1 was restarted: {status:#?}"
    );

    let out = burst_without(burst, addr, 200, 1, "unhealthy");
    assert_eq!(out.slot(0), 200, "{out:?}");

    // Slot 0 kept its heartbeat; slot 1 (still silent) stays out, alive.
    let status = ck.status().expect("ck status");
    assert!(back_in(&status, 0), "slot 0 left: {status:#?}");
    assert!(out_for(&status, 1, "watchdog"), "{status:#?}");
    assert!(pid_alive(pid1), "unhealthy worker {pid1} died");
    eprintln!("health log:\n{}", health_lines(&ck));
}

#[test]
fn a_stalled_worker_leaves_the_active_set_and_its_queue_is_served_after() {
    let (mut ck, addr, pid1) = start_and_freeze("hstall", 2, "round-robin", "1s", 1);
    // 20 requests on new connections from one CPU: round-robin puts 10 in the stopped worker's
    // accept queue. None is read yet.
    let pending: Vec<Pending> = on_one_cpu(move || {
        (0..20)
            .map(|i| send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")))
            .collect()
    });

    let status = wait_out(&mut ck, 1, "stalled", Duration::from_secs(5));
    assert_eq!(status.active, vec![0], "{status:#?}");
    assert_eq!(
        status.slot(1).queue_depth,
        10,
        "10 queued on the stopped worker: {status:#?}"
    );

    burst_without(burst, addr, 100, 1, "stalled");

    signal(pid1, Signal::SIGCONT);
    let status = wait_back(&mut ck, 1, pid1, Duration::from_secs(5));
    assert_eq!(status.active, vec![0, 1], "{status:#?}");

    let queued = finish_all(pending);
    eprintln!("the 20 sent before the stall: {queued:?}");
    assert_eq!(queued.ok, 20, "requests lost: {queued:?}");
    assert_eq!(queued.slot(1), 10, "{queued:?}");
    assert_eq!(queued.pid(pid1), 10, "{queued:?}");
    assert_eq!(queued.slot(0), 10, "{queued:?}");
}

/// What ck knows of a worker's health goes on across `ck upgrade`: a stalled worker is out for
/// the same reason in the new image, and comes back once its queue moves (a new image that
/// forgot why would keep it out for good: no signal would clear).
#[test]
fn an_unhealthy_worker_stays_out_across_an_upgrade_and_comes_back_after() {
    let (mut ck, addr, pid1) = start_and_freeze("hupgr", 2, "round-robin", "1s", 1);
    // 4 requests on new connections from one CPU: 2 wait in the stopped worker's queue.
    let pending: Vec<Pending> = on_one_cpu(move || {
        (0..4)
            .map(|i| send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")))
            .collect()
    });
    wait_out(&mut ck, 1, "stalled", Duration::from_secs(5));

    let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(said.contains("upgraded:"), "{said}");
    let status = ck
        .wait_status("the upgrade done", Duration::from_secs(10), |s| {
            s.upgrades == 1 && s.bpf
        })
        .expect("wait for the upgrade");
    assert!(
        out_for(&status, 1, "stalled"),
        "slot 1 is not out for its stall after the upgrade: {status:#?}"
    );
    assert_eq!(status.worker_pid(1), pid1, "{status:#?}");
    burst_without(burst, addr, 50, 1, "stalled, after the upgrade");

    signal(pid1, Signal::SIGCONT);
    let status = wait_back(&mut ck, 1, pid1, Duration::from_secs(5));
    assert_eq!(status.active, vec![0, 1], "{status:#?}");
    let queued = finish_all(pending);
    assert_eq!(queued.ok, 4, "requests lost: {queued:?}");
    assert_eq!(queued.pid(pid1), 2, "{queued:?}");
}

#[test]
fn least_queue_avoids_a_stalled_worker_then_drops_it() {
    let (mut ck, addr, pid2) = start_and_freeze("hleastq", 3, "least-queue", "500ms", 2);
    // A steady trickle of requests, none read yet: some land in the stopped worker's queue
    // before least-queue sees it grow.
    let mut pending = Vec::new();
    for i in 0..30 {
        pending.push(send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")));
        std::thread::sleep(Duration::from_millis(10));
    }

    let status = wait_out(&mut ck, 2, "stalled", Duration::from_secs(5));
    let depth = status.slot(2).queue_depth;
    assert_eq!(status.active, vec![0, 1], "{status:#?}");
    assert!(
        depth >= 1,
        "nothing queued on the stopped worker: {status:#?}"
    );

    let out = burst_without(burst, addr, 300, 2, "stalled");
    assert!(out.slot(0) > 0 && out.slot(1) > 0, "{out:?}");

    signal(pid2, Signal::SIGCONT);
    let queued = finish_all(pending);
    eprintln!("the 30 sent around the stall: {queued:?}");
    assert_eq!(queued.ok, 30, "requests lost: {queued:?}");
    assert_eq!(
        queued.slot(2),
        depth,
        "the stopped worker answers exactly what was queued on it: {queued:?}"
    );
    assert!(
        queued.slot(2) < 10,
        "least-queue kept feeding the stopped worker: {queued:?}"
    );
    wait_back(&mut ck, 2, pid2, Duration::from_secs(5));
}

/// `--unhealthy-replace-after`: a worker that stays unhealthy is replaced gracefully, as a
/// rolling restart of one: its replacement starts on a free slot, is flipped in once ready, and
/// the unhealthy worker is stopped; the fleet is whole again and serves from healthy workers.
#[test]
fn a_worker_unhealthy_too_long_is_replaced() {
    let dir = TempDir::new("health-replace");
    // Only the worker on slot 1 fails its health check; its replacement lands on another slot.
    let app = demo_app_on_slot(&dir, 1, "--fail-health-after 300ms");
    let (mut ck, port, started) = start_ready(
        "hreplace",
        2,
        &[
            "--probe",
            "http:/healthz",
            "--probe-interval",
            "100ms",
            "--probe-fails",
            "2",
            "--unhealthy-replace-after",
            // Long enough for the test to see the slot out (polling `ck status`) before its
            // replacement, also on a loaded machine.
            "3s",
            "--",
            &app,
        ],
    )
    .expect("start a ready ck");
    let sick = started.worker_pid(1);
    let healthy = started.worker_pid(0);
    wait_out(&mut ck, 1, "probe", Duration::from_secs(5));
    let status = ck
        .wait_status("slot 1 replaced", Duration::from_secs(15), |s| {
            s.ready_count() == 2 && s.slots.len() == 2 && s.slots.iter().all(|slot| slot.slot != 1)
        })
        .expect("wait for the status");
    assert!(
        ck_tests::sys::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
            !pid_alive(sick)
        }),
        "the unhealthy worker {sick} is still running"
    );
    assert_eq!(
        status.worker_pid(0),
        healthy,
        "slot 0 was touched: {status:#?}"
    );
    assert!(
        ck.log().contains("worker unhealthy too long: replacing it"),
        "{}",
        ck.log()
    );
    let tally = burst(local(port), 100);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let pids = status.worker_pids();
    assert!(!pids.contains(&sick));
    assert!(tally.only_from(&pids), "answers from other pids: {tally:?}");
}

/// A worker that accepts one connection every 20 ms, answers it and closes it, on ck's socket.
const SLOW_ACCEPTER: &str = r#"import os, socket, time
s = socket.socket(fileno=3)
s.setblocking(True)
body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()}\n".encode()
answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
while True:
    c, _ = s.accept()
    try:
        c.settimeout(2)
        c.recv(1024)
        c.sendall(answer)
    except OSError:
        pass
    finally:
        c.close()
    time.sleep(0.02)
"#;

#[test]
fn a_worker_that_keeps_up_with_a_queue_never_empty_is_not_marked_stalled() {
    // Three clients, each sending its next request as soon as it has the answer, against a
    // worker that accepts one connection every 20 ms: two or three connections wait in its
    // queue at every sample (every 50 ms with a 200 ms stall timeout), so the depths read
    // 2, 2, 3, 2, ... and never shrink for long, while about 50 connections a second go
    // through. By depths alone it was stalled within 200 ms; with the program's counts of the
    // connections it sent the slot, ck sees them leave the queue.
    let dir = TempDir::new("slow-accepter");
    let app = dir.write("slow_accepter.py", SLOW_ACCEPTER, false);
    let app = app.to_str().expect("UTF-8 path");
    let (ck, port, _) = start_ready(
        "hkeepsup",
        1,
        &["--stall-timeout", "200ms", "--", "python3", app],
    )
    .expect("start a ready ck");
    let addr = local(port);
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let clients: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let mut tally = ck_tests::Tally::default();
                while std::time::Instant::now() < until {
                    tally.add(&ck_tests::http::get_new_conn(addr));
                }
                tally
            })
        })
        .collect();
    let mut total = ck_tests::Tally::default();
    let mut deepest = 0;
    while std::time::Instant::now() < until {
        deepest = deepest.max(ck.status().expect("ck status").slot(0).queue_depth);
        std::thread::sleep(Duration::from_millis(100));
    }
    for client in clients {
        let tally = client.join().expect("client thread");
        total.ok += tally.ok;
        assert_eq!(tally.failed(), 0, "{tally:?}");
    }
    eprintln!("answered {} in 3 s, deepest queue seen {deepest}", total.ok);
    assert!(total.ok >= 60, "{total:?}: the worker did not keep up");
    assert!(
        deepest >= 1,
        "the queue was never seen holding a connection"
    );
    let health = health_lines(&ck);
    assert!(
        !health.contains("worker unhealthy"),
        "a worker that keeps up was marked stalled:\n{health}"
    );
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(0).state, "ready", "{status:#?}");
    assert_eq!(status.active, vec![0], "{status:#?}");
}
