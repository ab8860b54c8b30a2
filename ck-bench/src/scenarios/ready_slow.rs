//! The `ready-slow` scenario (issue 14): 2 workers of a server that boots in [`BOOT`] and says
//! nothing (`ck_tests::slow_boot`: Python, waits in `poll`), under a paced new-connection load.
//! A steady window of [`STEADY`] first; then a fresh load from [`LEAD`] before one `ck reload`
//! (both replacements boot at once, `--reload-batch 2`) until [`TAIL`] after it exits. The p99
//! during the roll against the steady p99 (the goal: at most 2x), the failed requests, and how
//! each worker was taken as ready (the log's reason), for ck and the `--no-bpf` baseline (whose
//! kernel sends connections to the booting replacements' sockets).

use std::thread;
use std::time::Duration;

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};
use ck_tests::slow_boot::POLL_SERVER;

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

/// Workers of the instance.
const WORKERS: u32 = 2;
/// The server's boot, in seconds (its first argument).
const BOOT: &str = "10";
/// Connections of the load.
const CONNECTIONS: usize = 12;
/// Requests per second of the load (a Python server per worker, on a small machine).
const RATE: f64 = 300.0;
/// The steady window.
const STEADY: Duration = Duration::from_secs(5);
/// Load before `ck reload` starts.
const LEAD: Duration = Duration::from_millis(500);
/// Load after `ck reload` exits (the old workers drain meanwhile).
const TAIL: Duration = Duration::from_secs(1);
/// Upper bound of the roll window's load (stopped long before).
const CAP: Duration = Duration::from_secs(120);
/// How long the first workers get to boot and be seen waiting.
const FIRST_READY: Duration = Duration::from_secs(60);

/// What one variant gave.
struct Outcome {
    steady: LoadReport,
    roll: LoadReport,
    /// How long `ck reload` took.
    took: Duration,
    /// Whether it exited 0.
    reloaded: bool,
    /// The `worker ready` lines' reasons.
    reasons: Vec<String>,
}

/// Runs the scenario for ck and the baseline and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let server = bench.log_dir.join("poll_server.py");
    std::fs::write(&server, POLL_SERVER)
        .with_context(|| format!("writing {}", server.display()))?;
    let server = server.to_str().context("a UTF-8 temp path")?;
    let ck = measure(bench, Variant::Ck, server)?;
    let base = measure(bench, Variant::Baseline, server)?;

    let mut t = Table::new(&format!(
        "ready-slow: {WORKERS} workers of a server that boots in {BOOT} s and waits in poll() \
         without a word, one `ck reload` under new connections ({CONNECTIONS} connections at \
         {RATE:.0} req/s)"
    ));
    let p99 = |o: &Outcome| (o.steady.p99(), o.roll.p99());
    let (ck_p99, base_p99) = (p99(&ck), p99(&base));
    t.row(
        &format!("new-conn p99, steady {STEADY:?}"),
        Cell::ms(ck_p99.0),
        Cell::ms(base_p99.0),
        Goal::None,
    );
    t.row(
        "new-conn p99, during the roll",
        Cell::ms(ck_p99.1),
        Cell::ms(base_p99.1),
        Goal::None,
    );
    t.row(
        "p99 during the roll / steady p99",
        times(ck_p99.1, ck_p99.0),
        times(base_p99.1, base_p99.0),
        Goal::AtMost(2.0, "<= 2x"),
    );
    t.row(
        "new-conn max, during the roll",
        Cell::ms(ck.roll.quantile(1.0)),
        Cell::ms(base.roll.quantile(1.0)),
        Goal::None,
    );
    t.detail();
    for (window, pick) in [
        ("steady", (|o| &o.steady) as fn(&Outcome) -> &LoadReport),
        ("during the roll", |o| &o.roll),
    ] {
        t.row(
            &format!("failed, {window} (refused/reset/timeout/other)"),
            Cell::failures(pick(&ck)),
            Cell::failures(pick(&base)),
            Goal::AtMost(0.0, "0"),
        );
    }
    t.row(
        "`ck reload` duration (exit 0?)",
        reload_cell(&ck),
        reload_cell(&base),
        Goal::None,
    );
    let by_poll = |o: &Outcome| o.reasons.iter().filter(|r| r.contains("poll()")).count();
    t.row(
        "workers ready by their poll() wait / all ready",
        Cell::text(&format!("{} / {}", by_poll(&ck), ck.reasons.len())),
        Cell::text(&format!("{} / {}", by_poll(&base), base.reasons.len())),
        Goal::None,
    );
    t.note(format!(
        "during the roll = from {LEAD:?} before `ck reload` until {TAIL:?} after it exits; \
         with --no-bpf the kernel sends connections to the booting replacements' sockets, \
         which wait for their boot (or time out at {:?}), and the old workers keep getting \
         connections until --drain-timeout kills them",
        load::DEFAULT_TIMEOUT
    ));
    for (variant, o) in [("ck", &ck), ("baseline", &base)] {
        t.failure_notes(variant, &o.roll, 3);
    }
    Ok(t)
}

