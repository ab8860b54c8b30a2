//! Spreading: new connections reach every ready worker, evenly with `--policy round-robin`.

use ck::settings::run_config::Policy;
use ck_tests::{burst, burst_pinned, local, start_ready};

/// Sequential new connections per run.
const N: u32 = 400;

#[test]
fn hash_policy_reaches_every_worker() {
    let (ck, port, status) =
        start_ready("spread-hash", 4, &["--policy", "hash"]).expect("start a ready ck");
    assert_eq!(status.policy, Policy::Hash);
    assert_eq!(status.workers, 4, "{status:#?}");
    let tally = burst(local(port), N);
    eprintln!("hash: {tally:?}");
    assert_eq!(tally.ok, N, "every request answered: {tally:?}");
    for slot in 0..4 {
        assert!(tally.slot(slot) > 0, "slot {slot} got nothing: {tally:?}");
    }
    // The answers came from the workers ck reports, and the program counted them.
    let status = ck.status().expect("ck status");
    let pids = status.worker_pids();
    assert!(tally.only_from(&pids), "{tally:?} vs {pids:?}");
    let selected: u64 = status.slots.iter().map(|s| s.selected).sum();
    assert_eq!(selected, u64::from(N), "{status:#?}");
}

#[test]
fn round_robin_policy_spreads_exactly() {
    let (ck, port, status) =
        start_ready("spread-rr", 4, &["--policy", "round-robin"]).expect("start a ready ck");
    assert_eq!(status.policy, Policy::RoundRobin);
    let tally = burst_pinned(local(port), N);
    eprintln!("round-robin: {tally:?}");
    assert_eq!(tally.ok, N, "every request answered: {tally:?}");
    for slot in 0..4 {
        assert_eq!(tally.slot(slot), N / 4, "slot {slot}: {tally:?}");
    }
    let status = ck.status().expect("ck status");
    for slot in &status.slots {
        assert_eq!(slot.selected, u64::from(N / 4), "{status:#?}");
        assert_eq!(slot.fallbacks, 0, "{status:#?}");
    }
    assert_eq!(status.dropped, 0);
}
