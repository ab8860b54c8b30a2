//! The `first-moment` scenario: keep-alive clients that connect as a fleet boots, as a load
//! balancer's pool or a service's HTTP agent reconnects after a restart. In each of [`ROUNDS`]
//! rounds each contender (ck, `--no-bpf`) in turn starts a fresh fleet of [`WORKERS`] workers
//! of the Node hello app; the moment its port first answers a `GET /`, [`CONNECTIONS`]
//! keep-alive connections start an unpaced load of [`LOAD`] (never retrying). [`SETTLE`] into
//! the load, the open connections per worker are read from `ck status --json` (the kernel's
//! counts; with `--no-bpf`, sock_diag's). Reported: the fewest and most connections one worker
//! holds, the rounds in which a worker held more than [`SLACK`] off an even share, and the
//! requests per second (with the ratio of the medians, and the median of the rounds' ratios),
//! and, as a detail, the supervisor's own CPU time during the load.
//! Goals: ck even in every round, and its median throughput no more than 2 % below
//! `--no-bpf`'s median (whose kernel hash spreads the connections over the booting workers).

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadSpec, Mode};

use super::fleet::{first_answer, node_app};
use crate::rounds::contender::Fleet;
use crate::rounds::{Contender, Figures, Goal, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of every fleet.
const WORKERS: u32 = 2;
/// Keep-alive connections of the load.
const CONNECTIONS: usize = 50;
/// How far a worker's count may be from an even share (`CONNECTIONS / WORKERS`).
const SLACK: u64 = 2;
/// The load's length.
const LOAD: Duration = Duration::from_secs(5);
/// Into the load, when the connections per worker are read (every one opened by then).
const SETTLE: Duration = Duration::from_secs(1);
/// Rounds: a goal bounds a ratio near 1 (throughput within 2 % of `--no-bpf`'s), and a fresh
/// Node fleet's first 5 s swing by a factor of 1.7 from round to round on a 2-core machine.
const ROUNDS: usize = 15;
/// ck's median throughput over `--no-bpf`'s median, at least.
const THROUGHPUT_GOAL: f64 = 0.98;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![Contender::ck("ck", &[]), Contender::no_bpf(NO_BPF, &[])]
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    super::peers::ensure_node()?;
    let group = node_app(WORKERS)?;
    let plan = bench.plan("first-moment", ROUNDS, contenders());
    let measured = plan.run(bench, |i, c, _| {
        let mut fleet = c.spawn(bench, &format!("first{i}"), &group)?;
        let figures = measure(bench, &mut fleet).with_context(|| c.label.clone());
        fleet.stop(bench)?;
        let figures = figures?;
        bench.progress(format_args!(
            "first-moment: {}: {} to {} connections per worker, {:.0} req/s",
            c.label,
            figures.get("fewest").unwrap_or(0.0),
            figures.get("most").unwrap_or(0.0),
            figures.get("req_s").unwrap_or(0.0),
        ));
        Ok(figures)
    })?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// One round of one fresh fleet: the load from its first answer, where its connections went.
fn measure(bench: &Bench, fleet: &mut Fleet) -> Result<Figures> {
    let addr = fleet.addr();
    first_answer(addr)?;
    let inst = fleet
        .instance()
        .context("first-moment's contenders are ck instances")?;
    let mut spec = LoadSpec::for_duration(addr, Mode::KeepAlive, CONNECTIONS, bench.span(LOAD));
    spec.retry = false;
    let cpu_before = ck_tests::cpu::ticks_cpu(inst.pid());
    let started = Instant::now();
    let handle = load::start(spec);
    std::thread::sleep(SETTLE);
    let status = inst.status()?;
    let report = handle.join();
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = ck_tests::cpu::ticks_cpu(inst.pid());
    let held: Vec<u64> = status
        .slots
        .iter()
        .filter(|s| s.pid.is_some())
        .map(|s| s.connections.unwrap_or(0))
        .collect();
    let mut figures = figures(&held, report.ok, seconds);
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        figures.set(
            "ck_cpu_ms",
            after.saturating_sub(before).as_secs_f64() * 1000.0,
        );
    }
    Ok(figures)
}

/// A round's figures from the connections each worker held, the requests answered and the
/// load's length.
fn figures(held: &[u64], ok: u64, seconds: f64) -> Figures {
    let even = (CONNECTIONS as u64) / u64::from(WORKERS);
    let fewest = held.iter().copied().min().unwrap_or(0);
    let most = held.iter().copied().max().unwrap_or(0);
    let uneven = held.len() != WORKERS as usize || held.iter().any(|n| n.abs_diff(even) > SLACK);
    let mut f = Figures::new();
    f.set("fewest", fewest as f64)
        .set("most", most as f64)
        .set("uneven", f64::from(u8::from(uneven)))
        .set("req_s", ok as f64 / seconds);
    f
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let even = CONNECTIONS as u64 / u64::from(WORKERS);
    let mut t = Layout::new(
        m,
        &format!(
            "first-moment: {WORKERS} workers of the Node hello app, a fresh fleet each round, \
             {CONNECTIONS} keep-alive connections (never retrying) from the moment the port \
             first answers"
        ),
    );
    t.values("fewest connections on one worker", "fewest", Unit::Count)
        .values("most connections on one worker", "most", Unit::Count)
        .total(
            &format!("rounds with a worker more than {SLACK} off {even}"),
            "uneven",
            Unit::Count,
        )
        .goal(Goal::at_most(0.0, Unit::Count).of(&["ck"]))
        .values("requests/s", "req_s", Unit::Rate("req/s"))
        .median_ratios("median requests/s over --no-bpf's", "req_s", NO_BPF)
        .goal(Goal::at_least(THROUGHPUT_GOAL, Unit::Ratio).of(&["ck"]))
        .ratios(
            "requests/s over --no-bpf's, round by round",
            "req_s",
            NO_BPF,
        )
        .values("ck's own CPU during the load", "ck_cpu_ms", Unit::Ms)
        .detail();
    t.note(format!(
        "open connections per worker from ck status --json {SETTLE:?} into the load (the \
         kernel's counts; --no-bpf: sock_diag); before ck spread a booting fleet, every \
         connection of a load started this early could land on the first ready worker"
    ));
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_off_the_even_share_makes_the_round_uneven() {
        let f = figures(&[25, 25], 500, 5.0);
        assert_eq!(f.get("uneven"), Some(0.0));
        assert_eq!(f.get("req_s"), Some(100.0));
        assert_eq!(figures(&[23, 27], 0, 1.0).get("uneven"), Some(0.0));
        assert_eq!(figures(&[22, 28], 0, 1.0).get("uneven"), Some(1.0));
        assert_eq!(figures(&[50, 0], 0, 1.0).get("fewest"), Some(0.0));
        assert_eq!(
            figures(&[50], 0, 1.0).get("uneven"),
            Some(1.0),
            "one worker only"
        );
    }
}
