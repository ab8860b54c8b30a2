//! The `reload` scenario: 4 workers under three paced loads at once: keep-alive (retrying once
//! a request its reused connection lost before any answer, as HTTP clients do), keep-alive
//! that never retries (as wrk), and a new connection per request. A steady window of
//! [`STEADY`] is measured first; then fresh loads run from [`LEAD`] before the first of
//! [`RELOADS`] back-to-back `ck reload`s until [`TAIL`] after the last one exits (its old
//! workers are still draining when it returns). Compares the p99 latency of the two windows
//! and counts the failed requests.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use ck_tests::load::LoadReport;

use super::three_loads::{CONNECTIONS, Loads, RATE, Window};
use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::plot::timeline::{self, Panel, Series, Timeline};
use crate::table::{Cell, Goal, Table};

/// Workers of the instance.
const WORKERS: u32 = 4;
/// The steady window.
const STEADY: Duration = Duration::from_secs(2);
/// Load before `ck reload` starts (keep-alive connections are open on the old workers).
const LEAD: Duration = Duration::from_millis(100);
/// Load after `ck reload` exits.
const TAIL: Duration = Duration::from_millis(500);
/// Rolling restarts in the reload window, one after the other.
const RELOADS: usize = 100;
/// Upper bound of the reload window's loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(600);

/// What one variant gave.
struct Outcome {
    steady: Window,
    reload: Window,
    /// How long the `ck reload`s ran, one after the other.
    took: Duration,
    /// When each `ck reload` started, since the reload window's loads started.
    reloads: Vec<Duration>,
    /// Reloads that failed.
    failed_reloads: usize,
}

/// Runs the scenario for ck and the baseline and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let ck = measure(bench, Variant::Ck)?;
    let base = measure(bench, Variant::Baseline)?;

    let mut t = Table::new(&format!(
        "reload: {WORKERS} workers, {RELOADS} `ck reload`s in a row under three loads at once: \
         keep-alive, keep-alive without retries (like wrk) and new connection per request, each \
         {CONNECTIONS} connections at {RATE:.0} req/s"
    ));
    type Pick = fn(&Window) -> &LoadReport;
    let modes: [(&str, Pick); 3] = [
        ("keep-alive", |w| &w.keep_alive),
        ("keep-alive no retry", |w| &w.no_retry),
        ("new-conn", |w| &w.new_conn),
    ];
    for (mode, pick) in modes {
        t.row(
            &format!("{mode} p99, steady {STEADY:?}"),
            Cell::ms(pick(&ck.steady).p99()),
            Cell::ms(pick(&base.steady).p99()),
            Goal::None,
        );
        t.detail();
        t.row(
            &format!("{mode} p99, during the rolls"),
            Cell::ms(pick(&ck.reload).p99()),
            Cell::ms(pick(&base.reload).p99()),
            Goal::None,
        );
        t.row(
            &format!("{mode} max, during the rolls"),
            Cell::ms(pick(&ck.reload).quantile(1.0)),
            Cell::ms(pick(&base.reload).quantile(1.0)),
            Goal::None,
        );
        t.detail();
        for (window, pick_window) in [
            ("steady", (|o| &o.steady) as fn(&Outcome) -> &Window),
            ("during the rolls", |o| &o.reload),
        ] {
            t.row(
                &format!("{mode} failed, {window} (refused/reset/timeout/other)"),
                Cell::failures(pick(pick_window(&ck))),
                Cell::failures(pick(pick_window(&base))),
                Goal::AtMost(0.0, "0"),
            );
            if window == "steady" {
                t.detail();
            }
        }
    }
    t.row(
        "keep-alive retried, during the rolls",
        Cell::count(ck.reload.keep_alive.retried),
        Cell::count(base.reload.keep_alive.retried),
        Goal::None,
    );
    t.detail();
    t.row(
        "`ck reload` mean duration",
        Cell::ms(ck.took / RELOADS as u32),
        Cell::ms(base.took / RELOADS as u32),
        Goal::None,
    );
    t.row(
        "`ck reload`s that failed",
        Cell::count(ck.failed_reloads as u64),
        Cell::count(base.failed_reloads as u64),
        Goal::AtMost(0.0, "0"),
    );
    t.note(format!(
        "during the rolls = from {LEAD:?} before the first `ck reload` until {TAIL:?} after the \
         last one exits (old workers drain after it returns)"
    ));
    t.note(
        "retried = keep-alive requests whose reused connection was closed by a stopping \
         worker before answering, re-sent once on a new connection (as HTTP clients do)",
    );
    for (variant, o) in [("ck", &ck), ("baseline", &base)] {
        for r in [&o.reload.keep_alive, &o.reload.no_retry, &o.reload.new_conn] {
            t.failure_notes(variant, r, 3);
        }
    }
    let plot = Timeline {
        title: format!(
            "reload: latency per 100 ms during {RELOADS} `ck reload`s in a row, {WORKERS} workers"
        ),
        event: "ck reload",
        bucket: Duration::from_millis(100),
        panels: [("ck", &ck), ("baseline (--no-bpf)", &base)]
            .into_iter()
            .map(|(title, o)| Panel {
                title: title.to_string(),
                series: modes
                    .iter()
                    .map(|(mode, pick)| Series::of(*mode, pick(&o.reload)))
                    .collect(),
                events: o.reloads.clone(),
            })
            .collect(),
    };
    t.plot_with(bench.plot_path("reload-latency"), |path| {
        timeline::draw(path, &plot)
    });
    Ok(t)
}

/// Runs the scenario once for `variant`.
fn measure(bench: &Bench, variant: Variant) -> Result<Outcome> {
    let mut inst = Instance::start(&bench.bin, &bench.log_dir, "reload", variant, WORKERS, &[])?;
    inst.wait_ready(WORKERS as usize)?;

    bench.progress(format_args!(
        "reload: {}: steady window ({STEADY:?})",
        variant.label()
    ));
    let steady = Loads::start(&inst, STEADY).join();

    // The loads' clocks start within microseconds of this.
    let loads_started = Instant::now();
    let loads = Loads::start(&inst, CAP);
    thread::sleep(LEAD);
    let started = Instant::now();
    let mut failed_reloads = 0;
    let mut reloads = Vec::with_capacity(RELOADS);
    for i in 0..RELOADS {
        reloads.push(loads_started.elapsed());
        if let Err(e) = inst.ctl(&["reload"]) {
            failed_reloads += 1;
            eprintln!("bench: {}: reload {} failed: {e:#}", variant.label(), i + 1);
        }
        if (i + 1) % 10 == 0 {
            bench.progress(format_args!(
                "reload: {}: {}/{RELOADS} reloads done",
                variant.label(),
                i + 1
            ));
        }
    }
    let took = started.elapsed();
    thread::sleep(TAIL);
    loads.stop();
    let reload = loads.join();
    bench.report_log(&inst);
    inst.stop()?;
    Ok(Outcome {
        steady,
        reload,
        took,
        reloads,
        failed_reloads,
    })
}
