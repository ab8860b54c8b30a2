//! The spin guard: an idle ck costs next to nothing. A fleet of demo workers that nobody
//! connects to leaves ck asleep between its once-a-second chores; a supervisor that spins (a
//! tick loop that wakes itself, a busy poll) burns up to a core. The bounds are in
//! `ck_tests::promises::quiet` (shared with the promise suite).

use ck_tests::promises::quiet::idle_is_cheap;

#[test]
fn an_idle_fleet_leaves_ck_asleep() {
    idle_is_cheap("idle", &[]);
}

#[test]
fn an_idle_least_queue_fleet_leaves_ck_asleep() {
    idle_is_cheap("idle-lq", &["--policy", "least-queue"]);
}

#[test]
fn an_idle_fleet_without_bpf_leaves_ck_asleep() {
    idle_is_cheap("idle-nobpf", &["--no-bpf"]);
}
