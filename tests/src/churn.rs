//! Fleet churn under load, shared by `tests/tests/{under_load,supervision,baseline,slot_reuse}.rs`:
//! a moderate continuous load on an instance while its workers are killed ([`kill_two`]) or
//! rolled ([`reload_times`]), with the report and what the scenario saw, so each test file makes
//! its own assertions (strict ones with BPF steering, none for the `--no-bpf` baseline).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;

use crate::ck::{self, Ck, Status};
use crate::http::local;
use crate::load::{self, FailureKind, LoadHandle, LoadReport, LoadSpec, Mode};
use crate::sys;

/// Concurrent connections of the background load.
pub const CONNECTIONS: usize = 12;
/// Total requests per second of the background load (paced: the machine has two cores, and ck
/// and its workers must keep up).
pub const RATE: f64 = 1500.0;
/// Upper bound of a background load's run; every scenario stops it well before.
const LOAD_LIMIT: Duration = Duration::from_secs(60);
/// How long the load runs before and after each disturbance.
pub const SETTLE: Duration = Duration::from_millis(800);

/// A background load on `127.0.0.1:port` and the instant it was started (answers' and
/// failures' times in its report are measured from just after this instant).
#[derive(Debug)]
pub struct Background {
    handle: LoadHandle,
    started: Instant,
    wall: SystemTime,
}

impl Background {
    /// Starts [`CONNECTIONS`] connections at [`RATE`] requests per second in `mode`.
    pub fn start(port: u16, mode: Mode) -> Background {
        Background::start_with(port, mode, true, RATE)
    }

    /// Like [`Background::start`], with a keep-alive client that never retries a request
    /// (`retry: false`): like wrk, every connection the server closes under a request counts.
    pub fn start_without_retry(port: u16, mode: Mode) -> Background {
        Background::start_with(port, mode, false, RATE)
    }

    /// [`CONNECTIONS`] connections at `rate` requests per second in `mode`, retrying (as HTTP
    /// clients do) or not (as wrk).
    pub fn start_with(port: u16, mode: Mode, retry: bool, rate: f64) -> Background {
        Background::start_spec(Background::spec(port, mode, retry, rate))
    }

    /// What [`Background::start_with`] sends, to change before [`Background::start_spec`]
    /// (e.g. its timeout): [`CONNECTIONS`] connections at `rate`, for at most a minute.
    pub fn spec(port: u16, mode: Mode, retry: bool, rate: f64) -> LoadSpec {
        let mut spec = LoadSpec::for_duration(local(port), mode, CONNECTIONS, LOAD_LIMIT);
        spec.rate = Some(rate);
        spec.retry = retry;
        spec
    }

    /// Starts the load `spec`.
    pub fn start_spec(spec: LoadSpec) -> Background {
        let (started, wall) = (Instant::now(), SystemTime::now());
        Background {
            handle: load::start(spec),
            started,
            wall,
        }
    }

    /// The UTC wall-clock time (as in ck's log lines) of `at` since the load's start.
    pub fn utc(&self, at: Duration) -> String {
        utc(self.wall + at)
    }

    /// Time since the load started (comparable with the report's timelines; a little larger
    /// than the load's own clock, which starts right after).
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops the load and returns its report.
    pub fn finish(self) -> LoadReport {
        self.handle.stop();
        self.handle.join()
    }

    /// Stops the load, prints its report labelled `label` ([`print_report`]) and returns it.
    pub fn finish_and_print(self, label: &str) -> LoadReport {
        let report = self.finish();
        print_report(label, &report);
        report
    }
}

/// Asserts that no request of `report` failed (the message has the summary and the errors).
pub fn assert_no_failures(report: &LoadReport) {
    assert_eq!(
        report.failed(),
        0,
        "{}\n{:?}",
        report.summary(),
        report.errors
    );
}

/// Asserts that `report` has answers and no failure.
pub fn assert_served(report: &LoadReport) {
    assert!(report.ok > 0, "{}", report.summary());
    assert_no_failures(report);
}

/// Prints the report's summary line and its failures by kind, labelled.
pub fn print_report(label: &str, report: &LoadReport) {
    eprintln!("{label}: {}", report.summary());
    eprintln!(
        "{label}: failures by kind {:?}, answers by slot {:?}",
        failures_by_kind(report),
        report.by_slot
    );
    for error in &report.errors {
        eprintln!("{label}:   {error}");
    }
}

/// Failures per kind.
pub fn failures_by_kind(report: &LoadReport) -> BTreeMap<FailureKind, usize> {
    let mut kinds = BTreeMap::new();
    for (_, kind) in &report.failures {
        *kinds.entry(*kind).or_default() += 1;
    }
    kinds
}

/// Answers (time since the load's start, pid) recorded at or after `from` by a pid in `pids`.
pub fn answers_from_after(
    report: &LoadReport,
    from: Duration,
    pids: &BTreeSet<u32>,
) -> Vec<(Duration, u32)> {
    report
        .answers
        .iter()
        .filter(|(at, pid)| *at >= from && pids.contains(pid))
        .copied()
        .collect()
}

/// The longest latency of an answered request: an answer that arrived this long after an
/// instant was sent after it.
pub fn max_latency(report: &LoadReport) -> Duration {
    Duration::from_micros(report.latency.max())
}

