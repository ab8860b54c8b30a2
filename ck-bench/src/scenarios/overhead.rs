//! The `overhead` scenario: the throughput cost of ck's steering, and of `--adopt`. ck, ck
//! without its connection counter ([`NO_COUNTER`]), `ck --no-bpf`, `ck --adopt` and the same
//! demo workers with no supervisor at all (each binding the port with `SO_REUSEPORT`),
//! [`WORKERS`] workers each, run side by side; in every round each
//! takes an unpaced keep-alive load, then an unpaced new-connection load, for [`LOAD`] each,
//! the contenders in turn (the order rotating from round to round). Reported: each one's rate
//! (median of the rounds, with the lowest and highest), the per-round ratios of ck to `--no-bpf`
//! and to no supervisor, and `--adopt` to ck; the control pair (`--no-bpf` / no supervisor) voids
//! a run on a machine too noisy to tell. Then `--adopt`'s time from a worker's `listen()` to ck
//! adopting its socket, at start and after kills. `--no-bpf` carries ck's own cost too (the
//! supervisor runs beside its workers); no supervisor is the limit.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::ck::Ck;
use ck_tests::load::{self, LoadSpec, Mode};
use nix::sys::signal::Signal;

use crate::plot::bars::{self, Bars, Group as BarGroup};
use crate::process::kill;
use crate::rounds::contender::{self, Fleet};
use crate::rounds::{BARE, Contender, Control, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// Rounds: its goals bound ratios within 2 % of 1 (ck at least 0.98 of `--no-bpf` and of no
/// supervisor), which on a noisy 2-core machine takes 15 paired rounds; a round is about 35 s.
const ROUNDS: usize = 15;
/// Length of one load.
const LOAD: Duration = Duration::from_secs(4);
/// Pause between loads.
const PAUSE: Duration = Duration::from_millis(300);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Kills of an adopted worker, each timing its replacement's adoption.
const KILLS: usize = 5;
/// ck with `--adopt`'s column.
const ADOPT: &str = "ck --adopt";
/// ck with its select program but without the kernel's connection counter (`CK_CONN_COUNT=scan`):
/// beside ck and `--no-bpf`, it splits ck's cost per new connection between the counter (the
/// `sock_ops` runs on the slots' cgroups) and the select program.
const NO_COUNTER: &str = "ck, counted by scan";
/// The least ratio of ck to its baselines, and of `--adopt` to ck.
const LEAST_RATIO: f64 = 0.98;

/// One measured load.
struct Load {
    /// Table label, and the prefix of its figures' keys.
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

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck("ck", &[]),
        Contender::ck(NO_COUNTER, &[]).with_env(&[("CK_CONN_COUNT", "scan")]),
        Contender::no_bpf(NO_BPF, &[]),
        Contender::ck(ADOPT, &["--adopt"]),
        Contender::bare(),
    ]
}

/// The control pair: `--no-bpf` / no supervisor on each load's rate.
fn control() -> Control {
    let keys: Vec<(String, String)> = LOADS
        .iter()
        .map(|l| (format!("{}_rate", l.name), format!("{} {}", l.name, l.unit)))
        .collect();
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, n)| (k.as_str(), n.as_str())).collect();
    Control::pair(NO_BPF, BARE, &keys)
}

/// Runs the scenario: the rounds, then `--adopt`'s latencies.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench
        .plan("overhead", ROUNDS, contenders())
        .control(control());
    let fleets = contender::start_all(bench, plan.contenders(), "overhead", &Group::demo(WORKERS))?;
    let adopt = plan
        .contenders()
        .iter()
        .position(|c| c.label == ADOPT)
        .context("overhead has an --adopt contender")?;
    let at_start = adopt_latencies(instance(&fleets[adopt])?)?;
    let measured = plan.run(bench, |i, c, _| round(bench, &fleets[i], &c.label))?;
    let restarted = restart_latencies(bench, instance(&fleets[adopt])?)?;
    contender::stop_all(bench, fleets)?;
    let mut throughput = throughput_table(&measured)?;
    throughput.plot_with(bench.plot_path("overhead-throughput"), |path| {
        bars::draw(path, &plot(&measured))
    });
    let adopted = adopt_table(&measured, &at_start, &restarted)?;
    Ok(measured.outcome(vec![throughput, adopted]))
}

