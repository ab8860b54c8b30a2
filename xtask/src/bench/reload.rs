//! The `reload` scenario: 4 workers under two paced loads at once, one keep-alive and one with a
//! new connection per request. A steady window of [`STEADY`] is measured first; then fresh
//! loads run from [`LEAD`] before `ck reload` until [`TAIL`] after it exits (the old workers
//! are still draining when it returns). Compares the p99 latency of the two windows and counts
//! the failed requests.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use ck_tests::load::{self, LoadHandle, LoadReport, LoadSpec, Mode};

use super::Bench;
use super::instance::{Instance, Variant};
use super::table::{Cell, Goal, Table};

/// Workers of the instance.
const WORKERS: u32 = 4;
/// Connections of each load.
const CONNECTIONS: usize = 16;
/// Requests per second of each load.
const RATE: f64 = 1000.0;
/// The steady window.
const STEADY: Duration = Duration::from_secs(2);
/// Load before `ck reload` starts (keep-alive connections are open on the old workers).
const LEAD: Duration = Duration::from_millis(100);
/// Load after `ck reload` exits.
const TAIL: Duration = Duration::from_millis(500);
/// Upper bound of the reload window's loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(30);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The two loads of one window.
struct Window {
    keep_alive: LoadReport,
    new_conn: LoadReport,
}

/// What one variant gave.
struct Outcome {
    steady: Window,
    reload: Window,
    /// How long `ck reload` ran.
    took: Duration,
}

/// Runs the scenario for ck and the baseline and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let ck = measure(bench, Variant::Ck)?;
    let base = measure(bench, Variant::Baseline)?;

    let mut t = Table::new(&format!(
        "reload: {WORKERS} workers, `ck reload` under two loads at once: keep-alive and \
         new connection per request, each {CONNECTIONS} connections at {RATE:.0} req/s"
    ));
    type Pick = fn(&Window) -> &LoadReport;
    let modes: [(&str, Pick); 2] = [
        ("keep-alive", |w| &w.keep_alive),
        ("new-conn", |w| &w.new_conn),
    ];
    for (mode, pick) in modes {
        t.row(
            &format!("{mode} p99, steady {STEADY:?}"),
            Cell::ms(pick(&ck.steady).p99()),
            Cell::ms(pick(&base.steady).p99()),
            Goal::None,
        );
        t.row(
            &format!("{mode} p99, reload window"),
            Cell::ms(pick(&ck.reload).p99()),
            Cell::ms(pick(&base.reload).p99()),
            Goal::None,
        );
        t.row(
            &format!("{mode} max, reload window"),
            Cell::ms(pick(&ck.reload).quantile(1.0)),
            Cell::ms(pick(&base.reload).quantile(1.0)),
            Goal::None,
        );
        for (window, pick_window) in [
            ("steady", (|o| &o.steady) as fn(&Outcome) -> &Window),
            ("reload window", |o| &o.reload),
        ] {
            t.row(
                &format!("{mode} failed, {window} (refused/reset/timeout/other)"),
                Cell::failures(pick(pick_window(&ck))),
                Cell::failures(pick(pick_window(&base))),
                Goal::AtMost(0.0, "0"),
            );
        }
    }
    t.row(
        "keep-alive retried, reload window",
        Cell::count(ck.reload.keep_alive.retried),
        Cell::count(base.reload.keep_alive.retried),
        Goal::None,
    );
    t.row(
        "`ck reload` duration",
        Cell::ms(ck.took),
        Cell::ms(base.took),
        Goal::None,
    );
    t.note(format!(
        "reload window = from {LEAD:?} before `ck reload` starts until {TAIL:?} after it exits \
         (the reload itself is short; its old workers drain after it returns)"
    ));
    t.note(
        "retried = keep-alive requests whose reused connection was closed by a draining \
         worker before answering, re-sent once on a new connection (as HTTP clients do)",
    );
    for (variant, o) in [("ck", &ck), ("baseline", &base)] {
        for r in [&o.reload.keep_alive, &o.reload.new_conn] {
            for error in r.errors.iter().take(3) {
                t.note(format!("{variant} failure: {error}"));
            }
        }
    }
    Ok(t)
}

/// Runs the scenario once for `variant`.
fn measure(bench: &Bench, variant: Variant) -> Result<Outcome> {
    let mut inst = Instance::start(&bench.bin, &bench.log_dir, "reload", variant, WORKERS, &[])?;
    inst.wait_ready(WORKERS as usize)?;

    let steady = {
        let (ka, nc) = start_loads(&inst, STEADY);
        Window {
            keep_alive: ka.join(),
            new_conn: nc.join(),
        }
    };

    let (ka, nc) = start_loads(&inst, CAP);
    thread::sleep(LEAD);
    let started = Instant::now();
    let reloaded = inst.ctl(&["reload"]);
    let took = started.elapsed();
    thread::sleep(TAIL);
    ka.stop();
    nc.stop();
    let reload = Window {
        keep_alive: ka.join(),
        new_conn: nc.join(),
    };
    bench.report_log(&inst);
    reloaded?;
    inst.stop()?;
    Ok(Outcome {
        steady,
        reload,
        took,
    })
}

/// Starts the keep-alive and the new-connection load on `inst` for at most `duration`.
fn start_loads(inst: &Instance, duration: Duration) -> (LoadHandle, LoadHandle) {
    let spec = |mode| {
        let mut spec = LoadSpec::for_duration(inst.addr(), mode, CONNECTIONS, duration);
        spec.rate = Some(RATE);
        spec.timeout = REQUEST_TIMEOUT;
        spec
    };
    (
        load::start(spec(Mode::KeepAlive)),
        load::start(spec(Mode::NewConnection)),
    )
}
