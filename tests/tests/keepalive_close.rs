//! Graceful close of keep-alive connections: rolling restarts under a keep-alive client that
//! never retries (like wrk) fail no request, with the demo worker and with the repository's
//! Node and Python examples (`examples/worker.js`, `examples/worker.py`), which show the
//! pattern to copy: on SIGTERM, answer each connection's next request with `Connection: close`,
//! close connections idle for a short grace, accept what is queued, exit.

use std::path::PathBuf;

use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::{Ck, start_ready};

/// Reloads under load; the workers must close their connections without failing a request.
const RELOADS: usize = 4;

fn example(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file);
    path.to_str().expect("UTF-8 path").to_string()
}

fn reloads_fail_nothing(label: &str, mut ck: Ck, port: u16) {
    let load = Background::start_without_retry(port, Mode::KeepAlive);
    let run = churn::reload_times_under(&mut ck, load, RELOADS);
    run.assert_all_succeeded(&ck);
    churn::print_report(label, &run.report);
    assert_eq!(run.report.retried, 0, "the client retried");
    churn::assert_served(&run.report);
    let first = &run.reloads[0].before;
    assert!(
        run.after.worker_pids().is_disjoint(first),
        "old workers still listed: {:#?}",
        run.after
    );
}

#[test]
fn demo_worker_closes_keep_alive_connections_without_a_failure() {
    let (ck, port, _) = start_ready("kaclose-demo", 2, &[]).expect("start a ready ck");
    reloads_fail_nothing("demo", ck, port);
}

#[test]
fn node_example_closes_keep_alive_connections_without_a_failure() {
    let app = example("worker.js");
    let (ck, port, _) =
        start_ready("kaclose-node", 2, &["--", "node", &app]).expect("start a ready ck");
    reloads_fail_nothing("node", ck, port);
}

#[test]
fn python_example_closes_keep_alive_connections_without_a_failure() {
    let app = example("worker.py");
    let (ck, port, _) =
        start_ready("kaclose-python", 2, &["--", "python3", &app]).expect("start a ready ck");
    reloads_fail_nothing("python", ck, port);
}
