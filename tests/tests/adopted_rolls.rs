//! Rolls of servers that bind the port themselves and die on their stop signal with requests
//! in flight fail nothing: Go's bare `http.ListenAndServe` (SIGTERM kills it) and nginx on
//! SIGTERM (its fast stop). ck signals an old worker only once the kernel counts none of its
//! connections open. Twenty rolls each, under a new-connection load that never retries (like
//! wrk): a race that fails a few requests per roll cannot pass.

use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::real_servers::{go_bare, nginx_app};
use ck_tests::start_ready;
use ck_tests::sys::TempDir;

/// Rolls per server.
const ROLLS: usize = 20;

/// `workers` of `app` under `--adopt`, rolled [`ROLLS`] times under load: every roll succeeds
/// and no request fails.
fn rolls_fail_nothing(what: &str, workers: usize, app: &str) {
    let args = ["--adopt", "--policy", "round-robin", "--", app];
    let (mut ck, port, _) = start_ready(what, workers, &args).expect("start a ready ck");
    let load = Background::start_without_retry(port, Mode::NewConnection);
    let run = churn::reload_times_under(&mut ck, load, ROLLS);
    run.assert_all_succeeded(&ck);
    churn::print_report(&format!("{what}: {ROLLS} rolls"), &run.report);
    churn::assert_served(&run.report);
}

#[test]
fn a_bare_go_server_rolls_twenty_times_without_a_failure() {
    let server = go_bare();
    rolls_fail_nothing("go-bare-rolls", 3, server.to_str().unwrap());
}

#[test]
fn nginx_stopped_by_sigterm_rolls_twenty_times_without_a_failure() {
    let dir = TempDir::new("nginx-term");
    let app = nginx_app(&dir);
    rolls_fail_nothing("nginx-term-rolls", 2, app.to_str().unwrap());
}
