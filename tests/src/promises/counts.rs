//! Open connections per worker are counted exactly, whatever happens to the fleet: the first
//! connections of a fleet's first moments (made while every worker is still starting, and
//! counted then), and held connections across a scale-up, a scale-down, a roll, `ck upgrade`
//! and a `--survive-supervisor` take-back, on ck's sockets and with `--adopt`. The clients
//! count what each worker answered on the connections they hold; ck's counts (`ck status`,
//! read from the kernel's counters) must be the same, slot by slot.
use std::collections::BTreeMap;
use std::thread;
use std::time::Duration;

use crate::adopted::{self, Server as Adopted};
use crate::ck::{Ck, Status};
use crate::http::{KeepAlive, hold, hold_from_first};
use crate::sys::free_port;
use crate::{READY_TIMEOUT, ck_bin, local, start, start_on};

/// How long counts get to follow connections that close (the workers see the clients' FIN).
const SETTLE: Duration = Duration::from_secs(10);
/// Connections held from a fleet's first moment.
const FIRST: usize = 200;
/// How long the first workers take to say READY=1 (`--ready notify`): the client's
/// connections are made and answered long before, while every worker is still starting.
const FIRST_READY_AFTER: &str = "10s";

/// Connections held open by the test, with what each slot answered on them.
#[derive(Default)]
struct Held {
    conns: Vec<KeepAlive>,
    answered: BTreeMap<u32, u64>,
}

impl Held {
    /// Opens `n` more on `port` (from one CPU: round-robin alternates exactly).
    fn more(&mut self, port: u16, n: usize) {
        let (conns, answered) = hold(local(port), n);
        self.conns.extend(conns);
        for (slot, count) in answered {
            *self.answered.entry(slot).or_insert(0) += count;
        }
    }

    /// Closes them all.
    fn close(&mut self) {
        self.conns.clear();
        self.answered.clear();
    }
}

/// ck's counts, slots that count none left out (a slot's clients may all be gone).
fn counted(status: &Status) -> BTreeMap<u32, u64> {
    let mut counts = status.connections();
    counts.retain(|_, n| *n > 0);
    counts
}

/// Waits until ck counts exactly what `held` holds, slot by slot (panics with both when it
/// does not within [`SETTLE`]), and returns the status that does.
fn assert_counts(ck: &mut Ck, held: &Held, after: &str) -> Status {
    let want = held.answered.clone();
    let what = format!("ck to count what the clients hold after {after}: {want:?}");
    let status = ck
        .wait_status(&what, SETTLE, |s| counted(s) == want)
        .expect("wait for the status");
    assert_eq!(status.connection_count, "kernel", "after {after}");
    eprintln!(
        "{}: after {after}, ck counts what the clients hold: {want:?}",
        ck.name()
    );
    status
}

/// A client holds [`FIRST`] connections from the moment the port answers, on a fleet of two
/// demo workers started with `args` after it, which say READY=1 only [`FIRST_READY_AFTER`]
/// after they start: ck counts every one of them, per slot, while every worker is still
/// starting (the status that shows the counts shows no slot ready), and once they are ready.
fn first_connections_counted(what: &str, args: &[&str]) {
    let bin = ck_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let mut all = args.to_vec();
    all.extend([
        "--ready",
        "notify",
        "--",
        bin,
        "demo-worker",
        "--ready-after",
        FIRST_READY_AFTER,
    ]);
    let port = free_port();
    let client = thread::spawn(move || hold_from_first(local(port), FIRST, READY_TIMEOUT));
    let mut ck = start_on(what, port, &all, &[]).expect("start ck");
    let (conns, answered) = client.join().expect("the client");
    assert_eq!(answered.values().sum::<u64>(), FIRST as u64);
    let held = Held { conns, answered };
    let counted_early = assert_counts(&mut ck, &held, "the first moments");
    let states: Vec<(u32, &str)> = counted_early
        .slots
        .iter()
        .map(|s| (s.slot, s.state.as_str()))
        .collect();
    assert!(
        states.len() == 2 && states.iter().all(|(_, state)| *state != "ready"),
        "{what}: a worker was ready before ck counted the first connections (they say \
         READY=1 {FIRST_READY_AFTER} after they start), the check proves nothing: {states:?}\n{}",
        ck.log()
    );
    eprintln!(
        "{what}: the kernel counted the first {FIRST} connections while no worker was ready: \
         {states:?}"
    );
    ck.wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_counts(&mut ck, &held, "the workers became ready");
}

