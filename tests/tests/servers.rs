//! Real servers on ck's socket (socket activation), unmodified, each through the one checklist
//! of `ck_tests::server_checks` (spread, drain, a roll under load with no failed request, a
//! SIGKILL that fails no more than the worker held, a clean stop that leaves nothing):
//! gunicorn (it finds LISTEN_FDS itself and says READY=1), uvicorn (`--fd 3`), puma
//! (`--bind-to-activated-sockets only`; silent, ready at its first passing probe) and the Node
//! example `examples/worker.js`. Go and nginx bind their own sockets: `servers_adopt.rs`.
//!
//! gunicorn's sync workers close every connection after its response, so nothing is lost even
//! for a keep-alive client that never retries. uvicorn closes idle keep-alive connections at
//! once on SIGTERM (no setting of its own changes that): rolled under a keep-alive client that
//! never retries, it may fail one request per connection its old workers held at their stop
//! signals (ck logs each count), and no more. Python and Ruby servers get 300 requests/s, Node
//! 600 (two shared CPUs).

use std::path::PathBuf;

use ck_tests::app::script;
use ck_tests::load::Mode;
use ck_tests::promises::servers::KeepAliveStop;
use ck_tests::pyservers::{server, write_apps};
use ck_tests::real_servers::puma_command;
use ck_tests::server_checks::{self, Checks};
use ck_tests::start_ready;
use ck_tests::sys::TempDir;

/// Requests a second for the Python and Ruby servers.
const SLOW_RATE: f64 = 300.0;
/// Requests a second for Node (a new connection each: two Node processes booting beside two
/// serving ones fall seconds behind 1500/s on two shared CPUs).
const NODE_RATE: f64 = 600.0;

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
    )
    .expect("start a ready ck");
    assert!(
        ck.log().contains("reason=\"READY=1\""),
        "gunicorn said READY=1: {}",
        ck.log()
    );
    assert!(
        status.slots.iter().all(|s| s.status.is_some()),
        "STATUS= shown: {status:#?}"
    );
    let checks = Checks {
        roll_mode: Mode::KeepAlive,
        keep_alive_stop: KeepAliveStop::NoneIdle,
        ..Checks::new("gunicorn", SLOW_RATE)
    };
    server_checks::run(ck, port, checks);
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
    )
    .expect("start a ready ck");
    let checks = Checks {
        roll_mode: Mode::KeepAlive,
        keep_alive_stop: KeepAliveStop::ClosesAtOnce,
        ..Checks::new("uvicorn", SLOW_RATE)
    };
    server_checks::run(ck, port, checks);
}

/// puma says nothing on NOTIFY_SOCKET without the sd_notify gem; `--ready auto` sees it accept
/// (its accept probe taken off the queue, or, before the program steers, its wait in
/// `pselect6` in `/proc`), and with `--probe http` its first passing probe (an HTTP GET steered
/// through its own socket) makes it ready too: each worker is ready by one of these, never by
/// the grace.
#[test]
fn puma_runs_under_ck_on_its_activated_socket() {
    let dir = TempDir::new("puma");
    let command = puma_command(&dir);
    let mut args = vec!["--policy", "round-robin", "--probe", "http", "--"];
    args.extend(command.iter().map(String::as_str));
    let (ck, port, status) = start_ready("puma", 2, &args).expect("start a ready ck");
    let log = ck.log();
    for pid in status.worker_pids() {
        let ready = log
            .lines()
            .find(|l| l.contains("worker ready") && l.contains(&format!("pid={pid} ")))
            .unwrap_or_else(|| panic!("no ready line for puma pid {pid}: {log}"));
        assert!(
            ready.contains("waits in pselect6()")
                || ready.contains("(accept probe)")
                || ready.contains("the readiness probe passed"),
            "puma pid {pid} ready for another reason: {ready}"
        );
    }
    let checks = Checks {
        keep_alive_stop: KeepAliveStop::ClosesAtOnce,
        ..Checks::new("puma", SLOW_RATE)
    };
    server_checks::run(ck, port, checks);
}

#[test]
fn node_worker_runs_under_ck_on_fd_3() {
    let app = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/worker.js");
    let (ck, port, _) = start_ready(
        "node",
        2,
        &[
            "--policy",
            "round-robin",
            "--",
            "node",
            app.to_str().unwrap(),
        ],
    )
    .expect("start a ready ck");
    server_checks::run(ck, port, Checks::new("node", NODE_RATE));
}
