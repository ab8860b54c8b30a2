//! `ck reload` means fresh workers now. On a fleet whose every slot crash-loops until its
//! breaker opens (`--crash-cooldown 60s`; the last one held half-open by `--min-workers 1`,
//! retried every 10 s), a reload gives every slot a worker before it returns: while the app is
//! still broken it exits non-zero saying how many it restarted and how many still fail; once
//! the app is fixed it exits 0 with every slot ready, no backoff or cool-down waited.

use std::time::Duration;

use ck_tests::app::script;
use ck_tests::ck::said;
use ck_tests::sys::TempDir;
use ck_tests::{Ck, Status, burst, ck_bin, local, start};

/// How long a fleet of 3 gets to trip its breakers (5 boot crashes each, 1.5 s of backoff).
const TRIP_TIMEOUT: Duration = Duration::from_secs(60);

/// Every slot has tripped its breaker (open, or half-open for `--min-workers`) and has no
/// worker.
fn tripped(status: &Status) -> bool {
    status
        .slots
        .iter()
        .all(|s| s.breaker != "closed" && s.pid.is_none())
}

/// The log lines of workers a reload started on crashed slots.
fn revived(ck: &Ck) -> usize {
    ck.log_lines("ck reload: a fresh worker now").len()
}

#[test]
fn a_reload_gives_every_crashed_slot_a_fresh_worker_before_it_returns() {
    let dir = TempDir::new("revive");
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "").expect("writing the marker");
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "if [ -e '{}' ]; then echo 'broken build' >&2; exit 3; fi\nexec '{}' demo-worker",
            broken.display(),
            ck_bin().display()
        ),
    );
    let app = app.to_str().expect("UTF-8 path");
    let args = ["-w", "3", "--crash-cooldown", "60s", "--", app];
    let (mut ck, port) = start("revive", &args).expect("start ck");
    ck.wait_status("every breaker tripped", TRIP_TIMEOUT, tripped)
        .expect("wait for a status");

    // Still broken: three fresh workers at once, and the reload says they fail.
    let out = ck.ctl(&["reload"]).expect("ck control command");
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("reloaded 0 worker(s) and restarted 3 crashed slot(s) at once: 3 still fail"),
        "{text}"
    );
    assert!(text.contains("exit 3"), "{text}");
    assert_eq!(revived(&ck), 3, "{}", ck.log());

    // Fixed: the slots crash-looped again meanwhile (their crashes forgotten by the reload);
    // once tripped again, a reload brings each up now, not after the cool-down.
    ck.wait_status("every breaker tripped again", TRIP_TIMEOUT, tripped)
        .expect("wait for a status");
    std::fs::remove_file(&broken).expect("removing the marker");
    let text = ck.ctl_ok(&["reload"]).expect("ck control command");
    assert!(
        text.contains("reloaded 0 worker(s) and restarted 3 crashed slot(s) at once: all ready"),
        "{text}"
    );
    assert_eq!(revived(&ck), 6, "{}", ck.log());
    let status = ck.status().expect("ck status");
    assert_eq!(status.ready_count(), 3, "{status:#?}");
    assert!(
        status.slots.iter().all(|s| s.breaker == "closed"),
        "{status:#?}"
    );
    assert!(status.degraded.is_empty(), "{status:#?}");
    let tally = burst(local(port), 30);
    assert_eq!(tally.failed(), 0, "{tally:?}");

    // With nothing crashed, a reload is a plain roll again.
    let text = ck.ctl_ok(&["reload"]).expect("ck control command");
    assert!(text.contains("reloaded 3 worker(s)"), "{text}");
    assert!(!text.contains("crashed"), "{text}");
}