/// Answers recorded at or after `from` (since the load's start).
pub fn answers_after(report: &LoadReport, from: Duration) -> usize {
    report.answers.iter().filter(|(at, _)| *at >= from).count()
}

/// What [`kill_two`] saw.
#[derive(Debug)]
pub struct KillRun {
    /// The background load's report.
    pub report: LoadReport,
    /// The workers that were SIGKILLed (of slots 1 and 2).
    pub victims: BTreeSet<u32>,
    /// The status once slots 1 and 2 had ready replacements.
    pub after: Status,
}

/// With `ck` running 3 ready workers on `port`: under a background load in `mode`, SIGKILLs
/// the workers of slots 1 and 2 at once, waits until both slots have ready replacements, lets
/// the load run a little longer, and returns the report.
pub fn kill_two(ck: &mut Ck, port: u16, mode: Mode) -> KillRun {
    let before = ck
        .wait_ready(3, crate::READY_TIMEOUT)
        .expect("wait for ready slots");
    let victims: BTreeSet<u32> = [1, 2]
        .iter()
        .map(|s| before.slot(*s).pid.expect("slots 1 and 2 have workers"))
        .collect();
    let load = Background::start(port, mode);
    std::thread::sleep(SETTLE);
    for pid in &victims {
        sys::signal(*pid, Signal::SIGKILL);
    }
    eprintln!("SIGKILLed {victims:?} at {:?} into the load", load.now());
    let after = ck
        .wait_status(
            "slots 1 and 2 replaced and ready",
            Duration::from_secs(15),
            |s| {
                s.ready_count() == 3
                    && [1, 2].iter().all(|i| {
                        s.slots.iter().any(|slot| {
                            slot.slot == *i && slot.pid.is_some_and(|p| !victims.contains(&p))
                        })
                    })
            },
        )
        .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let report = load.finish();
    KillRun {
        report,
        victims,
        after,
    }
}

/// One `ck reload` of [`reload_times`].
#[derive(Debug)]
pub struct Reload {
    /// Every live worker pid just before it.
    pub before: BTreeSet<u32>,
    /// When it was asked for, since the load's start.
    pub asked: Duration,
    /// When `ck reload` had exited, since the load's start.
    pub done: Duration,
    /// What `ck reload` printed and how it exited.
    pub output: Output,
    /// `asked` and `done` in UTC, to compare with ck's log.
    pub wall: (String, String),
}

impl Reload {
    /// `ck reload`'s stdout and stderr.
    pub fn said(&self) -> String {
        ck::said(&self.output)
    }
}

/// What [`reload_times`] saw.
#[derive(Debug)]
pub struct ReloadRun {
    /// The background load's report.
    pub report: LoadReport,
    /// Each reload in order.
    pub reloads: Vec<Reload>,
    /// The status after the last one.
    pub after: Status,
}

impl ReloadRun {
    /// Asserts that every `ck reload` exited 0 (the message has what it said and ck's log).
    pub fn assert_all_succeeded(&self, ck: &Ck) {
        for (i, reload) in self.reloads.iter().enumerate() {
            assert!(
                reload.output.status.success(),
                "reload {} failed ({}): {}\n--- ck log ---\n{}",
                i + 1,
                reload.output.status,
                reload.said(),
                ck.log()
            );
        }
    }
}

/// With `ck` running `workers` ready workers on `port`: under a background load in `mode`,
/// runs `ck reload` `times` times, one after the other with the load running in between (and
/// for a while after the last one), and returns the report and each reload's outcome. A failed
/// reload does not stop the scenario.
pub fn reload_times(ck: &mut Ck, port: u16, mode: Mode, workers: usize, times: usize) -> ReloadRun {
    ck.wait_ready(workers, crate::READY_TIMEOUT)
        .expect("wait for ready slots");
    let load = Background::start(port, mode);
    reload_times_under(ck, load, times)
}

/// Like [`reload_times`] on a ready fleet, under a load already started (e.g. one that never
/// retries).
pub fn reload_times_under(ck: &mut Ck, load: Background, times: usize) -> ReloadRun {
    std::thread::sleep(SETTLE);
    let mut reloads = Vec::new();
    for _ in 0..times {
        let before = ck.status().expect("ck status").worker_pids();
        let asked = load.now();
        let output = ck.ctl(&["reload"]).expect("ck reload");
        let done = load.now();
        let reload = Reload {
            before,
            asked,
            done,
            output,
            wall: (load.utc(asked), load.utc(done)),
        };
        eprintln!(
            "reload {} from {:?} to {:?} ({} to {}): {} {}",
            reloads.len() + 1,
            reload.asked,
            reload.done,
            reload.wall.0,
            reload.wall.1,
            reload.output.status,
            reload.said().trim()
        );
        reloads.push(reload);
        std::thread::sleep(SETTLE / 2);
    }
    // Longer after the last one: requests sent after it are what the tests look at.
    std::thread::sleep(SETTLE * 2);
    let report = load.finish();
    let after = ck.status().expect("ck status");
    ReloadRun {
        report,
        reloads,
        after,
    }
}

/// `time` as ck's log prints it: `2026-01-31T23:59:59.123456Z` (UTC).
pub fn utc(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        since.subsec_micros()
    )
}
