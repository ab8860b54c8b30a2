//! The `recovery` scenario: 3 workers (round-robin), a paced new-connection load, and at
//! [`KILL_AT`] two of the three workers are SIGKILLed. Measures the failed requests by kind,
//! the time from the kill until `ck status` shows three ready workers with new pids (polled
//! every [`POLL`]), and when the new workers first answered the load client.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};
use nix::sys::signal::Signal;

use crate::Bench;
use crate::instance::{Instance, Variant, kill};
use crate::plot::timeline::{self, Panel, Series, Timeline};
use crate::table::{Cell, Goal, Table};

/// Workers of the instance.
const WORKERS: u32 = 3;
/// Workers killed.
const KILLED: usize = 2;
/// Load connections.
const CONNECTIONS: usize = 16;
/// Total requests per second.
const RATE: f64 = 3000.0;
/// Length of the load.
const DURATION: Duration = Duration::from_secs(6);
/// When the workers are killed, after the load started.
const KILL_AT: Duration = Duration::from_secs(2);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Status polling interval while waiting for the recovery.
const POLL: Duration = Duration::from_millis(5);
/// Longest wait for the recovery (it stays inside the load).
const RECOVERY_LIMIT: Duration = Duration::from_secs(3);

/// What one variant gave.
struct Outcome {
    report: LoadReport,
    /// Kill → status shows every slot ready with a new worker.
    recovered: Option<Duration>,
    /// Kill → the last of the new workers answered its first request.
    answering: Option<Duration>,
    /// When the workers were killed, since the load's start.
    killed_at: Duration,
}

/// Runs the scenario for ck and the baseline and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let ck = measure(bench, Variant::Ck)?;
    let base = measure(bench, Variant::Baseline)?;

    let mut t = Table::new(&format!(
        "recovery: {WORKERS} workers (round-robin), new connection per request, \
         {CONNECTIONS} connections at {RATE:.0} req/s for {DURATION:?}; \
         SIGKILL {KILLED} workers at {KILL_AT:?}"
    ));
    t.row(
        "failed requests (refused/reset/timeout/other)",
        Cell::failures(&ck.report),
        Cell::failures(&base.report),
        Goal::AtMost(0.0, "0"),
    );
    let never = format!("> {RECOVERY_LIMIT:?}");
    t.row(
        "kill -> every slot ready, new pids (status)",
        Cell::ms_or(ck.recovered, &never),
        Cell::ms_or(base.recovered, &never),
        Goal::AtMost(500.0, "<= 500 ms"),
    );
    t.row(
        "kill -> every new worker answered (client)",
        Cell::ms_or(ck.answering, "never"),
        Cell::ms_or(base.answering, "never"),
        Goal::None,
    );
    t.detail();
    for (name, q) in [("p99 latency", 0.99), ("max latency", 1.0)] {
        t.row(
            name,
            Cell::ms(ck.report.quantile(q)),
            Cell::ms(base.report.quantile(q)),
            Goal::None,
        );
        if q == 1.0 {
            t.detail();
        }
    }
    t.row(
        "answered requests",
        Cell::count(ck.report.ok),
        Cell::count(base.report.ok),
        Goal::None,
    );
    t.detail();
    t.note(format!(
        "status polled every {POLL:?}; each poll is one `ck status --json` run (~2 ms), \
         so the recovery time is late by up to ~7 ms"
    ));
    for (variant, o) in [("ck", &ck), ("baseline", &base)] {
        t.failure_notes(variant, &o.report, 3);
    }
    let plot = Timeline {
        title: format!(
            "recovery: latency per 100 ms, {WORKERS} workers, SIGKILL {KILLED} at {KILL_AT:?}"
        ),
        event: "SIGKILL",
        bucket: Duration::from_millis(100),
        panels: [("ck", &ck), ("baseline (--no-bpf)", &base)]
            .into_iter()
            .map(|(title, o)| Panel {
                title: title.to_string(),
                series: vec![Series::of("new-conn", &o.report)],
                events: vec![o.killed_at],
            })
            .collect(),
    };
    t.plot_with(bench.plot_path("recovery-latency"), |path| {
        timeline::draw(path, &plot)
    });
    Ok(t)
}

/// Runs the scenario once for `variant`.
fn measure(bench: &Bench, variant: Variant) -> Result<Outcome> {
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "recovery",
        variant,
        WORKERS,
        &["--policy", "round-robin"],
    )?;
    inst.wait_ready(WORKERS as usize)?;

    bench.progress(format_args!(
        "recovery: {}: load for {DURATION:?}, SIGKILL at {KILL_AT:?}",
        variant.label()
    ));
    let mut spec = LoadSpec::for_duration(inst.addr(), Mode::NewConnection, CONNECTIONS, DURATION);
    spec.rate = Some(RATE);
    spec.timeout = REQUEST_TIMEOUT;
    let load_start = Instant::now();
    let load = load::start(spec);
    thread::sleep(KILL_AT.saturating_sub(load_start.elapsed()));

    let before = inst.status()?;
    let victims: Vec<u32> = before.ready().filter_map(|s| s.pid).take(KILLED).collect();
    if victims.len() < KILLED {
        bail!("only {} ready worker(s) to kill: {before:?}", victims.len());
    }
    let killed_at = Instant::now();
    for pid in &victims {
        kill(*pid, Signal::SIGKILL)?;
    }
    let waited = inst.wait_status(RECOVERY_LIMIT, POLL, |s| {
        s.ready().count() == WORKERS as usize
            && s.ready()
                .all(|slot| slot.pid.is_some_and(|p| !victims.contains(&p)))
    });
    let recovered_at = killed_at.elapsed();
    if inst.try_exit()?.is_some() {
        bail!(
            "ck exited during the recovery; see {}",
            inst.log().display()
        );
    }
    let (recovered, new_pids) = match waited {
        Ok(status) => {
            let survivors: Vec<u32> = before.ready().filter_map(|s| s.pid).collect();
            let new: Vec<u32> = status
                .ready()
                .filter_map(|s| s.pid)
                .filter(|p| !survivors.contains(p))
                .collect();
            (Some(recovered_at), new)
        }
        Err(e) => {
            eprintln!("bench: {}: {e:#}", variant.label());
            (None, Vec::new())
        }
    };

    let report = load.join();
    bench.report_log(&inst);
    inst.stop()?;

    // The load's clock started a moment after `load_start` (well under a millisecond).
    let kill_offset = killed_at - load_start;
    let answering = if new_pids.is_empty() {
        None
    } else {
        first_answers(&report, &new_pids).map(|last| last.saturating_sub(kill_offset))
    };
    Ok(Outcome {
        report,
        recovered,
        answering,
        killed_at: kill_offset,
    })
}

/// When the last of `pids` answered for the first time (since the load's start), if all did.
fn first_answers(report: &LoadReport, pids: &[u32]) -> Option<Duration> {
    pids.iter()
        .map(|pid| {
            report
                .answers
                .iter()
                .find(|(_, p)| p == pid)
                .map(|(at, _)| *at)
        })
        .try_fold(Duration::ZERO, |last, first| Some(last.max(first?)))
}
