//! An idle ck sleeps between its once-a-second chores: a fleet of two demo workers that nobody
//! connects to wakes ck no more often than README promises (the median of its windows), with
//! every policy and with `--no-bpf`; and the idle check fails a ck that burns more CPU on
//! purpose (its self-test). The checks and their figures are `ck_tests::promises::idle`'s,
//! shared with the promise suite.
//!
//! Here the checks run on the debug build, beside other tests, and hold ck to the promise's
//! wake-ups alone (`Bounds::WakeupsOnly`): they count what ck does (its ticks, canaries and
//! scans), the same in a debug build and on a busy machine. The CPU each wake-up costs is not
//! (a debug build spends several times the release build's), so the promise's CPU figure is
//! held on the release build, one check at a time, by `cargo xtask promises`. The self-test
//! holds its ck to both: a burn of twice a window's CPU budget fails either build.

use ck_tests::promises::idle::{Bounds, CONFIGURATIONS, idle_is_cheap, the_check_catches_a_burn};

/// Runs [`idle_is_cheap`] on the configuration named `what` of [`CONFIGURATIONS`].
fn check(what: &str) {
    let (_, args) = CONFIGURATIONS
        .iter()
        .find(|(name, _)| *name == what)
        .unwrap_or_else(|| panic!("no idle configuration {what}"));
    idle_is_cheap(what, args, Bounds::WakeupsOnly);
}

#[test]
fn an_idle_fleet_leaves_ck_asleep() {
    check("idle");
}

#[test]
fn an_idle_least_queue_fleet_leaves_ck_asleep() {
    check("idle-lq");
}

#[test]
fn an_idle_least_conn_fleet_leaves_ck_asleep() {
    check("idle-lc");
}

#[test]
fn an_idle_hash_fleet_leaves_ck_asleep() {
    check("idle-hash");
}

#[test]
fn an_idle_sticky_fleet_leaves_ck_asleep() {
    check("idle-sticky");
}

#[test]
fn an_idle_fleet_without_bpf_leaves_ck_asleep() {
    check("idle-nobpf");
}

#[test]
fn the_idle_check_fails_a_ck_that_burns_cpu() {
    the_check_catches_a_burn();
}
