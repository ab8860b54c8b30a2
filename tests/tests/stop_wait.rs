//! `ck status --wait` and `ck stop --wait` against real fleets: a `ck status --wait` asked
//! before `ck run` has even created its run directory answers once every slot is ready; `ck
//! stop --wait` returns only when ck, every worker and the control socket are gone (also after
//! a quiet wait, which its default timeout covers); both fail after `--timeout` naming what is
//! not ready, or still up, and the fix.

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;

use ck_tests::ck::{ck_command, said};
use ck_tests::sys::{self, TempDir};
use ck_tests::{Ck, Status, instance_name, start_on};

/// A run directory that does not exist yet (inside `dir`), and the environment giving it to ck.
fn fresh_run_dir(dir: &TempDir) -> (PathBuf, String) {
    let run = dir.path().join("run");
    let text = run.to_str().expect("UTF-8 path").to_string();
    (run, text)
}

/// Runs `ck ARGS` with `CK_RUN_DIR=run_dir`, at most 60 s.
fn ck_in(run_dir: &str, args: &[&str]) -> Output {
    sys::output_within(
        ck_command().env("CK_RUN_DIR", run_dir).args(args),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|| panic!("`ck {}` did not exit within 60 s", args.join(" ")))
}

/// Starts `ck run -w ... ARGS` on a free port with its own run directory `run_dir`.
fn start_in(what: &str, run_dir: &str, args: &[&str]) -> (Ck, u16) {
    let port = sys::free_port();
    let env = [("CK_RUN_DIR", run_dir)];
    let ck = start_on(what, port, args, &env)
        .expect("start ck")
        .with_ctl_env(&env);
    (ck, port)
}

/// Asserts that `ck stop --wait` (`out`) returned with the whole fleet of `ck` gone: the
/// supervisor exited, no worker of `workers` is alive, its control socket in `run_dir` is gone.
fn assert_down(ck: &mut Ck, out: &Output, workers: &[u32], run_dir: &std::path::Path) {
    let socket = run_dir.join(format!("{}.sock", ck.name()));
    assert!(
        out.status.success(),
        "`ck stop --wait` failed: {}",
        said(out)
    );
    assert!(
        said(out).contains("is down"),
        "`ck stop --wait` says the fleet is down: {}",
        said(out)
    );
    assert!(
        ck.try_exit().is_some(),
        "ck (pid {}) is still running after `ck stop --wait` returned",
        ck.pid()
    );
    let alive: Vec<u32> = workers
        .iter()
        .copied()
        .filter(|&p| sys::pid_alive(p))
        .collect();
    assert!(
        alive.is_empty(),
        "workers {alive:?} are alive after `ck stop --wait` returned"
    );
    assert!(
        !socket.exists(),
        "{} is still there after `ck stop --wait` returned",
        socket.display()
    );
}

#[test]
fn status_wait_asked_before_the_instance_exists_answers_once_every_slot_is_ready_and_stop_wait_returns_with_it_gone()
 {
    let dir = TempDir::new("stop-wait");
    let (run, run_text) = fresh_run_dir(&dir);
    let port = sys::free_port();
    let name = instance_name("stop-wait", port);
    // Asked first: no instance, and no run directory yet.
    let waiter = ck_command()
        .env("CK_RUN_DIR", &run_text)
        .args(["status", "--wait", "--json", "--name", &name])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting `ck status --wait`");
    assert!(!run.exists());
    let env = [("CK_RUN_DIR", run_text.as_str())];
    let mut ck = start_on("stop-wait", port, &["-w", "4"], &env)
        .expect("start ck")
        .with_ctl_env(&env);
    let out = sys::wait_output(waiter, Duration::from_secs(40)).expect("`ck status --wait` exits");
    assert!(out.status.success(), "`ck status --wait`: {}", said(&out));
    let status: Status = serde_json::from_slice(&out.stdout).expect("status JSON");
    let states: Vec<&str> = status.slots.iter().map(|s| s.state.as_str()).collect();
    assert_eq!(states, ["ready"; 4], "{status:#?}");
    assert_eq!(status.pid, ck.pid());
    let workers: Vec<u32> = status.worker_pids().into_iter().collect();
    assert_eq!(workers.len(), 4);
    // Also without --name (the only instance), as a table.
    let table = ck_in(&run_text, &["status", "--wait"]);
    assert!(table.status.success(), "{}", said(&table));
    assert_eq!(
        String::from_utf8_lossy(&table.stdout)
            .matches(" ready ")
            .count(),
        4
    );

    let out = ck.ctl(&["stop", "--wait"]).expect("ck stop");
    assert_down(&mut ck, &out, &workers, &run);
}

