//! The `overhead` scenario: the throughput cost of ck's steering. One ck and one baseline
//! instance (4 workers each) run side by side; unpaced loads go to one at a time, alternating
//! ck, baseline, ck, ... ([`RUNS`] each): keep-alive requests/s, then new connections/s.
//! Reports the medians and the ratio ck/baseline.

use std::thread;
use std::time::Duration;

use anyhow::Result;
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};

use super::Bench;
use super::instance::{Instance, Variant};
use super::table::{Cell, Goal, Table, median, median_duration};

/// Workers of each instance.
const WORKERS: u32 = 4;
/// Runs per variant and mode.
const RUNS: usize = 3;
/// Length of one run.
const DURATION: Duration = Duration::from_secs(5);
/// Pause between runs.
const PAUSE: Duration = Duration::from_millis(300);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One measured mode.
struct Load {
    /// Table label.
    name: &'static str,
    mode: Mode,
    connections: usize,
    /// What a request is counted as.
    unit: &'static str,
}

/// The loads, in the order they run.
const LOADS: [Load; 2] = [
    Load {
        name: "keep-alive",
        mode: Mode::KeepAlive,
        connections: 64,
        unit: "req/s",
    },
    Load {
        name: "new-conn",
        mode: Mode::NewConnection,
        connections: 32,
        unit: "conn/s",
    },
];

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut ck = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "overhead",
        Variant::Ck,
        WORKERS,
        &[],
    )?;
    let mut base = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "overhead",
        Variant::Baseline,
        WORKERS,
        &[],
    )?;
    ck.wait_ready(WORKERS as usize)?;
    base.wait_ready(WORKERS as usize)?;

    let mut t = Table::new(&format!(
        "overhead: {WORKERS} workers, unpaced load for {DURATION:?} per run, \
         runs alternate ck/baseline, {RUNS} each, median shown"
    ));
    let mut failed = [0u64; 2];
    for spec in &LOADS {
        let mut runs: [Vec<LoadReport>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..RUNS {
            for (i, inst) in [&ck, &base].into_iter().enumerate() {
                let mut load =
                    LoadSpec::for_duration(inst.addr(), spec.mode, spec.connections, DURATION);
                load.timeout = REQUEST_TIMEOUT;
                let report = load::run(load);
                eprintln!(
                    "bench: {} {} {}",
                    spec.name,
                    Variant::BOTH[i].label(),
                    report.summary()
                );
                failed[i] += report.failed();
                runs[i].push(report);
                thread::sleep(PAUSE);
            }
        }
        let rates = |r: &[LoadReport]| r.iter().map(LoadReport::rps).collect::<Vec<_>>();
        let p99s =
            |r: &[LoadReport]| median_duration(&r.iter().map(|r| r.p99()).collect::<Vec<_>>());
        t.row(
            &format!(
                "{} {}, {} connections",
                spec.name, spec.unit, spec.connections
            ),
            Cell::rate(median(&rates(&runs[0])), spec.unit),
            Cell::rate(median(&rates(&runs[1])), spec.unit),
            Goal::RatioAtLeast(0.98),
        );
        t.row(
            &format!("{} p99", spec.name),
            Cell::ms(p99s(&runs[0])),
            Cell::ms(p99s(&runs[1])),
            Goal::None,
        );
        let list = |r: &[LoadReport]| {
            rates(r)
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        t.note(format!(
            "{} runs ({}): ck {}; baseline {}",
            spec.name,
            spec.unit,
            list(&runs[0]),
            list(&runs[1])
        ));
    }
    t.row(
        "failed requests, all runs",
        Cell::count(failed[0]),
        Cell::count(failed[1]),
        Goal::None,
    );
    t.note(
        "the load client runs in this process (2 threads) on the same CPUs as the workers: \
         these are rates of the whole machine, client included, not of ck alone",
    );
    for inst in [&ck, &base] {
        bench.report_log(inst);
    }
    ck.stop()?;
    base.stop()?;
    Ok(t)
}
