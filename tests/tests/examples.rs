//! The worker examples, each run under ck and counted per worker: Rust on the `ck-worker` crate
//! (`ck-worker/examples/activation.rs`, ck's demo worker, and `examples/rust`, the hyper server on ck-worker,
//! which is also rolled by `ck reload` under a keep-alive load that never retries), Node (`examples/worker.js` on ck's socket, and the
//! unmodified `examples/listen.js` under `--adopt`), Python (`examples/worker.py`, and the
//! unmodified `python3 -m http.server` under `--adopt`: see `adopt.rs`), and the C server of
//! the TCP_CORK article (`examples/cork-server.c`, built here with `cc`): socket-activated,
//! corked or not, and forking 4 children that each bind the port under `--adopt`, every child's
//! listener steered as a slot of its own.

use std::path::PathBuf;

use ck_tests::churn::{self, Background};
use ck_tests::cserver::cork_server;
use ck_tests::load::Mode;
use ck_tests::sys::{kill_hard, poll_until};
use ck_tests::{READY_TIMEOUT, burst, burst_pinned, local, start_ready};

fn example(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file);
    path.to_str().expect("UTF-8 path").to_string()
}

/// `-w 2 --policy round-robin` with `app`: 40 pinned requests split 20/20 by slot. Returns
/// the running instance and its port.
fn spreads_evenly(what: &str, extra: &[&str], app: &[&str]) -> (ck_tests::Ck, u16) {
    let mut args = vec!["--policy", "round-robin"];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(app);
    let (ck, port, status) = start_ready(what, 2, &args).expect("start a ready ck");
    let tally = burst_pinned(local(port), 40);
    assert_eq!(tally.ok, 40, "{tally:?}");
    assert_eq!((tally.slot(0), tally.slot(1)), (20, 20), "{tally:?}");
    assert_eq!(tally.per_pid.len(), 2, "{tally:?}");
    assert!(
        tally.only_from(&status.worker_pids()),
        "{tally:?} {status:#?}"
    );
    (ck, port)
}

/// The path of the Rust example `name` (`ck-worker/examples/`), built next to ck by `cargo
/// xtask test` (`--examples`).
fn rust_example(name: &str) -> String {
    let example = ck_tests::ck_bin().with_file_name("examples").join(name);
    assert!(
        example.is_file(),
        "{} is missing: run `cargo xtask test` (or `cargo build -p ck-worker --examples`)",
        example.display()
    );
    example.to_str().expect("UTF-8 path").to_string()
}

#[test]
fn rust_worker_on_the_activation_module() {
    spreads_evenly("ex-rust", &[], &[&rust_example("activation")]);
}

/// The hyper server on `ck-worker` (`examples/rust`) (activation, READY=1, the graceful close): both workers
/// answer, two `ck reload`s under a keep-alive load that never retries (like wrk) replace them
/// without a failed request, and `ck stop` ends it all cleanly.
#[test]
fn rust_hyper_server_on_ck_worker_rolls_without_a_failure() {
    let (mut ck, port) = spreads_evenly(
        "ex-hyper",
        &[],
        &[ck_tests::ck_bin()
            .with_file_name("ck-example-rust")
            .to_str()
            .expect("UTF-8 path")],
    );
    let load = Background::start_without_retry(port, Mode::KeepAlive);
    let run = churn::reload_times_under(&mut ck, load, 2);
    run.assert_all_succeeded(&ck);
    churn::print_report("hyper", &run.report);
    assert_eq!(run.report.retried, 0, "the client retried");
    churn::assert_served(&run.report);
    // The two workers before, between and after the reloads (slots 0 and 1, then 2 and 3...).
    assert!(run.report.by_slot.len() >= 4, "{:?}", run.report.by_slot);
    assert!(
        run.after.worker_pids().is_disjoint(&run.reloads[0].before),
        "old workers still listed: {:#?}",
        run.after
    );
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn rust_demo_worker_on_the_activation_module() {
    spreads_evenly(
        "ex-rust-demo",
        &[],
        &[ck_tests::ck_bin().to_str().unwrap(), "demo-worker"],
    );
}

#[test]
fn node_worker_on_cks_socket() {
    spreads_evenly("ex-node", &[], &["node", &example("worker.js")]);
}

#[test]
fn node_server_that_binds_the_port_itself_under_adopt() {
    spreads_evenly(
        "ex-node-adopt",
        &["--adopt"],
        &["node", &example("listen.js")],
    );
}

#[test]
fn python_worker_on_cks_socket() {
    spreads_evenly("ex-python", &[], &["python3", &example("worker.py")]);
}

#[test]
fn c_server_on_cks_socket_corked_and_not() {
    let server = cork_server();
    let server = server.to_str().unwrap();
    spreads_evenly("ex-c", &[], &[server]);
    spreads_evenly("ex-c-cork", &[], &["env", "CORK=1", server]);
}

#[test]
fn c_server_forking_four_children_that_each_bind_under_adopt() {
    let server = cork_server();
    let (mut ck, port, _) = start_ready(
        "ex-c-fork",
        1,
        &["--adopt", "--", "env", "FORK=4", server.to_str().unwrap()],
    )
    .expect("start a ready ck");
    let status = ck
        .wait_status("4 listeners steered", READY_TIMEOUT, |s| {
            s.slots.iter().filter(|s| s.state == "ready").count() == 4
        })
        .expect("wait for the status");
    let members: Vec<_> = status
        .slots
        .iter()
        .filter(|s| s.member_of == Some(0))
        .collect();
    assert_eq!(members.len(), 3, "{status:#?}");
    let tally = burst(local(port), 40);
    assert_eq!(tally.ok, 40, "{tally:?}");
    assert_eq!(tally.per_pid.len(), 4, "every child answers: {tally:?}");

    // A child that dies takes its member slot with it; the others go on serving.
    let victim = members[0].pid.expect("a member has a pid");
    let gone = members[0].slot;
    kill_hard(victim);
    let after = ck
        .wait_status("the member slot removed", READY_TIMEOUT, |s| {
            s.slots.iter().all(|slot| slot.slot != gone)
        })
        .expect("wait for the status");
    assert!(!after.active.contains(&gone), "{after:#?}");
    let tally = burst(local(port), 30);
    assert_eq!(tally.ok, 30, "{tally:?}");
    assert_eq!(tally.pid(victim), 0, "{tally:?}");

    // Stopping stops the whole tree.
    let pids: Vec<u32> = tally.per_pid.keys().copied().collect();
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(poll_until(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(20),
        || { pids.iter().all(|p| !ck_tests::sys::pid_alive(*p)) }
    ));
}
