//! Worker health: a worker that fails its probes (`--probe`), misses its watchdog heartbeats
//! (`--watchdog`) or stops accepting (`--stall-timeout`) leaves the active set and gets no new
//! connection, while its socket stays open: its process lives on, its keep-alive connections
//! and the connections queued on it are still served, and it comes back once healthy again.

use std::time::Duration;

use ck_tests::http::{Pending, send_new_conn};
use ck_tests::sys::{TempDir, on_one_cpu, pid_alive, poll_until, signal};
use ck_tests::{Ck, KeepAlive, Tally, burst, burst_pinned, ck_bin, local, start_ready};
use nix::sys::signal::Signal;
use serde_json::Value;

/// Starts `ck run --port P -w WORKERS --probe-port-base B ARGS...` on a free port under the name
/// `t-<what>-<port>`, waits until every worker is ready, and returns it with the port.
fn launch(what: &str, workers: usize, args: &[&str]) -> (Ck, u16) {
    let (ck, port, _) = start_ready(what, workers, args);
    (ck, port)
}

/// Writes an executable APP to `dir` that runs `ck demo-worker SPECIAL` on slot `slot` and a
/// plain `ck demo-worker` on every other slot; returns its path.
fn app_with_special_slot(dir: &TempDir, slot: u32, special: &str) -> String {
    let script = format!(
        "#!/bin/sh\nif [ \"$CK_SLOT\" = {slot} ]; then exec {ck} demo-worker {special}; fi\n\
         exec {ck} demo-worker\n",
        ck = ck_bin().display()
    );
    dir.write("app.sh", &script, true)
        .to_str()
        .expect("utf-8 temp path")
        .to_string()
}

