//! The checklist every real server passes under ck (`tests/tests/servers*.rs`), one function
//! for all of them: with 2 ready workers under `--policy round-robin`, every worker gets
//! connections (an exact 20/20 split), a drained slot gets none, a roll under a load that
//! never retries fails no request (with a server that closes idle keep-alive connections at
//! its stop signal, no more than the old workers held then: the promise suite's bound,
//! `promises::fleet`), a SIGKILLed worker fails only what it had accepted (its own held
//! connections, and of the load only requests on connections it had accepted when frozen:
//! `promises::kill`), and a clean stop leaves no process, cgroup, socket or pin.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::churn::{self, Background, SETTLE};
use crate::ck::{Ck, control_socket, lock_file, pins_dir};
use crate::http::{KeepAlive, burst_without};
use crate::load::Mode;
use crate::promises::fleet::{allowed_failures, assert_within_allowed, held_at_stop_signals};
use crate::promises::kill::{assert_only_accepted_failed, freeze_and_kill};
use crate::promises::servers::KeepAliveStop;
use crate::sys::{self, cgroup_dir, port_bindable};
use crate::{READY_TIMEOUT, burst_pinned, local};

/// Keep-alive connections held open across the SIGKILL.
const HELD: usize = 6;

/// How a server is checked where servers differ.
#[derive(Debug, Clone, Copy)]
pub struct Checks {
    /// The name in the output.
    pub label: &'static str,
    /// The load during the roll (it never retries a request).
    pub roll_mode: Mode,
    /// Requests a second of the loads (Python and Ruby servers on two shared CPUs get less).
    pub rate: f64,
    /// What the server does with idle keep-alive connections at its stop signal: what a
    /// keep-alive load may lose at a roll, and whether held connections are checked across
    /// the SIGKILL (not when it keeps none idle, as gunicorn's sync workers).
    pub keep_alive_stop: KeepAliveStop,
}

impl Checks {
    /// A server that closes keep-alive connections gracefully, rolled under a new-connection
    /// load, at `rate`.
    pub fn new(label: &'static str, rate: f64) -> Checks {
        Checks {
            label,
            roll_mode: Mode::NewConnection,
            rate,
            keep_alive_stop: KeepAliveStop::ClosesGracefully,
        }
    }

    /// Whether the server keeps idle keep-alive connections open.
    fn keeps_alive(&self) -> bool {
        self.keep_alive_stop != KeepAliveStop::NoneIdle
    }
}

/// Runs the whole checklist on `ck` (2 ready workers on `port`, round-robin) and stops it.
pub fn run(mut ck: Ck, port: u16, checks: Checks) {
    spreads_and_drains(&mut ck, port, checks.label);
    rolls_under_load(&mut ck, port, checks);
    a_kill_fails_what_it_held(&mut ck, port, checks);
    stops_clean(ck, port, checks.label);
}

/// The two ready slots.
fn ready_slots(ck: &mut Ck) -> Vec<u32> {
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    status.ready().map(|s| s.slot).collect()
}

/// 40 pinned requests split 20/20; with the second slot drained, 40 more all go to the first;
/// undrained, the slot is back in the active set.
fn spreads_and_drains(ck: &mut Ck, port: u16, label: &str) {
    let slots = ready_slots(ck);
    let tally = burst_pinned(local(port), 40);
    eprintln!("{label}: spread {tally:?}");
    assert_eq!(tally.ok, 40, "{label}: {tally:?}");
    for slot in &slots {
        assert_eq!(tally.slot(*slot), 20, "{label}: slot {slot}: {tally:?}");
    }
    let drained = slots[1].to_string();
    ck.ctl_ok(&["drain", &drained]).expect("ck drain");
    burst_without(burst_pinned, local(port), 40, slots[1], "drained");
    ck.ctl_ok(&["undrain", &drained]).expect("ck undrain");
    ck.wait_status("both slots active again", READY_TIMEOUT, |s| {
        s.active.len() == 2
    })
    .expect("wait for the status");
}

/// Two `ck reload`s under a load that never retries: every reload succeeds, no more requests
/// fail than [`allowed_failures`], and none of the first workers is left.
fn rolls_under_load(ck: &mut Ck, port: u16, checks: Checks) {
    let log_before = ck.log().len();
    let load = Background::start_with(port, checks.roll_mode, false, checks.rate);
    let run = churn::reload_times_under(ck, load, 2);
    run.assert_all_succeeded(ck);
    let label = format!("{} roll", checks.label);
    churn::print_report(&label, &run.report);
    let held = held_at_stop_signals(&ck.log()[log_before..]);
    let allowed = allowed_failures(checks.keep_alive_stop, checks.roll_mode, &held);
    assert_within_allowed(&label, &run.report, allowed, &held);
    assert!(
        run.after.worker_pids().is_disjoint(&run.reloads[0].before),
        "{}: old workers still listed: {:#?}",
        checks.label,
        run.after
    );
}

