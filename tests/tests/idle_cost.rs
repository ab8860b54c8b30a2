//! An idle ck sleeps between its once-a-second chores: a fleet of two demo workers that nobody
//! connects to wakes ck no more often than README promises (the median of its windows), with
//! every policy and with `--no-bpf`; and the idle check fails a ck that burns more CPU on
//! purpose (its self-test, measured beside them). The checks and their figures are
//! `ck_tests::promises::idle`'s, shared with the promise suite.
//!
//! Here the checks run on the debug build, beside other tests, and hold ck to the promise's
//! wake-ups alone (`Bounds::WakeupsOnly`): they count what ck does (its ticks, canaries and
//! scans), the same in a debug build and on a busy machine. The CPU each wake-up costs is not
//! (a debug build spends several times the release build's), so the promise's CPU figure is
//! held on the release build, with nothing else running, by `cargo xtask promises`. The
//! self-test holds its ck to both: a burn of twice a window's CPU budget fails either build.

use ck_tests::promises::idle::{Bounds, idle_fleets_keep};

#[test]
fn idle_fleets_of_every_policy_leave_ck_asleep_and_a_burning_ck_fails_the_check() {
    idle_fleets_keep(Bounds::WakeupsOnly);
}
