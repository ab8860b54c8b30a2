//! The outcome of a load: [`LoadReport`] (counts per outcome, who answered, latency histogram,
//! timelines of answers, of their latencies and of failures) and the per-connection recorder
//! that fills one.
//!
//! Each connection records into a report of its own, without locks; the reports are merged at
//! the end. Only the caps of the bounded lists are shared (atomic counters).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::FailureKind;
use super::client::Failure;

/// At most this many entries in [`LoadReport::answers`] (and in [`LoadReport::failures`]).
pub const MAX_TIMELINE: usize = 2_000_000;
/// At most this many entries in [`LoadReport::errors`].
pub const MAX_ERRORS: usize = 20;

/// What a load gave.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// Requests answered with a 2xx status.
    pub ok: u64,
    /// Requests whose connection was refused (`ECONNREFUSED`).
    pub refused: u64,
    /// Requests whose connection was reset or closed (or the pipe broke) before the whole
    /// answer arrived, retries left aside.
    pub reset: u64,
    /// Requests without a complete answer within the timeout.
    pub timeout: u64,
    /// Requests that failed otherwise, a status other than 2xx included.
    pub other: u64,
    /// Requests retried on a new connection after their reused keep-alive connection failed
    /// before answering (only the retry's outcome is counted above).
    pub retried: u64,
    /// Answers per slot (the `slot=` of the body; `?` when it has none).
    pub by_slot: BTreeMap<String, u64>,
    /// Answers per pid (the `pid=` of the body; answers without one are not counted here).
    pub by_pid: BTreeMap<u32, u64>,
    /// Latency of the answered requests, in microseconds: from the send (with a rate and
    /// behind schedule, from the *scheduled* send) to the end of the answer.
    pub latency: Histogram<u64>,
    /// How long the load ran, until its last request finished.
    pub elapsed: Duration,
    /// The first [`MAX_ERRORS`] failures, described, with their time since the start.
    pub errors: Vec<String>,
    /// Time since the start and kind of every failure (up to [`MAX_TIMELINE`]), in time order.
    pub failures: Vec<(Duration, FailureKind)>,
    /// Time since the start and the client's port of the connection every failure happened on
    /// (None: no connection was made), as many as [`LoadReport::failures`], in time order: the
    /// kernel names a server's connections by that port (`sock_diag`).
    pub failed_on: Vec<(Duration, Option<u16>)>,
    /// Time since the start and pid (0 when the body had none) of every answer (up to
    /// [`MAX_TIMELINE`]), in time order.
    pub answers: Vec<(Duration, u32)>,
    /// When every answer arrived and how long it took (up to [`MAX_TIMELINE`]), in time
    /// order: for latency-over-time plots.
    pub samples: Vec<Sample>,
}

/// One answered request, in 8 bytes (a load of 2 M answers keeps 16 MB of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// When the answer was complete, in microseconds since the load's start (saturating: a
    /// load of more than 71 minutes ends at `u32::MAX`).
    pub at_us: u32,
    /// Its latency in microseconds (as in [`LoadReport::latency`]; saturating at 71 minutes).
    pub latency_us: u32,
}

impl Sample {
    /// A sample of an answer `at` since the start that took `latency`.
    fn new(at: Duration, latency: Duration) -> Sample {
        let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
        Sample {
            at_us: micros(at),
            latency_us: micros(latency),
        }
    }

    /// When the answer was complete, since the load's start.
    pub fn at(self) -> Duration {
        Duration::from_micros(u64::from(self.at_us))
    }

    /// Its latency.
    pub fn latency(self) -> Duration {
        Duration::from_micros(u64::from(self.latency_us))
    }
}

impl LoadReport {
    /// A report of nothing.
    pub(crate) fn empty() -> LoadReport {
        LoadReport {
            ok: 0,
            refused: 0,
            reset: 0,
            timeout: 0,
            other: 0,
            retried: 0,
            by_slot: BTreeMap::new(),
            by_pid: BTreeMap::new(),
            latency: Histogram::new(3).expect("3 significant figures are supported"),
            elapsed: Duration::ZERO,
            errors: Vec::new(),
            failures: Vec::new(),
            failed_on: Vec::new(),
            answers: Vec::new(),
            samples: Vec::new(),
        }
    }

    /// Failed requests, all kinds together.
    pub fn failed(&self) -> u64 {
        self.refused + self.reset + self.timeout + self.other
    }

    /// Failures whose time since the start is in `from..to`.
    pub fn failures_within(&self, from: Duration, to: Duration) -> usize {
        self.failures
            .iter()
            .filter(|(at, _)| (from..to).contains(at))
            .count()
    }

    /// The latency at `quantile` (0 without answers).
    pub fn quantile(&self, quantile: f64) -> Duration {
        if self.latency.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_micros(self.latency.value_at_quantile(quantile))
    }

    /// Median latency.
    pub fn p50(&self) -> Duration {
        self.quantile(0.5)
    }

