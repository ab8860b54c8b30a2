//! The Node package `ck-listen` (`packages/ck-listen`) with the natural app that uses it
//! (`examples/node/server.js`, a plain `http.createServer` handed to `listen`): under `ck run -w
//! 4` every worker answers, three `ck reload`s under a keep-alive load that never retries (like
//! wrk) fail no request, and a stop under that load cuts no request in flight; without ck the
//! same app serves on `PORT` and exits 0 on SIGTERM; a node that did not get ck's socket (run
//! through npm or a shell) says how to run it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use ck_tests::churn::{self, Background};
use ck_tests::http::get_path;
use ck_tests::load::{FailureKind, Mode};
use ck_tests::sys::{self, poll_until};
use ck_tests::{READY_TIMEOUT, local, start_with_env};

/// The repository's directory `dir`.
fn repo(dir: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir);
    path.to_str().expect("UTF-8 path").to_string()
}

/// `examples/node/server.js`.
fn server_js() -> String {
    repo("examples/node/server.js")
}

/// The environment that lets `require("ck-listen")` find `packages/ck-listen`, as `npm i
/// ck-listen` would.
fn node_path() -> [(&'static str, String); 1] {
    [("NODE_PATH", repo("packages"))]
}

/// Starts `ck run -w 4 ARGS -- node examples/node/server.js` and waits until the 4 are ready.
fn start_fleet(what: &str, args: &[&str]) -> (ck_tests::Ck, u16, ck_tests::Status) {
    let js = server_js();
    let mut all = vec!["-w", "4"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "node", &js]);
    let env = node_path();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (mut ck, port) = start_with_env(what, &all, &env).expect("start ck");
    let status = ck
        .wait_ready(4, READY_TIMEOUT)
        .expect("wait for ready slots");
    (ck, port, status)
}

#[test]
fn three_reloads_under_a_keep_alive_load_that_never_retries_fail_nothing() {
    // least-conn: a keep-alive client reconnects only when its worker leaves, so under
    // round-robin a replacement gets what reconnects after it joined, by turn, and one of the
    // 16 can get none of the 12 connections by chance; least-conn hands a new worker, which
    // holds none, the reconnecting clients first, so every replacement serves.
    let (mut ck, port, status) = start_fleet("node-listen", &["--policy", "least-conn"]);
    let first = status.worker_pids();
    let tally = ck_tests::burst(local(port), 40);
    assert_eq!(tally.ok, 40, "{tally:?}");
    assert_eq!(tally.per_pid.len(), 4, "every worker answers: {tally:?}");

    let load = Background::start_without_retry(port, Mode::KeepAlive);
    let run = churn::reload_times_under(&mut ck, load, 3);
    run.assert_all_succeeded(&ck);
    churn::print_report("node ck-listen", &run.report);
    assert_eq!(run.report.retried, 0, "the client retried");
    churn::assert_served(&run.report);
    // Every worker that served (the first four, and each roll's replacements) was counted.
    let mut workers: BTreeSet<u32> = first;
    for reload in &run.reloads[1..] {
        workers.extend(&reload.before);
    }
    workers.extend(run.after.worker_pids());
    let silent: Vec<&u32> = workers
        .iter()
        .filter(|pid| !run.report.by_pid.contains_key(pid))
        .collect();
    assert!(
        silent.is_empty(),
        "workers {silent:?} answered nothing: {:?}",
        run.report.by_pid
    );
    assert_eq!(workers.len(), 16, "4 workers and 3 rolls of 4: {workers:?}");
    ck.ctl_ok(&["stop", "--wait"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn a_stop_under_a_keep_alive_load_cuts_no_request_in_flight() {
    let (mut ck, port, status) = start_fleet("node-listen-stop", &[]);
    let load = Background::start_without_retry(port, Mode::KeepAlive);
    std::thread::sleep(churn::SETTLE);
    let stopped = load.now();
    ck.ctl_ok(&["stop", "--wait"]).expect("ck stop");
    let down = load.now();
    let report = load.finish_and_print("node ck-listen stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let exits = ck.log_lines("worker exited");
    assert_eq!(exits.len(), 4, "{exits:?}");
    for line in &exits {
        assert!(
            line.contains("reason=exit 0"),
            "closed its connections and exited 0: {line}"
        );
    }
    assert!(report.by_pid.len() == 4, "{:?}", report.by_pid);
    assert!(status.worker_pids().iter().all(|p| !sys::pid_alive(*p)));
    // Until the stop, and during it, every request was answered; once the fleet is down, a
    // new connection is refused (the load goes on after `ck stop --wait` returned).
    let cut: Vec<_> = report
        .failures
        .iter()
        .filter(|(_, kind)| *kind != FailureKind::Refused)
        .collect();
    assert!(
        cut.is_empty(),
        "requests cut during the stop ({stopped:?} to {down:?}): {cut:?}\n{:?}",
        report.errors
    );
}

#[test]
fn without_ck_the_same_app_serves_on_port_and_exits_0_on_sigterm() {
    let port = sys::free_port();
    let node = Command::new("node")
        .arg(server_js())
        .env("PORT", port.to_string())
        .envs(node_path())
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting node");
    let addr = local(port);
    let answered = poll_until(READY_TIMEOUT, Duration::from_millis(50), || {
        get_path(addr, "/healthz").is_ok()
    });
    assert!(
        answered,
        "node examples/node/server.js did not answer on PORT={port}"
    );
    for _ in 0..20 {
        let answer = get_path(addr, "/").expect("GET /");
        assert_eq!(answer, (200, format!("slot=- pid={}\n", node.id())));
    }
    sys::signal(node.id(), nix::sys::signal::Signal::SIGTERM);
    let out = sys::wait_output(node, Duration::from_secs(15)).expect("node exits on SIGTERM");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Node started as a child of what ck started (`npm start`, a shell): the socket is not its
/// own, and `listen` says so, with the fix, instead of binding a port of its own.
#[test]
fn a_node_that_did_not_get_cks_socket_says_how_to_run_it() {
    let out = sys::output_within(
        Command::new("node")
            .arg(server_js())
            .envs(node_path())
            .env("LISTEN_FDS", "1")
            .env("LISTEN_PID", "1"),
        Duration::from_secs(15),
    )
    .expect("node exits");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("LISTEN_FDS is meant for process 1")
            && text.contains("ck run -- node server.js"),
        "{text}"
    );
}
