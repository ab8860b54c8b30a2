//! The `footprint` scenario, [`RUNS`] times per variant (alternating): the time from spawning
//! `ck run` to the first answered request (a new connection + `GET /` every [`PROBE_EVERY`]),
//! the supervisor's `VmRSS` once its 4 workers have been ready and idle for [`IDLE`], and the
//! time from SIGTERM to the supervisor's exit while idle. Medians are shown.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ck_tests::load;
use nix::sys::signal::Signal;

use crate::Bench;
use crate::instance::{Instance, Variant, rss_bytes};
use crate::table::{Cell, Goal, Table, median, median_duration};

/// Workers of the instance.
const WORKERS: u32 = 4;
/// Runs per variant.
const RUNS: usize = 3;
/// Interval of the first-answer probe.
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// Limit of one probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest wait for the first answer.
const START_LIMIT: Duration = Duration::from_secs(10);
/// Idle time before the RSS is read and SIGTERM is sent.
const IDLE: Duration = Duration::from_millis(500);
/// Longest wait for the exit.
const EXIT_LIMIT: Duration = Duration::from_secs(15);

/// One run's measurements.
#[derive(Debug, Clone, Copy)]
struct Sample {
    first_answer: Duration,
    rss: u64,
    shutdown: Duration,
}

/// Runs the scenario for ck and the baseline and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut samples: [Vec<Sample>; 2] = [Vec::new(), Vec::new()];
    for run in 1..=RUNS {
        for (i, variant) in Variant::BOTH.into_iter().enumerate() {
            bench.progress(format_args!(
                "footprint: {} run {run}/{RUNS}",
                variant.label()
            ));
            samples[i].push(measure(bench, variant)?);
        }
    }
    let [ck, base] = &samples;

    let mut t = Table::new(&format!(
        "footprint: {WORKERS} demo workers, {RUNS} runs per variant (alternating), median shown"
    ));
    let rss = |s: &[Sample]| median(&s.iter().map(|s| s.rss as f64).collect::<Vec<_>>()) as u64;
    t.row(
        "supervisor VmRSS, idle",
        Cell::mib(rss(ck)),
        Cell::mib(rss(base)),
        Goal::AtMost(8.0, "<= 8 MiB"),
    );
    let first =
        |s: &[Sample]| median_duration(&s.iter().map(|s| s.first_answer).collect::<Vec<_>>());
    t.row(
        "spawn `ck run` -> first answer (raw)",
        Cell::ms(first(ck)),
        Cell::ms(first(base)),
        Goal::AtMost(20.0, "<= 20 ms + app boot (raw <= 20 ms)"),
    );
    let down = |s: &[Sample]| median_duration(&s.iter().map(|s| s.shutdown).collect::<Vec<_>>());
    t.row(
        "SIGTERM -> ck exit, idle",
        Cell::ms(down(ck)),
        Cell::ms(down(base)),
        Goal::AtMost(50.0, "<= 50 ms"),
    );
    for (label, s) in [("ck", ck), ("baseline", base)] {
        let each = |f: fn(&Sample) -> String| s.iter().map(f).collect::<Vec<_>>().join(", ");
        t.note(format!(
            "{label} runs: first answer {}; RSS {}; shutdown {}",
            each(|s| format!("{:.1} ms", s.first_answer.as_secs_f64() * 1e3)),
            each(|s| format!("{:.2} MiB", s.rss as f64 / 1048576.0)),
            each(|s| format!("{:.1} ms", s.shutdown.as_secs_f64() * 1e3)),
        ));
    }
    t.note(
        "first answer: the app's own boot is included (it is not separated); \
         probe = new connection + GET / every 1 ms",
    );
    t.note(
        "shutdown includes the demo worker's close: after SIGTERM it keeps each listener \
         open until it has been quiet for 10 ms (CLOSE_QUIET)",
    );
    Ok(t)
}

/// One run for `variant`.
fn measure(bench: &Bench, variant: Variant) -> Result<Sample> {
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "footprint",
        variant,
        WORKERS,
        &[],
    )?;
    let first_answer = loop {
        let probe = Instant::now();
        if load::get_once(inst.addr(), PROBE_TIMEOUT).is_ok() {
            break inst.spawned.elapsed();
        }
        if inst.spawned.elapsed() >= START_LIMIT {
            bail!(
                "no answer within {START_LIMIT:?} of starting ck; see {}",
                inst.log().display()
            );
        }
        if inst.try_exit()?.is_some() {
            bail!("ck exited while starting; see {}", inst.log().display());
        }
        thread::sleep(PROBE_EVERY.saturating_sub(probe.elapsed()));
    };
    inst.wait_ready(WORKERS as usize)?;
    thread::sleep(IDLE);
    let rss = rss_bytes(inst.pid())?;
    let term = Instant::now();
    inst.signal(Signal::SIGTERM)?;
    inst.wait_exit(EXIT_LIMIT)?;
    let shutdown = term.elapsed();
    bench.report_log(&inst);
    Ok(Sample {
        first_answer,
        rss,
        shutdown,
    })
}
