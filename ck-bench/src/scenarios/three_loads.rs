//! The three paced loads that `reload`, `upgrade` and `survive` run at once on one fleet, and
//! the rows their tables share. The loads: keep-alive (retrying once a request its reused
//! connection lost before any answer, as HTTP clients do), keep-alive that never retries (as
//! wrk), and a new connection per request, each [`CONNECTIONS`] connections at [`RATE`]
//! requests a second. Each round of a contender runs them in a steady window, then in the
//! window of its event (rolls, upgrades, a kill and take-back): [`figures`] keeps both windows'
//! figures, [`lay_out`] puts them in the table, load by load.

use std::net::SocketAddr;
use std::time::Duration;

use ck_tests::load::{self, LoadHandle, LoadReport, LoadSpec, Mode};

use crate::plot::timeline::Series;
use crate::rounds::{FailureNotes, Figures, Goal, Layout};
use crate::table::Unit;

/// Connections of each load.
pub(super) const CONNECTIONS: usize = 16;
/// Requests per second of each load.
pub(super) const RATE: f64 = 1000.0;
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Figures' key of the steady window.
const STEADY: &str = "steady";
/// Figures' key of the event's window.
const EVENT: &str = "event";

/// One of the three loads: its figures' key, its name in the tables, how it connects and
/// whether it retries a request its reused connection lost.
struct Load {
    key: &'static str,
    name: &'static str,
    mode: Mode,
    retry: bool,
}

/// The loads, in the order of their rows.
const LOADS: [Load; 3] = [
    Load {
        key: "ka",
        name: "keep-alive",
        mode: Mode::KeepAlive,
        retry: true,
    },
    Load {
        key: "ka_no_retry",
        name: "keep-alive no retry",
        mode: Mode::KeepAlive,
        retry: false,
    },
    Load {
        key: "new",
        name: "new-conn",
        mode: Mode::NewConnection,
        retry: true,
    },
];

/// The three loads of one window, as they ended (in the order of [`LOADS`]).
pub(super) struct Window {
    reports: Vec<LoadReport>,
}

impl Window {
    /// Each load's answers and failures as a plot's series.
    pub(super) fn series(&self) -> Vec<Series<'_>> {
        LOADS
            .iter()
            .zip(&self.reports)
            .map(|(l, r)| Series::of(l.name, r))
            .collect()
    }

    /// Keeps the first failures of each load as `label`'s.
    pub(super) fn keep_failures(&self, notes: &mut FailureNotes, label: &str) {
        for report in &self.reports {
            notes.keep(label, report);
        }
    }
}

/// The three loads under way.
pub(super) struct Loads {
    handles: Vec<LoadHandle>,
}

impl Loads {
    /// Starts the three loads on `addr` for at most `duration`.
    pub(super) fn start(addr: SocketAddr, duration: Duration) -> Loads {
        let handles = LOADS
            .iter()
            .map(|l| {
                let mut spec = LoadSpec::for_duration(addr, l.mode, CONNECTIONS, duration);
                spec.rate = Some(RATE);
                spec.timeout = REQUEST_TIMEOUT;
                spec.retry = l.retry;
                load::start(spec)
            })
            .collect();
        Loads { handles }
    }

    /// Waits for the loads to end.
    pub(super) fn join(self) -> Window {
        Window {
            reports: self.handles.into_iter().map(LoadHandle::join).collect(),
        }
    }

    /// Asks the loads to end now.
    pub(super) fn stop(&self) {
        for handle in &self.handles {
            handle.stop();
        }
    }
}

/// Sets a round's figures of the two windows: per load, the p99 of each, their ratio (the
/// event's over the steady one's), the event's maximum, and the failed requests of each; and
/// the keep-alive requests retried during the event.
pub(super) fn figures(f: &mut Figures, steady: &Window, event: &Window) {
    for ((l, s), e) in LOADS.iter().zip(&steady.reports).zip(&event.reports) {
        let (s99, e99) = (ms(s.p99()), ms(e.p99()));
        f.set(&format!("{}_{STEADY}_p99", l.key), s99)
            .set(&format!("{}_{EVENT}_p99", l.key), e99)
            .set(&format!("{}_p99_ratio", l.key), e99 / s99.max(1e-3))
            .set(&format!("{}_{EVENT}_max", l.key), ms(e.quantile(1.0)))
            .failures(&format!("{}_{STEADY}_failed", l.key), s)
            .failures(&format!("{}_{EVENT}_failed", l.key), e);
    }
    f.set("ka_retried", event.reports[0].retried as f64);
}

/// What the shared rows of a table say: the event window's name (`during the rolls`), the
/// steady window's length, the goal on each load's p99 during the event over its steady p99
/// (none: the ratio is a detail), and the columns the goals are about.
pub(super) struct Rows<'a> {
    /// The event window's name in the rows.
    pub(super) event: &'a str,
    /// How long the steady window is.
    pub(super) steady: Duration,
    /// The most p99 during the event, as a multiple of the steady p99.
    pub(super) p99_ratio_at_most: Option<f64>,
    /// The columns whose failures must be none (and whose p99 ratio is bounded).
    pub(super) columns: &'a [&'a str],
}

/// Lays out, load by load, the rows of [`figures`]: p99 steady (a detail) and during the
/// event, their ratio, the event's maximum (a detail), failed requests of both windows over all
/// rounds (a detail when steady; none wanted during the event); then the keep-alive requests
/// retried (a detail).
pub(super) fn lay_out(t: &mut Layout, rows: &Rows) {
    let none = || Goal::at_most(0.0, Unit::Count).of(rows.columns);
    let event = rows.event;
    for l in &LOADS {
        let (name, key) = (l.name, l.key);
        t.values(
            &format!("{name} p99, steady {:?}", rows.steady),
            &format!("{key}_{STEADY}_p99"),
            Unit::Ms,
        )
        .detail()
        .values(
            &format!("{name} p99, {event}"),
            &format!("{key}_{EVENT}_p99"),
            Unit::Ms,
        )
        .values(
            &format!("{name} p99, {event} / steady"),
            &format!("{key}_p99_ratio"),
            Unit::Ratio,
        );
        match rows.p99_ratio_at_most {
            Some(most) => t.goal(Goal::at_most(most, Unit::Ratio).of(rows.columns)),
            None => t.detail(),
        };
        t.values(
            &format!("{name} max, {event}"),
            &format!("{key}_{EVENT}_max"),
            Unit::Ms,
        )
        .detail()
        .failures(
            &format!("{name} failed, steady, all rounds"),
            &format!("{key}_{STEADY}_failed"),
        )
        .detail()
        .failures(
            &format!("{name} failed, {event}, all rounds"),
            &format!("{key}_{EVENT}_failed"),
        )
        .goal(none());
    }
    t.total(
        &format!("keep-alive retried, {event}, all rounds"),
        "ka_retried",
        Unit::Count,
    )
    .detail()
    .note(
        "retried = keep-alive requests whose reused connection was closed by a stopping worker \
         before answering, re-sent once on a new connection (as HTTP clients do)",
    );
}

/// A duration in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
