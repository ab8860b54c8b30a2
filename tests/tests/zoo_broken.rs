//! The zoo's servers that never serve the socket ck passes them (`tests/zoo/`): one that exits 0
//! at once, one that daemonizes, one that binds its own port, one that closes fd 3 and opens its
//! own socket. For each, within `--ready-timeout`, `ck status` shows a DEGRADED line and ck's
//! log a warning that name what the worker did and the fix; `ck status --wait` fails naming the
//! slot; the line survives `ck upgrade`; `ck stop --wait` leaves nothing behind (the daemon's
//! leftovers included). One test per row of the guide's table
//! (`docs/src/apps-that-misbehave.md`).

use std::time::Duration;

use ck_tests::ck::said;
use ck_tests::zoo::tour::{Tour, stop_clean};
use ck_tests::zoo::{degraded_within, servers};

/// The `--ready-timeout` the rows run with: the DEGRADED line must come before it.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts `app` under `ck run -w WORKERS --ready-timeout 10s`, waits for the DEGRADED line
/// with `words` (and the log's warning), checks `ck status --wait` fails naming the slot, that
/// the line is still there after `ck upgrade`, and that `ck stop --wait` leaves nothing.
fn degraded_row(label: &'static str, app: Vec<String>, workers: usize, words: &[&str]) {
    let timeout = format!("{}s", READY_TIMEOUT.as_secs());
    let tour = Tour::new(label, app)
        .workers(workers)
        .args(&["--ready-timeout", &timeout]);
    let (mut ck, port) = tour.launch();
    let (line, status) = degraded_within(&mut ck, words, READY_TIMEOUT);
    eprintln!("{label}: DEGRADED: {line}");
    let waited = ck
        .ctl(&["status", "--wait", "--timeout", "2s"])
        .expect("ck status --wait");
    assert!(!waited.status.success(), "{label}: {}", said(&waited));
    let slot = status
        .slots
        .iter()
        .find(|s| line.starts_with(&format!("slot {} ", s.slot)))
        .unwrap_or_else(|| panic!("{label}: the line names no slot of {:#?}", status.slots));
    assert!(
        said(&waited).contains(&format!("slot {} ", slot.slot)),
        "{label}: `ck status --wait` names slot {}: {}",
        slot.slot,
        said(&waited)
    );
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let after = ck
        .wait_status("upgraded", READY_TIMEOUT, |s| s.upgrades == 1)
        .expect("upgraded");
    let still = ck
        .wait_status("the line after the upgrade", READY_TIMEOUT, |s| {
            s.degraded
                .iter()
                .any(|l| words.iter().all(|w| l.contains(w)))
        })
        .expect("the DEGRADED line after ck upgrade");
    eprintln!(
        "{label}: after the upgrade: {:?} / {:?}",
        after.degraded, still.degraded
    );
    stop_clean(ck, port, label);
}

/// A start script that returns at once (exit 0): named, with the fix (run the server in the
/// foreground).
#[test]
fn exits_0_at_once() {
    degraded_row(
        "exits-at-once",
        servers::script("exits_at_once.sh"),
        2,
        &["exits 0 at once", "foreground", "`exec`"],
    );
}

/// A server that forks and exits (the daemon recipe): named with the processes it left, which
/// ck stops; the fix is its foreground mode.
#[test]
fn daemonizes() {
    degraded_row(
        "daemonizes",
        servers::python("daemonizes.py", &[]),
        2,
        &["daemonized", "leaving pid", "python3", "foreground"],
    );
}

/// A Go server that binds its own port and ignores fd 3: named with that port and the fix
/// `--adopt --port PORT`.
#[test]
fn binds_its_own_port_without_adopt() {
    let own = ck_tests::sys::free_port();
    let addr = format!("127.0.0.1:{own}");
    let adopt = format!("--adopt --port {own}");
    degraded_row(
        "own-port",
        servers::go_own_port(own),
        1,
        &[
            "listens on",
            &addr,
            "of its own",
            "has not accepted",
            &adopt,
        ],
    );
}

/// A server that closes fd 3 and opens its own socket: named as such, with the port it bound
/// and the fix.
#[test]
fn closes_fd_3_and_opens_its_own_socket() {
    let own = ck_tests::sys::free_port();
    let addr = format!("127.0.0.1:{own}");
    let adopt = format!("--adopt --port {own}");
    degraded_row(
        "closes-fd3",
        servers::python("closes_fd3.py", &[&own.to_string()]),
        1,
        &["closed the socket ck passed it (fd 3", &addr, &adopt],
    );
}
