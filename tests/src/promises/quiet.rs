//! What ck costs and shows before anything happens: an idle fleet leaves ck asleep (the spin
//! guard), and the first scrape of `/metrics`, as soon as `/healthz` answers, has every series
//! a later one has.
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cpu::spent_over;
use crate::http::{Failure, burst, get_path};
use crate::sys::free_port;
use crate::{READY_TIMEOUT, local, start, start_ready};

/// How long ck is watched idle.
const WINDOW: Duration = Duration::from_secs(3);
/// ck's CPU over [`WINDOW`] that only a spin reaches (a spin is a core: about 3,000 ms; a
/// healthy ck spends a few).
const SPIN: Duration = Duration::from_millis(300);
/// ck's wake-ups over [`WINDOW`] that only a spin reaches (a healthy ck wakes a few times a
/// second; a loop that wakes itself, thousands).
const SPIN_WAKEUPS: u64 = 300;

/// Starts a fleet of two demo workers with `args`, and asserts that ck's own CPU and wake-ups
/// over [`WINDOW`] of idle, from the fleet's first moments (once the exit watch's one-off
/// load is over), stay under [`SPIN`] and [`SPIN_WAKEUPS`]: bounds on what ck did, not
/// timings.
pub fn idle_is_cheap(what: &str, args: &[&str]) {
    let (mut ck, _port, _status) = start_ready(what, 2, args).expect("start a ready ck");
    if !args.contains(&"--no-bpf") {
        ck.wait_status("the exit watch loaded", READY_TIMEOUT, |s| {
            s.exits_watched.is_some()
        })
        .expect("wait for the status");
    }
    let spent = spent_over(ck.pid(), WINDOW).expect("ck exited while idle");
    assert!(
        spent.cpu < SPIN && spent.wakeups < SPIN_WAKEUPS,
        "ck ({what}, {args:?}) spent {:?} of CPU and woke {} times in {WINDOW:?} with nothing \
         to do: something spins\n{}",
        spent.cpu,
        spent.wakeups,
        ck.log()
    );
    eprintln!(
        "{what}: ck spent {:?} and woke {} times in {WINDOW:?} idle",
        spent.cpu, spent.wakeups
    );
}

/// The spin guard for the default policy, least-queue (which samples) and `--no-bpf`.
pub fn idle_fleets_leave_ck_asleep() {
    idle_is_cheap("idle", &[]);
    idle_is_cheap("idle-lq", &["--policy", "least-queue"]);
    idle_is_cheap("idle-nobpf", &["--no-bpf"]);
}

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

/// `/metrics` scraped as soon as `/healthz` answers 200 has every series of a scrape taken
/// once the fleet is ready and has served: the program's per-slot counters from the first.
pub fn the_first_scrape_is_complete() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics_arg = metrics.to_string();
    let (mut ck, port) =
        start("first-scrape", &["-w", "2", "--metrics", &metrics_arg]).expect("start ck");
    let (code, _) = first_answer(metrics, "/healthz");
    assert_eq!(code, 200, "/healthz");
    let (code, first) = first_answer(metrics, "/metrics");
    assert_eq!(code, 200, "/metrics");
    ck.wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let later = get_path(metrics, "/metrics").expect("a later scrape").1;
    let missing: Vec<_> = series(&later)
        .difference(&series(&first))
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "the first scrape lacks {missing:?}\n--- first ---\n{first}\n--- later ---\n{later}"
    );
    let first_families = families(&first);
    for family in [
        "ck_connections_selected",
        "ck_worker_connections",
        "ck_connections_dropped",
    ] {
        assert!(
            first_families.contains(family),
            "{family} missing:\n{first}"
        );
    }
}