/// Opens [`HELD`] keep-alive connections from one CPU (so round-robin alternates exactly):
/// each with the slot that answered its first request.
fn hold_connections(port: u16) -> Vec<(KeepAlive, u32)> {
    sys::on_one_cpu(move || {
        (0..HELD)
            .map(|i| {
                let mut conn =
                    KeepAlive::connect(local(port)).unwrap_or_else(|e| panic!("conn {i}: {e}"));
                let answer = conn.get().unwrap_or_else(|e| panic!("answer {i}: {e}"));
                (conn, answer.slot)
            })
            .collect()
    })
}

/// Under a new-connection load that never retries, freezes one worker and SIGKILLs its whole
/// cgroup (`promises::kill`): of the held connections exactly those it held fail, the others
/// still answer; the load loses only requests on connections it had accepted when frozen;
/// the slot gets a ready replacement.
fn a_kill_fails_what_it_held(ck: &mut Ck, port: u16, checks: Checks) {
    let label = checks.label;
    let slots = ready_slots(ck);
    let held = if checks.keeps_alive() {
        hold_connections(port)
    } else {
        Vec::new()
    };
    let victim_slot = held.first().map_or(slots[0], |(_, slot)| *slot);
    let load = Background::start_with(port, Mode::NewConnection, false, checks.rate);
    std::thread::sleep(SETTLE);
    let frozen = freeze_and_kill(ck, port, victim_slot, &load);
    let victim = frozen.pid;
    let mut lost = 0;
    for (i, (mut conn, slot)) in held.into_iter().enumerate() {
        match conn.get() {
            Ok(answer) => assert_eq!(answer.slot, slot, "{label}: held connection {i} moved"),
            Err(e) if slot == victim_slot => {
                eprintln!("{label}: held connection {i} on the killed worker: {e}");
                lost += 1;
            }
            Err(e) => panic!("{label}: held connection {i} on slot {slot} (alive) failed: {e}"),
        }
    }
    ck.wait_status("the killed worker replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.slot(victim_slot).pid.is_some_and(|p| p != victim)
    })
    .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let label = format!("{label} kill");
    let report = load.finish_and_print(&label);
    if checks.keeps_alive() {
        assert_eq!(
            lost,
            HELD / 2,
            "{label}: the killed worker held half the connections"
        );
    }
    assert_only_accepted_failed(&label, &report, &frozen);
}

/// Every process of the instance's cgroup tree.
fn cgroup_pids(dir: &std::path::Path) -> BTreeSet<u32> {
    let mut pids: BTreeSet<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            pids.extend(cgroup_pids(&entry.path()));
        }
    }
    pids
}

/// `ck stop`: ck exits 0, and every process the instance had (its cgroup's, the workers'
/// children nginx and gunicorn start included) is gone, with the cgroup, the pins, the control
/// socket and every listening socket on the port.
pub fn stops_clean(ck: Ck, port: u16, label: &str) {
    stops_clean_with(ck, port, label, &["stop"], 2);
}

/// Like [`stops_clean`], with the stop asked by `ck STOP...` (e.g. `["stop", "--wait"]`) and at
/// least `workers` processes found before it; the instance's lock file is gone too.
pub fn stops_clean_with(mut ck: Ck, port: u16, label: &str, stop: &[&str], workers: usize) {
    let name = ck.name().to_string();
    let cgroup = cgroup_dir(&name).expect("cgroup2 is mounted");
    let mut pids = cgroup_pids(&cgroup);
    pids.extend(sys::instance_processes(&name));
    assert!(
        pids.len() >= workers,
        "{label}: {} process(es) found in {cgroup:?}, fewer than {workers}",
        pids.len()
    );
    ck.ctl_ok(stop).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let alive = sys::wait_all_dead(&pids, Duration::from_secs(5));
    assert!(alive.is_empty(), "{label}: processes left: {alive:?}");
    assert!(
        !cgroup.exists(),
        "{label}: cgroup left: {}",
        cgroup.display()
    );
    assert!(!pins_dir(&name).exists(), "{label}: pins left");
    assert!(
        !control_socket(&name).exists(),
        "{label}: control socket left"
    );
    assert!(!lock_file(&name).exists(), "{label}: lock file left");
    assert!(
        port_bindable(port),
        "{label}: a socket is left on port {port}"
    );
}
