//! `/metrics` is complete from the first scrape: a Prometheus server that scrapes as soon as
//! `/healthz` answers 200 (as a pod's does) finds every series a later scrape of the same fleet
//! has: the program's per-slot counters at 0, not missing until steering is in. A counter
//! exists from its first scrape and never vanishes.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ck_tests::http::{Failure, burst, get_path};
use ck_tests::sys::free_port;
use ck_tests::{READY_TIMEOUT, local, start};

/// The series of a scrape: each sample line's name and labels.
fn series(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(key, _)| key.to_string()))
        .collect()
}

/// The families of a scrape (`# TYPE` lines).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

/// GETs `path` on `addr` as soon as it answers (refused: tried again at once).
fn first_answer(addr: SocketAddr, path: &str) -> (u16, String) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match get_path(addr, path) {
            Ok(answer) => return answer,
            Err(Failure::Refused) if Instant::now() < deadline => {}
            Err(e) => panic!("GET {path} on {addr}: {e}"),
        }
    }
}

#[test]
fn the_first_scrape_has_every_series_of_a_later_one() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics_arg = metrics.to_string();
    let (mut ck, port) = start("first-scrape", &["-w", "2", "--metrics", &metrics_arg]);
    let (code, _) = first_answer(metrics, "/healthz");
    assert_eq!(code, 200, "/healthz");
    let (code, first) = first_answer(metrics, "/metrics");
    assert_eq!(code, 200, "/metrics");
    ck.wait_ready(2, READY_TIMEOUT);
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    std::thread::sleep(Duration::from_millis(200));
    let later = get_path(metrics, "/metrics").expect("a later scrape").1;
    let missing: Vec<_> = series(&later)
        .difference(&series(&first))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "the first scrape lacks {missing:?}\n--- first ---\n{first}\n--- later ---\n{later}"
    );
    for family in [
        "ck_connections_selected",
        "ck_worker_connections",
        "ck_connections_dropped",
    ] {
        assert!(
            families(&first).contains(family),
            "{family} missing:\n{first}"
        );
    }
}