/// One contender's round: each load in turn.
fn round(bench: &Bench, fleet: &Fleet, label: &str) -> Result<Figures> {
    let mut f = Figures::new();
    for spec in &LOADS {
        let mut load =
            LoadSpec::for_duration(fleet.addr(), spec.mode, spec.connections, bench.span(LOAD));
        load.timeout = REQUEST_TIMEOUT;
        let report = load::run(load);
        bench.progress(format_args!(
            "overhead: {} {label}: {}",
            spec.name,
            report.summary()
        ));
        f.set(&format!("{}_rate", spec.name), report.rps())
            .set(&format!("{}_p99", spec.name), ms(report.p99()))
            .set(&format!("{}_failed", spec.name), report.failed() as f64);
        thread::sleep(PAUSE);
    }
    Ok(f)
}

/// The throughput table.
fn throughput_table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "overhead: {WORKERS} demo workers each, unpaced loads of {} s: keep-alive ({} \
             connections), then new-conn ({})",
            LOAD.as_secs(),
            LOADS[0].connections,
            LOADS[1].connections
        ),
    );
    let least = || Goal::at_least(LEAST_RATIO, Unit::Ratio);
    for spec in &LOADS {
        let (name, rate) = (spec.name, format!("{}_rate", spec.name));
        t.values(
            &format!("{name} {}", spec.unit),
            &rate,
            Unit::Rate(spec.unit),
        )
        .ratios(&format!("{name}: / --no-bpf"), &rate, NO_BPF)
        .goal(least().of(&["ck"]))
        .ratios(&format!("{name}: / no supervisor"), &rate, BARE)
        .goal(least().of(&["ck"]))
        .ratios(&format!("{name}: / ck"), &rate, "ck")
        .goal(least().of(&[ADOPT]))
        .values(&format!("{name} p99"), &format!("{name}_p99"), Unit::Ms)
        .detail()
        .total(
            &format!("{name}: failed requests, all rounds"),
            &format!("{name}_failed"),
            Unit::Count,
        )
        .detail();
    }
    t.note(
        "the load client runs in this process (2 threads) on the same CPUs as the workers: \
         these are rates of the whole machine, client included, not of ck alone",
    );
    t.finish()
}

/// `--adopt`'s time from `listen()` to adoption, at start and after each kill.
fn adopt_table(m: &Measured, at_start: &[f64], restarted: &[f64]) -> Result<Table> {
    let mut t = Layout::of_samples(
        m,
        &format!(
            "overhead, --adopt: a worker's listen() to ck adopting its socket (ck status), the \
             {WORKERS} at start and a replacement after each of {KILLS} kills"
        ),
        &[ADOPT],
    );
    let within = || Goal::at_most(10.0, Unit::Ms).of(&[ADOPT]);
    t.samples("listen() -> adopted, at start", ADOPT, at_start, Unit::Ms)
        .goal(within())
        .samples(
            "listen() -> adopted, a replacement",
            ADOPT,
            restarted,
            Unit::Ms,
        )
        .goal(within());
    t.finish()
}

/// The bars: per load, each contender's median, the rounds as dots.
fn plot(m: &Measured) -> Bars {
    let labels: Vec<String> = m
        .plan
        .contenders()
        .iter()
        .map(|c| c.label.clone())
        .collect();
    let groups = LOADS
        .iter()
        .map(|spec| {
            let key = format!("{}_rate", spec.name);
            BarGroup {
                label: format!("{} ({})", spec.name, spec.unit),
                values: labels
                    .iter()
                    .map(|l| m.stat(l, &key).map_or(f64::NAN, |s| s.median))
                    .collect(),
                runs: labels
                    .iter()
                    .map(|l| m.values(l, &key).into_iter().flatten().collect())
                    .collect(),
            }
        })
        .collect();
    Bars {
        title: format!(
            "overhead: throughput, {WORKERS} workers, median of {} rounds (dots: each round)",
            m.rounds.len()
        ),
        y_desc: "answered requests (keep-alive) or connections per second".into(),
        keys: labels,
        groups,
        lines: Vec::new(),
        decimals: 0,
    }
}

