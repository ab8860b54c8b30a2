//! The zoo: servers written the way people write them in a hurry (`tests/zoo/`: no error
//! handling, no `READY=1`, their own binds), run under ck by `tests/tests/zoo_*.rs`, one test
//! per row of the guide's table (`docs/src/apps-that-misbehave.md`). [`servers`] gives their
//! command lines, [`tour`] takes a serving one through every operation under a load that never
//! retries, and [`degraded_within`] waits for ck to name what a broken one did.

pub mod servers;
pub mod tour;

use std::time::Duration;

use crate::ck::{Ck, Status};

/// Waits (up to `within`) until `ck status` shows a DEGRADED line containing every one of
/// `words`, and ck's log a warning with the same words; returns that line and the status.
pub fn degraded_within(ck: &mut Ck, words: &[&str], within: Duration) -> (String, Status) {
    let has = |line: &str| words.iter().all(|w| line.contains(w));
    let status = ck
        .wait_status(&format!("a DEGRADED line with {words:?}"), within, |s| {
            s.degraded.iter().any(|l| has(l))
        })
        .expect("ck status names it");
    let line = status
        .degraded
        .iter()
        .find(|l| has(l))
        .cloned()
        .unwrap_or_default();
    // The log's look is once a second: a moment after the status's.
    let logged = crate::sys::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        ck.complaints()
            .iter()
            .any(|l| l.contains("DEGRADED") && has(l))
    });
    assert!(
        logged,
        "ck's log has no warning with {words:?}:\n{}",
        ck.log()
    );
    (line, status)
}