/// The ratio `over / under` as a cell (`1.23x`).
fn times(over: Duration, under: Duration) -> Cell {
    let ratio = over.as_secs_f64() / under.as_secs_f64().max(1e-6);
    Cell {
        text: format!("{ratio:.2}x"),
        num: Some(ratio),
    }
}

/// `ck reload`'s duration, marked when it failed.
fn reload_cell(o: &Outcome) -> Cell {
    let mut cell = Cell::ms(o.took);
    if !o.reloaded {
        cell.text += " (failed)";
    }
    cell
}

/// A paced new-connection load on `inst` for up to `limit`.
fn load_on(inst: &Instance, limit: Duration) -> load::LoadHandle {
    let mut spec = LoadSpec::for_duration(inst.addr(), Mode::NewConnection, CONNECTIONS, limit);
    spec.rate = Some(RATE);
    load::start(spec)
}

/// Runs the scenario once for `variant`.
fn measure(bench: &Bench, variant: Variant, server: &str) -> Result<Outcome> {
    let label = variant.label();
    let flags = [
        "--ready-timeout",
        "90s",
        "--reload-batch",
        "2",
        "--",
        "python3",
        server,
        BOOT,
    ];
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "ready-slow",
        variant,
        WORKERS,
        &flags,
    )?;
    bench.progress(format_args!("ready-slow: {label}: first boot ({BOOT} s)"));
    let want_bpf = variant == Variant::Ck;
    inst.wait_status(FIRST_READY, Duration::from_millis(20), |s| {
        s.ready().count() >= WORKERS as usize && (s.bpf || !want_bpf)
    })?;

    bench.progress(format_args!(
        "ready-slow: {label}: steady window ({STEADY:?})"
    ));
    let steady = load_on(&inst, STEADY).join();

    bench.progress(format_args!(
        "ready-slow: {label}: one `ck reload` under load"
    ));
    let roll = load_on(&inst, CAP);
    thread::sleep(LEAD);
    let started = std::time::Instant::now();
    let reloaded = inst
        .ctl(&["reload"])
        .map_err(|e| eprintln!("bench: {label}: reload failed: {e:#}"))
        .is_ok();
    let took = started.elapsed();
    thread::sleep(TAIL);
    roll.stop();
    let roll = roll.join();
    let log = std::fs::read_to_string(inst.log()).unwrap_or_default();
    let reasons = log
        .lines()
        .filter(|l| l.contains("worker ready"))
        .map(|l| l.split_once("reason=").map_or("", |(_, r)| r).to_string())
        .collect();
    bench.report_log(&inst);
    inst.stop()?;
    Ok(Outcome {
        steady,
        roll,
        took,
        reloaded,
        reasons,
    })
}
