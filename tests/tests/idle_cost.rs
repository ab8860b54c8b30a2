//! The spin guard: an idle ck costs next to nothing. A fleet of demo workers that nobody
//! connects to leaves ck asleep between its once-a-second chores; a supervisor that spins (a
//! tick loop that wakes itself, a busy poll) burns up to a core, about 3,000 ms of CPU in 3 s,
//! and wakes thousands of times a second, where a healthy one spends a few milliseconds and
//! wakes a few times a second. The bounds (300 ms, 300 wake-ups) are a tenth of a spin and far
//! above a healthy ck on a loaded machine: bounds on what ck did, not timings. (The wake-ups
//! catch a spin that a fast machine runs cheaply.)

use std::time::Duration;

use ck_tests::cpu::spent_over;
use ck_tests::{READY_TIMEOUT, start_ready};

/// How long ck is watched idle.
const WINDOW: Duration = Duration::from_secs(3);
/// ck's CPU over [`WINDOW`] that only a spin reaches.
const SPIN: Duration = Duration::from_millis(300);
/// ck's wake-ups over [`WINDOW`] that only a spin reaches.
const SPIN_WAKEUPS: u64 = 300;

/// Starts a demo fleet with `args`, lets its start settle, and asserts ck's own CPU and
/// wake-ups over [`WINDOW`] of idle stay under [`SPIN`] and [`SPIN_WAKEUPS`].
fn assert_idle_is_cheap(what: &str, args: &[&str]) {
    let (mut ck, _port, _status) = start_ready(what, 2, args);
    // Measured from the fleet's first moments (a spin at start is a spin), once the start's
    // one-off work, the exit watch's load, is over.
    if !args.contains(&"--no-bpf") {
        ck.wait_status("the exit watch loaded", READY_TIMEOUT, |s| {
            s.exits_watched.is_some()
        });
    }
    let spent = spent_over(ck.pid(), WINDOW).expect("ck exited while idle");
    assert!(
        spent.cpu < SPIN && spent.wakeups < SPIN_WAKEUPS,
        "ck ({what}, {args:?}) spent {:?} of CPU and woke {} times in {WINDOW:?} with nothing \
         to do: something spins\n{}",
        spent.cpu,
        spent.wakeups,
        ck.log()
    );
}

#[test]
fn an_idle_fleet_leaves_ck_asleep() {
    assert_idle_is_cheap("idle", &[]);
}

#[test]
fn an_idle_least_queue_fleet_leaves_ck_asleep() {
    assert_idle_is_cheap("idle-lq", &["--policy", "least-queue"]);
}

#[test]
fn an_idle_fleet_without_bpf_leaves_ck_asleep() {
    assert_idle_is_cheap("idle-nobpf", &["--no-bpf"]);
}