    /// 99th percentile of latency.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// 99.9th percentile of latency.
    pub fn p999(&self) -> Duration {
        self.quantile(0.999)
    }

    /// Answered requests per second of [`elapsed`](LoadReport::elapsed).
    pub fn rps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    /// One line: answers, each failure kind, retries, latency percentiles, answers per second.
    pub fn summary(&self) -> String {
        format!(
            "ok={} refused={} reset={} timeout={} other={} retried={} \
             p50={:.1?} p99={:.1?} p999={:.1?} rps={:.0} in {:.2?}",
            self.ok,
            self.refused,
            self.reset,
            self.timeout,
            self.other,
            self.retried,
            self.p50(),
            self.p99(),
            self.p999(),
            self.rps(),
            self.elapsed,
        )
    }

    /// Adds what one connection recorded.
    pub(crate) fn merge(&mut self, part: Recorder, errors: &mut Vec<(Duration, String)>) {
        let Recorder { report, errors: e } = part;
        self.ok += report.ok;
        self.refused += report.refused;
        self.reset += report.reset;
        self.timeout += report.timeout;
        self.other += report.other;
        self.retried += report.retried;
        for (slot, n) in report.by_slot {
            *self.by_slot.entry(slot).or_default() += n;
        }
        for (pid, n) in report.by_pid {
            *self.by_pid.entry(pid).or_default() += n;
        }
        self.latency
            .add(&report.latency)
            .expect("auto-resizing histograms add up");
        self.failures.extend(report.failures);
        self.failed_on.extend(report.failed_on);
        self.answers.extend(report.answers);
        self.samples.extend(report.samples);
        errors.extend(e);
    }

    /// Puts the merged timelines in time order.
    pub(crate) fn finish(&mut self, elapsed: Duration, mut errors: Vec<(Duration, String)>) {
        self.elapsed = elapsed;
        self.failures.sort_by_key(|&(at, _)| at);
        self.failed_on.sort_by_key(|&(at, _)| at);
        self.answers.sort_by_key(|&(at, _)| at);
        self.samples.sort_unstable_by_key(|s| s.at_us);
        errors.sort_by_key(|(at, _)| *at);
        self.errors = errors
            .into_iter()
            .map(|(at, what)| format!("+{:.6}s {what}", at.as_secs_f64()))
            .collect();
    }
}

/// Caps of the bounded lists, shared by the connections of a load.
#[derive(Debug, Default)]
pub(crate) struct Caps {
    answers: AtomicUsize,
    failures: AtomicUsize,
    errors: AtomicUsize,
}

/// Takes one place of `cap` in `used`, if there is one left.
fn take(used: &AtomicUsize, cap: usize) -> bool {
    // Checked first so that the counter stops moving once full.
    used.load(Ordering::Relaxed) < cap && used.fetch_add(1, Ordering::Relaxed) < cap
}

/// What one connection records.
#[derive(Debug)]
pub(crate) struct Recorder {
    report: LoadReport,
    /// Described failures with their time (formatted at the end, in time order).
    errors: Vec<(Duration, String)>,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Recorder {
        Recorder {
            report: LoadReport::empty(),
            errors: Vec::new(),
        }
    }

    /// Records an answer from `slot`/`pid` that arrived `at` (since the start) after `latency`.
    pub fn answer(
        &mut self,
        caps: &Caps,
        at: Duration,
        latency: Duration,
        slot: Option<&str>,
        pid: Option<u32>,
    ) {
        let r = &mut self.report;
        r.ok += 1;
        let slot = slot.unwrap_or("?");
        // Look up by &str first: no allocation once a slot has been seen.
        match r.by_slot.get_mut(slot) {
            Some(n) => *n += 1,
            None => {
                r.by_slot.insert(slot.to_string(), 1);
            }
        }
        if let Some(pid) = pid {
            *r.by_pid.entry(pid).or_default() += 1;
        }
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        if r.latency.record(micros).is_err() {
            r.latency.saturating_record(micros);
        }
        if take(&caps.answers, MAX_TIMELINE) {
            r.answers.push((at, pid.unwrap_or(0)));
            r.samples.push(Sample::new(at, latency));
        }
    }

    /// Records a failure that happened `at` (since the start) on the connection from the
    /// client's port `port` (None: none was made).
    pub fn failure(&mut self, caps: &Caps, at: Duration, failure: &Failure, port: Option<u16>) {
        let r = &mut self.report;
        match failure.kind {
            FailureKind::Refused => r.refused += 1,
            FailureKind::Reset => r.reset += 1,
            FailureKind::Timeout => r.timeout += 1,
            FailureKind::Other => r.other += 1,
        }
        if take(&caps.failures, MAX_TIMELINE) {
            r.failures.push((at, failure.kind));
            r.failed_on.push((at, port));
        }
        if take(&caps.errors, MAX_ERRORS) {
            self.errors.push((at, failure.to_string()));
        }
    }

    /// Records a retry.
    pub fn retried(&mut self) {
        self.report.retried += 1;
    }
}