/// The `ck run` of a fleet that has one.
fn instance(fleet: &Fleet) -> Result<&Ck> {
    fleet
        .instance()
        .context("the --adopt contender is a ck instance")
}

/// Each adopted worker's time from `listen()` to ck adopting its socket (`ck status`), in ms.
fn adopt_latencies(ck: &Ck) -> Result<Vec<f64>> {
    Ok(ck
        .status()?
        .slots
        .iter()
        .filter_map(|s| s.adopt_latency_us)
        .map(|us| us as f64 / 1000.0)
        .collect())
}

/// SIGKILLs the first slot's adopted worker [`KILLS`] times and returns each replacement's time
/// from `listen()` to adoption, in ms.
fn restart_latencies(bench: &Bench, ck: &Ck) -> Result<Vec<f64>> {
    let mut latencies = Vec::new();
    for n in 1..=KILLS {
        bench.progress(format_args!("overhead: --adopt, kill {n}/{KILLS}"));
        let Some(pid) = ck.status()?.slots.first().and_then(|s| s.pid) else {
            break;
        };
        kill(pid, Signal::SIGKILL)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            let status = ck.status()?;
            let first = status.slots.first();
            if first.is_some_and(|s| s.pid.is_some_and(|p| p != pid) && s.state == "ready") {
                latencies.extend(
                    first
                        .and_then(|s| s.adopt_latency_us)
                        .map(|us| us as f64 / 1000.0),
                );
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(PAUSE);
    }
    Ok(latencies)
}

/// A duration in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::{Plan, RoundFigures};
    use std::collections::BTreeMap;

    /// Rounds in which every contender has the same figures, ck `ck_rate` and the others 100.
    fn measured(ck_rate: f64) -> Measured {
        let plan =
            Plan::new("overhead", ROUNDS, contenders(), "/ck".as_ref(), None).control(control());
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let rate = if c.label == "ck" { ck_rate } else { 100.0 };
                    let f = LOADS.iter().flat_map(|l| {
                        [
                            (format!("{}_rate", l.name), rate),
                            (format!("{}_p99", l.name), 2.0),
                            (format!("{}_failed", l.name), 0.0),
                        ]
                    });
                    (c.label.clone(), f.collect::<BTreeMap<_, _>>())
                })
                .collect(),
            seconds: 40.0,
        };
        Measured::new(plan.clone(), (0..ROUNDS).map(round).collect())
    }

    #[test]
    fn the_goals_are_judged_on_the_ratios_of_ck_and_of_adopt() {
        let t = throughput_table(&measured(97.0)).unwrap();
        let verdicts: Vec<String> = t
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|v| v.text()))
            .collect();
        assert_eq!(
            verdicts[..3],
            [
                ">= 0.98 (ck): NOT met",
                ">= 0.98 (ck): NOT met",
                ">= 0.98 (ck --adopt): met"
            ]
        );
        assert!(t.notes.iter().any(|n| {
            n.starts_with("control pair ck --no-bpf / no supervisor, keep-alive req/s: 1.00")
        }));
        let a = adopt_table(&measured(100.0), &[2.0, 3.0, 2.5, 2.2], &[0.2; 5]).unwrap();
        assert_eq!(a.rows[0].cells[0].text, "2.35 ms (2.00-3.00)");
        assert_eq!(a.rows[0].goal.as_ref().unwrap().met, Some(true));
        assert_eq!(plot(&measured(100.0)).groups[0].runs[0].len(), ROUNDS);
    }
}
