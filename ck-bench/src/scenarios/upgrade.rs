//! The `upgrade` scenario: 4 workers under three paced loads at once (keep-alive, keep-alive
//! that never retries, new connection per request). A steady window of [`STEADY`] is measured
//! first; then fresh loads run from [`LEAD`] before the first of [`UPGRADES`] `ck upgrade`s
//! (each waits until the new image has its steering checked) until [`TAIL`] after the last.
//! Meanwhile a client asks `status` on the control socket in a tight loop: the longest time
//! between two answers around each upgrade is how long the control socket was unavailable.
//! Compares the p99 latency of the two windows and counts the failed requests.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use ck_tests::load::LoadReport;

use super::three_loads::{CONNECTIONS, Loads, RATE, Window};
use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table, median_duration};

/// Workers of the instance.
const WORKERS: u32 = 4;
/// The steady window.
const STEADY: Duration = Duration::from_secs(3);
/// Load before the first `ck upgrade`.
const LEAD: Duration = Duration::from_millis(300);
/// Load after the last `ck upgrade` exits.
const TAIL: Duration = Duration::from_millis(300);
/// Pause between two upgrades.
const PAUSE: Duration = Duration::from_millis(200);
/// Upgrades in the upgrade window.
const UPGRADES: usize = 10;
/// Upper bound of the upgrade window's loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(300);

/// Answers to `status` on the control socket, asked one after the other.
struct Poller {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<Instant>>,
}

impl Poller {
    /// Asks `status` of instance `name` in a loop; each answer's arrival time is kept.
    fn start(name: &str) -> Poller {
        let path = ck_tests::ck::control_socket(name);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::spawn(move || {
            let mut answers = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                if ask_status(&path) {
                    answers.push(Instant::now());
                }
            }
            answers
        });
        Poller { stop, thread }
    }

    fn finish(self) -> Vec<Instant> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One `status` request; whether it was answered.
fn ask_status(path: &PathBuf) -> bool {
    let Ok(mut stream) = UnixStream::connect(path) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(b"{\"cmd\":\"status\"}\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("{\"status\"")
}

/// The longest time between two answers within `[from, to]` (the answers just outside count
/// as its ends).
fn longest_gap(answers: &[Instant], from: Instant, to: Instant) -> Duration {
    let first = answers.partition_point(|a| *a < from).saturating_sub(1);
    let last = (answers.partition_point(|a| *a <= to) + 1).min(answers.len());
    answers[first..last]
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(to - from)
}

/// What the run gave.
struct Outcome {
    steady: Window,
    upgrading: Window,
    /// How long each `ck upgrade` took (until the new image's steering was checked).
    took: Vec<Duration>,
    /// The control socket's longest silence around each upgrade.
    gaps: Vec<Duration>,
    /// Upgrades that failed.
    failed: usize,
    /// Median time between two status answers in the steady window (the poller's own pace).
    pace: Duration,
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let o = measure(bench)?;
    let mut t = Table::with_columns(
        &format!(
            "upgrade: {WORKERS} workers, {UPGRADES} `ck upgrade`s ({PAUSE:?} apart) under three \
             loads at once: keep-alive, keep-alive without retries (like wrk) and new connection \
             per request, each {CONNECTIONS} connections at {RATE:.0} req/s"
        ),
        &["during upgrades", "steady"],
    );
    type Pick = fn(&Window) -> &LoadReport;
    let modes: [(&str, Pick); 3] = [
        ("keep-alive", |w| &w.keep_alive),
        ("keep-alive no retry", |w| &w.no_retry),
        ("new-conn", |w| &w.new_conn),
    ];
    for (mode, pick) in modes {
        t.row(
            &format!("{mode} p99"),
            Cell::ms(pick(&o.upgrading).p99()),
            Cell::ms(pick(&o.steady).p99()),
            Goal::RatioAtMost(2.0),
        );
        t.row(
            &format!("{mode} max"),
            Cell::ms(pick(&o.upgrading).quantile(1.0)),
            Cell::ms(pick(&o.steady).quantile(1.0)),
            Goal::None,
        );
        t.detail();
        t.row(
            &format!("{mode} failed (refused/reset/timeout/other)"),
            Cell::failures(pick(&o.upgrading)),
            Cell::failures(pick(&o.steady)),
            Goal::AtMost(0.0, "0"),
        );
    }
    let none = || Cell::text("-");
    t.row(
        "control socket unavailable per upgrade, max",
        Cell::ms(o.gaps.iter().max().copied().unwrap_or_default()),
        Cell::ms(o.pace),
        Goal::AtMost(50.0, "< 50 ms"),
    );
    t.detail();
    t.row(
        "control socket unavailable per upgrade, median",
        Cell::ms(median_duration(&o.gaps)),
        Cell::ms(o.pace),
        Goal::AtMost(50.0, "< 50 ms"),
    );
    t.row(
        "`ck upgrade` duration, median (until steering is checked)",
        Cell::ms(median_duration(&o.took)),
        none(),
        Goal::None,
    );
    t.detail();
    t.row(
        "`ck upgrade`s that failed",
        Cell::count(o.failed as u64),
        none(),
        Goal::AtMost(0.0, "0"),
    );
    t.note(format!(
        "during upgrades = from {LEAD:?} before the first `ck upgrade` until {TAIL:?} after the \
         last one exits; the ratio is during / steady"
    ));
    t.note(
        "control socket unavailable = the longest time between two answers of a client asking \
         `status` in a tight loop, from each `ck upgrade`'s start to its end; the steady column \
         is that client's median time between answers when nothing happens",
    );
    for r in [
        &o.upgrading.keep_alive,
        &o.upgrading.no_retry,
        &o.upgrading.new_conn,
    ] {
        t.failure_notes("ck", r, 3);
    }
    Ok(t)
}

fn measure(bench: &Bench) -> Result<Outcome> {
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "upgrade",
        Variant::Ck,
        WORKERS,
        &[],
    )?;
    inst.wait_ready(WORKERS as usize)?;
    bench.progress(format_args!("upgrade: steady window ({STEADY:?})"));
    let poller = Poller::start(inst.name());
    let steady_from = Instant::now();
    let steady = Loads::start(&inst, STEADY).join();
    let steady_answers = poller.finish();
    let mut paces: Vec<Duration> = steady_answers
        .windows(2)
        .filter(|w| w[0] >= steady_from)
        .map(|w| w[1] - w[0])
        .collect();
    paces.sort();

    let loads = Loads::start(&inst, CAP);
    let poller = Poller::start(inst.name());
    thread::sleep(LEAD);
    let mut spans = Vec::new();
    let mut failed = 0;
    for i in 0..UPGRADES {
        let from = Instant::now();
        if let Err(e) = inst.ctl(&["upgrade"]) {
            failed += 1;
            eprintln!("bench: upgrade {} failed: {e:#}", i + 1);
        }
        spans.push((from, Instant::now()));
        thread::sleep(PAUSE);
    }
    thread::sleep(TAIL);
    loads.stop();
    let answers = poller.finish();
    let upgrading = loads.join();
    bench.progress(format_args!("upgrade: {UPGRADES} upgrades done"));
    bench.report_log(&inst);
    inst.stop()?;
    Ok(Outcome {
        steady,
        upgrading,
        took: spans.iter().map(|(from, to)| *to - *from).collect(),
        gaps: spans
            .iter()
            .map(|(from, to)| longest_gap(&answers, *from, *to))
            .collect(),
        failed,
        pace: median_duration(&paces),
    })
}
