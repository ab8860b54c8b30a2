//! Real servers under ck, unmodified: gunicorn (socket activation: it finds LISTEN_FDS itself
//! and says READY=1) and uvicorn (`--fd 3`), each spread evenly, drained, and rolled under a
//! keep-alive load (300 requests/s: Python servers on two shared CPUs). gunicorn's sync workers
//! close every connection after its response, so nothing is lost even for a client that never
//! retries. uvicorn closes idle keep-alive connections at once on SIGTERM (no setting of its own
//! changes that), so its rolls are tested with a client that retries an idempotent request whose
//! reused connection closed before any answer, as HTTP clients and browsers do (README).

use ck_tests::app::script;
use ck_tests::churn::{self, Background};
use ck_tests::http::burst_without;
use ck_tests::load::Mode;
use ck_tests::pyservers::{server, write_apps};
use ck_tests::sys::TempDir;
use ck_tests::{Ck, burst_pinned, local, start_ready};

/// Spread (20/20 over 2 slots), drain (0 to the drained slot), then 3 reloads under a
/// keep-alive load (`retry`: as HTTP clients do): no failed request.
fn serves_drains_and_rolls(label: &str, mut ck: Ck, port: u16, retry: bool) {
    let tally = burst_pinned(local(port), 40);
    assert_eq!(tally.ok, 40, "{tally:?}");
    assert_eq!((tally.slot(0), tally.slot(1)), (20, 20), "{tally:?}");
    ck.ctl_ok(&["drain", "1"]);
    burst_without(burst_pinned, local(port), 40, 1, "drained");
    ck.ctl_ok(&["undrain", "1"]);
    let load = Background::start_with(port, Mode::KeepAlive, retry, 300.0);
    let run = churn::reload_times_under(&mut ck, load, 3);
    run.assert_all_succeeded(&ck);
    churn::print_report(label, &run.report);
    churn::assert_served(&run.report);
}

#[test]
fn gunicorn_runs_under_ck_with_socket_activation_and_ready() {
    let dir = TempDir::new("gunicorn");
    write_apps(&dir);
    // One control socket per gunicorn master (the default path is shared).
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "exec '{}' -w 1 --chdir '{}' --control-socket '{}/ctl.'$CK_WORKER_ID wsgi_app:app",
            server("gunicorn").display(),
            dir.path().display(),
            dir.path().display()
        ),
    );
    let (ck, port, status) = start_ready(
        "gunicorn",
        2,
        // gunicorn sends READY=1; waiting for it (not auto's 1 s of silence, which a loaded
        // machine can outlast) makes "ready" mean gunicorn said so.
        &[
            "--policy",
            "round-robin",
            "--ready",
            "notify",
            "--",
            app.to_str().unwrap(),
        ],
    );
    assert!(
        ck.log().contains("reason=\"READY=1\""),
        "gunicorn said READY=1: {}",
        ck.log()
    );
    assert!(
        status.slots.iter().all(|s| s.status.is_some()),
        "STATUS= shown: {status:#?}"
    );
    serves_drains_and_rolls("gunicorn", ck, port, false);
}

#[test]
fn uvicorn_runs_under_ck_on_fd_3() {
    let dir = TempDir::new("uvicorn");
    write_apps(&dir);
    let uvicorn = server("uvicorn");
    let app_dir = dir.path().to_str().unwrap().to_string();
    let (ck, port, _) = start_ready(
        "uvicorn",
        2,
        &[
            "--policy",
            "round-robin",
            "--",
            uvicorn.to_str().unwrap(),
            "--fd",
            "3",
            "--app-dir",
            &app_dir,
            "--no-access-log",
            "asgi_app:app",
        ],
    );
    serves_drains_and_rolls("uvicorn", ck, port, true);
}
