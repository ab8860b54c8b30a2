//! The `overhead` scenario: the throughput cost of ck's steering, and of `--adopt`. One ck, one
//! `ck --no-bpf`, one `ck --adopt` instance and the same workers with no supervisor at all
//! (`bare`: each binds the port with `SO_REUSEPORT`) (4 demo workers each; the adopted ones
//! bind the port themselves) run side by side; unpaced loads go to one at a time, in turn
//! ([`RUNS`] each, the order rotating from run to run so that none always runs first):
//! keep-alive requests/s, then new connections/s. Reports the medians, the ratios ck/`--no-bpf`
//! and ck/no supervisor of each run's pair and their medians (the goal: a machine whose speed
//! drifts during the bench moves both of a pair), and the ratio `--adopt`/ck. `--no-bpf` carries
//! ck's own cost too (the supervisor runs beside its workers); no supervisor is the limit.

use std::thread;
use std::time::Duration;

use anyhow::Result;
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};

use crate::Bench;
use crate::bare::BareFleet;
use crate::instance::{Instance, Variant};
use crate::plot::bars::{self, Bars, Group};
use crate::table::{Cell, Goal, Table, median, median_duration};

/// Workers of each instance.
const WORKERS: u32 = 4;
/// Runs per variant and mode.
const RUNS: usize = 8;
/// Length of one run.
const DURATION: Duration = Duration::from_secs(4);
/// Pause between runs.
const PAUSE: Duration = Duration::from_millis(300);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The contenders' columns.
const LABELS: [&str; 4] = ["ck", "baseline", "ck --adopt", "no supervisor"];

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
    let mut adopt = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "overhead-adopt",
        Variant::Ck,
        WORKERS,
        &["--adopt"],
    )?;
    ck.wait_ready(WORKERS as usize)?;
    base.wait_ready(WORKERS as usize)?;
    adopt.wait_ready(WORKERS as usize)?;
    let bare = BareFleet::start(&bench.bin, &bench.log_dir, WORKERS)?;
    let adopt_latencies = adopt_latencies(&adopt)?;

    let mut t = Table::with_columns(
        &format!(
            "overhead: {WORKERS} workers, unpaced load for {DURATION:?} per run, \
             runs take turns (ck, baseline, --adopt, no supervisor, rotating), {RUNS} each, \
             median shown"
        ),
        &LABELS,
    );
    let labels = LABELS;
    let mut failed = [0u64; 4];
    let mut groups = Vec::new();
    for spec in &LOADS {
        let mut runs: [Vec<LoadReport>; 4] = Default::default();
        for run in 1..=RUNS {
            let addrs = [ck.addr(), base.addr(), adopt.addr(), bare.addr()];
            for i in (0..addrs.len()).map(|k| (k + run) % addrs.len()) {
                let mut load =
                    LoadSpec::for_duration(addrs[i], spec.mode, spec.connections, DURATION);
                load.timeout = REQUEST_TIMEOUT;
                let report = load::run(load);
                bench.progress(format_args!(
                    "overhead: {} {} run {run}/{RUNS}: {}",
                    spec.name,
                    labels[i],
                    report.summary()
                ));
                failed[i] += report.failed();
                runs[i].push(report);
                thread::sleep(PAUSE);
            }
        }
        let rates = |r: &[LoadReport]| r.iter().map(LoadReport::rps).collect::<Vec<_>>();
        let p99s =
            |r: &[LoadReport]| median_duration(&r.iter().map(|r| r.p99()).collect::<Vec<_>>());
        let medians = runs.each_ref().map(|r| median(&rates(r)));
        groups.push(Group {
            label: format!("{} ({})", spec.name, spec.unit),
            values: medians.to_vec(),
            runs: runs.iter().map(|r| rates(r)).collect(),
        });
        t.row_of(
            &format!(
                "{} {}, {} connections",
                spec.name, spec.unit, spec.connections
            ),
            medians.iter().map(|m| Cell::rate(*m, spec.unit)).collect(),
            Goal::None,
        );
        for (other, label) in [(1, "baseline (--no-bpf)"), (3, "no supervisor")] {
            let paired: Vec<f64> = runs[0]
                .iter()
                .zip(&runs[other])
                .map(|(ck, base)| ck.rps() / base.rps())
                .collect();
            t.row_of(
                &format!("{}: ck / {label}, median of the runs' pairs", spec.name),
                vec![Cell::ratio(median(&paired))],
                Goal::AtLeast(0.98, ">= 0.98"),
            );
            t.note(format!(
                "{} ck / {label} per run: {}",
                spec.name,
                paired
                    .iter()
                    .map(|r| format!("{r:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let adopt_ratio = medians[2] / medians[0];
        t.row_of(
            &format!("{}: --adopt / ck (socket activation)", spec.name),
            vec![Cell::ratio(adopt_ratio)],
            Goal::AtLeast(0.98, ">= 0.98"),
        );
        t.row_of(
            &format!("{} p99", spec.name),
            runs.iter().map(|r| Cell::ms(p99s(r))).collect(),
            Goal::None,
        );
        t.detail();
        let list = |r: &[LoadReport]| {
            rates(r)
                .iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        t.note(format!(
            "{} runs ({}): ck {}; baseline {}; --adopt {}; no supervisor {}",
            spec.name,
            spec.unit,
            list(&runs[0]),
            list(&runs[1]),
            list(&runs[2]),
            list(&runs[3])
        ));
    }
    let restarted = restart_latencies(&mut adopt)?;
    for (what, latencies) in [
        ("the 4 at start", &adopt_latencies),
        ("a replacement after a kill, 5 times", &restarted),
    ] {
        t.row_of(
            &format!("--adopt: listen() -> socket adopted, {what}, median"),
            vec![
                Cell::ms(median_duration(latencies)),
                Cell::text("-"),
                Cell::text("-"),
                Cell::text("-"),
            ],
            Goal::AtMost(10.0, "< 10 ms"),
        );
        t.note(format!(
            "--adopt: listen() -> adopted, {what} (from ck status): {}",
            latencies
                .iter()
                .map(|d| format!("{:.2} ms", d.as_secs_f64() * 1000.0))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    t.row_of(
        "failed requests, all runs",
        failed.iter().map(|f| Cell::count(*f)).collect(),
        Goal::None,
    );
    t.note(
        "the load client runs in this process (2 threads) on the same CPUs as the workers: \
         these are rates of the whole machine, client included, not of ck alone",
    );
    let plot = Bars {
        title: format!(
            "overhead: throughput, {WORKERS} workers, median of {RUNS} runs (dots: each run)"
        ),
        y_desc: "answered requests (keep-alive) or connections per second".into(),
        keys: labels.iter().map(|l| l.to_string()).collect(),
        groups,
        lines: Vec::new(),
        decimals: 0,
    };
    t.plot_with(bench.plot_path("overhead-throughput"), |path| {
        bars::draw(path, &plot)
    });
    for inst in [&ck, &base, &adopt] {
        bench.report_log(inst);
    }
    ck.stop()?;
    base.stop()?;
    adopt.stop()?;
    drop(bare);
    Ok(t)
}

/// Each adopted worker's time from `listen()` to ck adopting its socket (`ck status`).
fn adopt_latencies(inst: &Instance) -> Result<Vec<Duration>> {
    let json: serde_json::Value = serde_json::from_str(&inst.ctl(&["status", "--json"])?)?;
    Ok(json["slots"]
        .as_array()
        .map(|slots| {
            slots
                .iter()
                .filter_map(|s| s["adopt_latency_us"].as_u64())
                .map(Duration::from_micros)
                .collect()
        })
        .unwrap_or_default())
}

/// SIGKILLs slot 0's adopted worker five times and returns each replacement's time from
/// `listen()` to adoption.
fn restart_latencies(inst: &mut Instance) -> Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    for _ in 0..5 {
        let json: serde_json::Value = serde_json::from_str(&inst.ctl(&["status", "--json"])?)?;
        let Some(pid) = json["slots"][0]["pid"].as_u64() else {
            break;
        };
        crate::instance::kill(pid as u32, nix::sys::signal::Signal::SIGKILL)?;
        let replaced = |s: &serde_json::Value| {
            s["slots"][0]["pid"].as_u64().is_some_and(|p| p != pid)
                && s["slots"][0]["state"] == "ready"
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let json: serde_json::Value = serde_json::from_str(&inst.ctl(&["status", "--json"])?)?;
            if replaced(&json) {
                if let Some(us) = json["slots"][0]["adopt_latency_us"].as_u64() {
                    latencies.push(Duration::from_micros(us));
                }
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(PAUSE);
    }
    Ok(latencies)
}