/// `ck status --json` as JSON (for the fields the typed `Status` does not carry: `unhealthy`,
/// `queue_depth`, `probe_hits`), or why it failed.
fn try_raw_status(ck: &Ck) -> Result<Value, String> {
    let out = ck.ctl(&["status", "--json"]);
    if !out.status.success() {
        return Err(format!(
            "ck status failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("status JSON: {e}"))
}

/// `ck status --json` as JSON.
fn raw_status(ck: &Ck) -> Value {
    try_raw_status(ck).unwrap_or_else(|e| panic!("{e}\n--- ck log ---\n{}", ck.log()))
}

/// Slot `slot`'s entry of a raw status.
fn slot_of(status: &Value, slot: u32) -> &Value {
    status["slots"]
        .as_array()
        .and_then(|slots| {
            slots
                .iter()
                .find(|s| s["slot"].as_u64() == Some(u64::from(slot)))
        })
        .unwrap_or_else(|| panic!("no slot {slot} in {status:#}"))
}

/// The active set of a raw status.
fn active(status: &Value) -> Vec<u64> {
    status["active"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Whether `slot` is in the active set of a raw status.
fn is_active(status: &Value, slot: u32) -> bool {
    active(status).contains(&u64::from(slot))
}

/// Slot `slot`'s `unhealthy` reasons (`None` when healthy).
fn unhealthy(status: &Value, slot: u32) -> Option<String> {
    slot_of(status, slot)["unhealthy"]
        .as_str()
        .map(str::to_string)
}

/// Slot `slot`'s state.
fn state(status: &Value, slot: u32) -> String {
    slot_of(status, slot)["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Slot `slot`'s worker pid.
fn pid_of(status: &Value, slot: u32) -> u32 {
    slot_of(status, slot)["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or_else(|| panic!("slot {slot} has no worker: {status:#}"))
}

/// Polls the raw status until `done` holds for it (at most `timeout`) and returns it.
///
/// # Panics
/// On timeout, with the last status and ck's log.
fn wait_raw(ck: &Ck, what: &str, timeout: Duration, mut done: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Err("no status yet".to_string());
    let found = poll_until(timeout, Duration::from_millis(50), || {
        last = try_raw_status(ck);
        last.as_ref().is_ok_and(&mut done)
    });
    match last {
        Ok(status) if found => status,
        last => panic!(
            "timed out after {timeout:?} waiting for {what}; last status: {last:#?}\n\
             --- ck log ---\n{}",
            ck.log()
        ),
    }
}

/// Slot `slot` is unhealthy for `reason` (among others) and out of the active set.
fn out_for(status: &Value, slot: u32, reason: &str) -> bool {
    unhealthy(status, slot).is_some_and(|r| r.split('+').any(|r| r == reason))
        && state(status, slot) == "unhealthy"
        && !is_active(status, slot)
}

/// Slot `slot` is healthy, ready and back in the active set.
fn back_in(status: &Value, slot: u32) -> bool {
    unhealthy(status, slot).is_none() && state(status, slot) == "ready" && is_active(status, slot)
}

/// The lines of ck's log that mention health.
fn health_lines(ck: &Ck) -> String {
    ck.log()
        .lines()
        .filter(|l| l.contains("healthy") || l.contains("stall"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Finishes every pending request and tallies the answers.
fn finish_all(pending: Vec<Pending>) -> Tally {
    let mut tally = Tally::default();
    for p in pending {
        tally.add(&p.finish());
    }
    tally
}

#[test]
fn failing_probes_take_a_worker_out_until_they_pass_again() {
    let dir = TempDir::new("health-probe");
    let app = app_with_special_slot(
        &dir,
        1,
        "--fail-health-after 1500ms --recover-health-after 5s",
    );
    let (ck, port) = launch(
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
    );
    let addr = local(port);

    // Before the failure: a keep-alive connection on slot 1.
    let (mut kept, first) = (0..40)
        .map(|_| {
            let mut conn = KeepAlive::connect(addr).expect("keep-alive connect");
            let answer = conn.get().expect("first answer on a keep-alive connection");
            (conn, answer)
        })
        .find(|(_, answer)| answer.slot == 1)
        .expect("no keep-alive connection out of 40 landed on slot 1");
    eprintln!("keep-alive connection on slot 1 (pid {})", first.pid);

    let status = wait_raw(
        &ck,
        "slot 1 unhealthy (probe)",
        Duration::from_secs(5),
        |s| out_for(s, 1, "probe"),
    );
    eprintln!(
        "slot 1 out: unhealthy={:?}, active={:?}",
        unhealthy(&status, 1),
        active(&status)
    );
    assert_eq!(
        pid_of(&status, 1),
        first.pid,
        "slot 1 was restarted: {status:#}"
    );
    assert_eq!(active(&status), vec![0, 2], "{status:#}");

    let out = burst_pinned(addr, 400);
    eprintln!("while slot 1 is unhealthy: {out:?}");
    assert_eq!(out.ok, 400, "every request answered: {out:?}");
    assert_eq!(
        out.slot(1),
        0,
        "unhealthy slot 1 got new connections: {out:?}"
    );
    assert_eq!(out.slot(0), 200, "{out:?}");
    assert_eq!(out.slot(2), 200, "{out:?}");

    // Its socket is open and its worker serves the connection it has.
    for i in 0..5 {
        let again = kept
            .get()
            .unwrap_or_else(|e| panic!("keep-alive request {i} on unhealthy slot 1: {e}"));
        assert_eq!(again, first, "keep-alive connection moved");
    }
    assert!(pid_alive(first.pid), "unhealthy worker {} died", first.pid);
    let status = raw_status(&ck);
    assert!(
        out_for(&status, 1, "probe"),
        "slot 1 came back before the checks above were done (they would prove nothing): \
         {status:#}"
    );

    // /healthz answers 200 again 5 s after the worker started: two passes bring it back.
    let status = wait_raw(
        &ck,
        "slot 1 back in the active set",
        Duration::from_secs(10),
        |s| back_in(s, 1),
    );
    assert_eq!(
        pid_of(&status, 1),
        first.pid,
        "slot 1 was restarted: {status:#}"
    );
    assert_eq!(active(&status), vec![0, 1, 2], "{status:#}");
    eprintln!("health log:\n{}", health_lines(&ck));

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
    let app = app_with_special_slot(&dir, 1, "--watchdog-stop-after 1s");
    let (ck, port) = launch("hwatchdog", 2, &["--watchdog", "300ms", "--", &app]);
    let addr = local(port);
    let pid1 = pid_of(&raw_status(&ck), 1);

    let status = wait_raw(
        &ck,
        "slot 1 unhealthy (watchdog)",
        Duration::from_secs(5),
        |s| out_for(s, 1, "watchdog"),
    );
    eprintln!(
        "slot 1 out: unhealthy={:?}, active={:?}",
        unhealthy(&status, 1),
        active(&status)
    );
    assert_eq!(state(&status, 0), "ready", "{status:#}");
    assert_eq!(unhealthy(&status, 0), None, "{status:#}");
    assert_eq!(active(&status), vec![0], "{status:#}");
    assert_eq!(pid_of(&status, 1), pid1, "slot 1 was restarted: {status:#}");

    let out = burst(addr, 200);
    eprintln!("while slot 1 is unhealthy: {out:?}");
    assert_eq!(out.ok, 200, "every request answered: {out:?}");
    assert_eq!(
        out.slot(1),
        0,
        "unhealthy slot 1 got new connections: {out:?}"
    );
    assert_eq!(out.slot(0), 200, "{out:?}");

    // Slot 0 kept its heartbeat; slot 1 (still silent) stays out, alive.
    let status = raw_status(&ck);
    assert!(back_in(&status, 0), "slot 0 left: {status:#}");
    assert!(out_for(&status, 1, "watchdog"), "{status:#}");
    assert!(pid_alive(pid1), "unhealthy worker {pid1} died");
    eprintln!("health log:\n{}", health_lines(&ck));
}

#[test]
fn a_stalled_worker_leaves_the_active_set_and_its_queue_is_served_after() {
    let (ck, port) = launch(
        "hstall",
        2,
        &["--policy", "round-robin", "--stall-timeout", "1s"],
    );
    let addr = local(port);
    let pid1 = pid_of(&raw_status(&ck), 1);

    signal(pid1, Signal::SIGSTOP);
    // 20 requests on new connections from one CPU: round-robin puts 10 in the stopped worker's
    // accept queue. None is read yet.
    let pending: Vec<Pending> = on_one_cpu(move || {
        (0..20)
            .map(|i| send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")))
            .collect()
    });

    let status = wait_raw(&ck, "slot 1 stalled", Duration::from_secs(5), |s| {
        out_for(s, 1, "stalled")
    });
    let depth = slot_of(&status, 1)["queue_depth"].as_u64();
    eprintln!(
        "slot 1 out: unhealthy={:?}, queue_depth={depth:?}, active={:?}",
        unhealthy(&status, 1),
        active(&status)
    );
    assert_eq!(active(&status), vec![0], "{status:#}");
    assert_eq!(
        depth,
        Some(10),
        "10 queued on the stopped worker: {status:#}"
    );

    let out = burst(addr, 100);
    eprintln!("while slot 1 is stalled: {out:?}");
    assert_eq!(out.ok, 100, "every request answered: {out:?}");
    assert_eq!(
        out.slot(1),
        0,
        "stalled slot 1 got new connections: {out:?}"
    );

    signal(pid1, Signal::SIGCONT);
    let status = wait_raw(
        &ck,
        "slot 1 back in the active set",
        Duration::from_secs(5),
        |s| back_in(s, 1),
    );
    assert_eq!(pid_of(&status, 1), pid1, "slot 1 was restarted: {status:#}");
    assert_eq!(active(&status), vec![0, 1], "{status:#}");
    eprintln!("health log:\n{}", health_lines(&ck));

    let queued = finish_all(pending);
    eprintln!("the 20 sent before the stall: {queued:?}");
    assert_eq!(queued.ok, 20, "requests lost: {queued:?}");
    assert_eq!(queued.slot(1), 10, "{queued:?}");
    assert_eq!(queued.pid(pid1), 10, "{queued:?}");
    assert_eq!(queued.slot(0), 10, "{queued:?}");
}

#[test]
fn least_queue_avoids_a_stalled_worker_then_drops_it() {
    let (ck, port) = launch(
        "hleastq",
        3,
        &["--policy", "least-queue", "--stall-timeout", "500ms"],
    );
    let addr = local(port);
    let pid2 = pid_of(&raw_status(&ck), 2);

    signal(pid2, Signal::SIGSTOP);
    // A steady trickle of requests, none read yet: some land in the stopped worker's queue
    // before least-queue sees it grow.
    let mut pending = Vec::new();
    for i in 0..30 {
        pending.push(send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")));
        std::thread::sleep(Duration::from_millis(10));
    }

    let status = wait_raw(&ck, "slot 2 stalled", Duration::from_secs(5), |s| {
        out_for(s, 2, "stalled")
    });
    let depth = slot_of(&status, 2)["queue_depth"].as_u64().unwrap_or(0);
    eprintln!(
        "slot 2 out: unhealthy={:?}, queue_depth={depth}, active={:?}",
        unhealthy(&status, 2),
        active(&status)
    );
    assert_eq!(active(&status), vec![0, 1], "{status:#}");
    assert!(
        depth >= 1,
        "nothing queued on the stopped worker: {status:#}"
    );

    let out = burst(addr, 300);
    eprintln!("while slot 2 is stalled: {out:?}");
    assert_eq!(out.ok, 300, "every request answered: {out:?}");
    assert_eq!(
        out.slot(2),
        0,
        "stalled slot 2 got new connections: {out:?}"
    );
    assert!(out.slot(0) > 0 && out.slot(1) > 0, "{out:?}");

    signal(pid2, Signal::SIGCONT);
    let queued = finish_all(pending);
    eprintln!("the 30 sent around the stall: {queued:?}");
    assert_eq!(queued.ok, 30, "requests lost: {queued:?}");
    assert_eq!(
        u64::from(queued.slot(2)),
        depth,
        "the stopped worker answers exactly what was queued on it: {queued:?}"
    );
    assert!(
        queued.slot(2) < 10,
        "least-queue kept feeding the stopped worker: {queued:?}"
    );
    let status = wait_raw(
        &ck,
        "slot 2 back in the active set",
        Duration::from_secs(5),
        |s| back_in(s, 2),
    );
    assert_eq!(pid_of(&status, 2), pid2, "slot 2 was restarted: {status:#}");
    eprintln!("health log:\n{}", health_lines(&ck));
}
