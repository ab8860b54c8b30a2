//! What the fleet tests (`fleet_haproxy.rs`, `fleet_service.rs`) check of every scenario's
//! row: 0 failed requests where ck promises it, the killed host's failures within their bound,
//! nothing reaching a drained host once the front took it out, every host answering, and
//! nothing of the rig left afterwards.

use ck_tests::fleet::scenario::{self, Kind, Row};
use ck_tests::fleet::{RigSpec, assert_gone};

/// Runs `kinds` on a rig of `spec` (fast timings), asserts each row as it comes, then that the
/// rig left nothing behind.
pub fn run(spec: RigSpec, kinds: &[Kind]) {
    let front = spec.front.name();
    let (rows, prefix) = scenario::run_all(spec, kinds, |row| check(front, row));
    assert_eq!(rows.len(), kinds.len(), "every scenario ran: {rows:#?}");
    assert_gone(&prefix);
}

/// The assertions on one row.
fn check(front: &str, row: &Row) {
    let r = &row.report;
    eprintln!(
        "{front}: {}: {} requests, failed {}, p99 {:?}, stop {}, detection {:?}",
        row.scenario,
        r.ok + r.failed(),
        row.failed_text(),
        r.p99(),
        row.stop_text(),
        row.detection
    );
    assert!(
        r.ok > 100,
        "{front}: {}: too few answers: {r:?}",
        row.scenario
    );
    match row.kind {
        // The comparison: what a fixed sleep gives is measured, not promised.
        Kind::PreStopSleep | Kind::NoWait => assert_eq!(row.stop_times.len(), 3, "{row:#?}"),
        Kind::HostKilled => {
            let bound = row.failure_bound.expect("a bound");
            assert!(
                r.failed() <= bound,
                "{front}: {} failed, more than in flight plus sent before the front took the \
                 host out ({bound}): {:?}",
                r.failed(),
                r.errors
            );
            assert_eq!(
                row.late_failures,
                Some(0),
                "{front}: failures after the host was out: {:?}",
                r.errors
            );
            assert!(row.detection.is_some(), "{row:#?}");
        }
        kind => {
            assert_eq!(
                r.failed(),
                0,
                "{front}: {}: failed requests: {:?}",
                row.scenario,
                r.errors
            );
            if kind == Kind::Rolling {
                assert_eq!(row.stop_times.len(), 3, "{row:#?}");
            }
            if kind == Kind::DrainAll {
                assert_eq!(
                    row.late_answers,
                    Some(0),
                    "{front}: the drained host still got new connections after the front took it out"
                );
            }
        }
    }
    // Every host (6 workers) answered some of the load.
    assert!(
        r.by_pid.len() >= 6,
        "{front}: {}: answers by pid {:?}",
        row.scenario,
        r.by_pid
    );
}
