//! The zoo: servers written the way people write them in a hurry (`tests/zoo/`: no error
//! handling, no `READY=1`, their own binds), run under ck by `tests/tests/zoo_*.rs`, one test
//! per row of the guide's table (`docs/src/apps-that-misbehave.md`). [`servers`] gives their
//! command lines, [`tour`] takes a serving one through every operation under a load that never
//! retries, and [`degraded_shown`] and [`degraded_within`] wait for ck to name what a worker
//! did.

pub mod servers;
pub mod tour;

use std::time::Duration;

use crate::ck::{Ck, Status};

/// Whether `line` holds every one of `words`.
fn has_all(line: &str, words: &[&str]) -> bool {
    words.iter().all(|w| line.contains(w))
}

/// Waits (up to `within`) until `ck status` shows a DEGRADED line containing every one of
/// `words`; returns that line and the status.
pub fn degraded_shown(ck: &mut Ck, words: &[&str], within: Duration) -> (String, Status) {
    let status = ck
        .wait_status(&format!("a DEGRADED line with {words:?}"), within, |s| {
            s.degraded.iter().any(|l| has_all(l, words))
        })
        .expect("ck status names it");
    let line = status
        .degraded
        .iter()
        .find(|l| has_all(l, words))
        .cloned()
        .unwrap_or_default();
    (line, status)
}

/// Like [`degraded_shown`], and ck's log has a warning with the same words too.
pub fn degraded_within(ck: &mut Ck, words: &[&str], within: Duration) -> (String, Status) {
    let shown = degraded_shown(ck, words, within);
    // The log's look is once a second: a moment after the status's.
    let logged = crate::sys::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        ck.complaints()
            .iter()
            .any(|l| l.contains("DEGRADED") && has_all(l, words))
    });
    assert!(
        logged,
        "ck's log has no warning with {words:?}:\n{}",
        ck.log()
    );
    shown
}