/// The first connections of a fleet are counted, on ck's sockets and with `--adopt`.
pub fn the_first_connections_are_counted() {
    first_connections_counted_on_cks_sockets();
    first_connections_counted_with_adopt();
}

/// [`first_connections_counted`] on ck's sockets, least-conn (which steers by these counts).
pub fn first_connections_counted_on_cks_sockets() {
    first_connections_counted("first-conns", &["-w", "2", "--policy", "least-conn"]);
}

/// [`first_connections_counted`] on demo workers that bind the port themselves, least-conn.
pub fn first_connections_counted_with_adopt() {
    let adopt = ["-w", "2", "--adopt", "--policy", "least-conn"];
    first_connections_counted("first-conns-adopt", &adopt);
}

/// Runs every change of [`counts_stay_exact`] on a fleet of ck's demo workers on ck's sockets.
pub fn counts_stay_exact_on_cks_sockets() {
    let args = ["-w", "2", "--policy", "round-robin", "--survive-supervisor"];
    counts_stay_exact("counts", &args, 2);
}

/// Runs every change of [`counts_stay_exact`] on demo workers that bind the port themselves.
pub fn counts_stay_exact_with_adopt() {
    let server = Adopted::Demo;
    let args = server.args(&["--survive-supervisor"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    counts_stay_exact("counts-adopt", &args, server.workers());
}

/// With `workers` ready workers started with `args` (round-robin, `--survive-supervisor`): the
/// counts match what the clients hold after the start, a scale-up, a scale-down, a roll, an
/// upgrade and a take-back (kill -9, then `ck run` again); then `ck stop` leaves nothing.
fn counts_stay_exact(what: &str, args: &[&str], workers: usize) {
    let (mut ck, port) = start(what, args).expect("start ck");
    ck.wait_ready(workers, READY_TIMEOUT)
        .expect("wait for ready slots");
    let mut held = Held::default();
    held.more(port, 10);
    assert_counts(&mut ck, &held, "the start");

    ck.ctl_ok(&["scale", &(workers + 1).to_string()])
        .expect("ck scale");
    ck.wait_ready(workers + 1, READY_TIMEOUT)
        .expect("wait for ready slots");
    held.more(port, 6);
    assert_counts(&mut ck, &held, "a scale-up");

    // A worker leaving takes its connections (the demo worker closes idle ones when it stops):
    // what is left is counted, then new ones.
    held.close();
    ck.ctl_ok(&["scale", &workers.to_string()])
        .expect("ck scale");
    ck.wait_status("scaled down", READY_TIMEOUT, |s| s.slots.len() == workers)
        .expect("wait for the status");
    assert_counts(&mut ck, &held, "a scale-down");
    held.more(port, 8);
    assert_counts(&mut ck, &held, "connections after a scale-down");

    held.close();
    ck.ctl_ok(&["reload"]).expect("ck reload");
    assert_counts(&mut ck, &held, "a roll");
    held.more(port, 8);
    assert_counts(&mut ck, &held, "connections after a roll");

    let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(said.contains("upgraded:"), "{said}");
    ck.wait_status("upgraded", READY_TIMEOUT, |s| s.upgrades == 1 && s.bpf)
        .expect("wait for the status");
    assert_counts(&mut ck, &held, "`ck upgrade`");
    held.more(port, 4);
    assert_counts(&mut ck, &held, "connections after `ck upgrade`");

    let name = ck.name().to_string();
    let pids = ck.status().expect("ck status").worker_pids();
    ck.kill_supervisor().expect("kill the supervisor");
    ck.abandon().expect("abandon the dead ck");
    held.more(port, 4);
    let args_again = again(args, port);
    let args_again: Vec<&str> = args_again.iter().map(String::as_str).collect();
    let mut back = Ck::start(&name, &args_again).expect("start ck");
    back.wait_ready(workers, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(
        back.status().expect("ck status").worker_pids(),
        pids,
        "the same workers, taken back"
    );
    assert_counts(&mut back, &held, "a take-back");
    held.more(port, 4);
    assert_counts(&mut back, &held, "connections after a take-back");

    held.close();
    adopted::stop_and_assert_clean(back, port, pids);
}

/// `args` with the port and probe base of a fleet on `port`, for `ck run` again.
fn again(args: &[&str], port: u16) -> Vec<String> {
    let mut all = vec![
        "--port".to_string(),
        port.to_string(),
        "--probe-port-base".to_string(),
        crate::probe_base_for(port).to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    all
}