#[test]
fn stop_wait_outlasts_the_quiet_wait_by_default() {
    let dir = TempDir::new("stop-wait-quiet");
    let (run, run_text) = fresh_run_dir(&dir);
    let args = [
        "-w",
        "2",
        "--metrics",
        "127.0.0.1:0",
        "--quiet-period",
        "2s",
    ];
    let (mut ck, _) = start_in("stop-wait-quiet", &run_text, &args);
    let status = ck
        .wait_ready(2, ck_tests::READY_TIMEOUT)
        .expect("wait for ready slots");
    let workers: Vec<u32> = status.worker_pids().into_iter().collect();
    let out = ck.ctl(&["stop", "--wait"]).expect("ck stop");
    assert!(
        said(&out).contains("waiting for traffic to stop"),
        "{}",
        said(&out)
    );
    assert_down(&mut ck, &out, &workers, &run);
}

#[test]
fn status_wait_times_out_naming_the_slots_not_ready_or_the_missing_instance() {
    let dir = TempDir::new("status-wait-late");
    let (_, run_text) = fresh_run_dir(&dir);
    let out = ck_in(&run_text, &["status", "--wait", "--timeout", "300ms"]);
    assert!(!out.status.success());
    let text = said(&out);
    assert!(
        text.contains("no ck instance started within 300ms") && text.contains("--timeout"),
        "{text}"
    );

    // Workers that never say READY=1.
    let (mut ck, _) = start_in(
        "status-wait-late",
        &run_text,
        &["-w", "2", "--ready", "notify", "--", "sleep", "1000"],
    );
    ck.wait_status("both workers spawned", ck_tests::READY_TIMEOUT, |s| {
        s.slots.len() == 2 && s.slots.iter().all(|s| s.pid.is_some())
    })
    .expect("wait for the status");
    let out = ck
        .ctl(&["status", "--wait", "--timeout", "1s"])
        .expect("ck status");
    assert!(!out.status.success());
    let text = said(&out);
    for slot in ["slot 0 starting (pid ", "slot 1 starting (pid "] {
        assert!(text.contains(slot), "names {slot:?}: {text}");
    }
    assert!(
        text.contains("is not ready after 1s")
            && text.contains("log")
            && text.contains("--timeout"),
        "{text}"
    );
}

#[test]
fn stop_wait_times_out_naming_a_worker_that_ignores_its_stop_signal_then_returns_once_it_is_killed()
{
    let dir = TempDir::new("stop-wait-stuck");
    let (run, run_text) = fresh_run_dir(&dir);
    let app = ["sh", "-c", "trap '' TERM; exec sleep 1000"];
    let mut args = vec!["-w", "1", "--drain-timeout", "5s", "--"];
    args.extend_from_slice(&app);
    let (mut ck, _) = start_in("stop-wait-stuck", &run_text, &args);
    let status = ck
        .wait_status("the worker spawned", ck_tests::READY_TIMEOUT, |s| {
            s.slots.len() == 1 && s.slots[0].pid.is_some()
        })
        .expect("wait for the status");
    let worker = status.worker_pid(0);

    let out = ck
        .ctl(&["stop", "--wait", "--timeout", "500ms"])
        .expect("ck stop");
    assert!(!out.status.success(), "{}", said(&out));
    let text = said(&out);
    for what in [
        format!("ck (pid {})", ck.pid()),
        format!("worker of slot 0 (pid {worker})"),
    ] {
        assert!(text.contains(&what), "names {what:?}: {text}");
    }
    assert!(
        text.contains("--drain-timeout (5s)") && text.contains("--timeout"),
        "{text}"
    );
    assert!(sys::pid_alive(worker), "the worker ignores SIGTERM");

    // Again, with the default timeout (the drain timeout and more): SIGKILL ends it.
    let out = ck.ctl(&["stop", "--wait"]).expect("ck stop");
    assert_down(&mut ck, &out, &[worker], &run);
}
