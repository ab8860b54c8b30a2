//! The `conn-count` table: what counting open connections in the kernel (`ck_conns`, a
//! `tp_btf/inet_sock_set_state` program) costs, beside the selection program every connection
//! already pays for (`ck_select`), both from the kernel's own accounting in the same rounds (see
//! [`ck_tests::bpf_stats`]); and how exact the counts are: held connections counted in
//! `ck status`, and none left once they close, after every round (no drift).
//!
//! One instance, 2 workers, round-robin; in each of [`ROUNDS`] rounds [`CONNECTIONS`] new
//! connections (one request each, then closed), the programs' counters read before and after.
//! The tracepoint runs for every TCP state change on the machine (other traffic included), so
//! runs per connection is what it saw in the round divided by the round's connections.

use std::time::Duration;

use anyhow::{Result, bail};
use ck_tests::http::hold;
use ck_tests::load::{self, LoadSpec, Mode};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table, median};
use ck_tests::bpf_stats::{self, StatsOn};

/// New connections per round.
const CONNECTIONS: u64 = 3_000;
/// Concurrent load connections.
const CLIENTS: usize = 16;
/// Rounds (their median is shown).
const ROUNDS: usize = 9;
/// Connections held open for the exactness check.
const HELD: usize = 200;
/// How long counts get to reach what is expected (closing crosses loopback).
const SETTLE: Duration = Duration::from_secs(10);

/// Both programs' cost per run and runs per connection, per round.
#[derive(Debug, Default)]
struct Rounds {
    conns_ns: Vec<f64>,
    conns_runs: Vec<f64>,
    select_ns: Vec<f64>,
}

/// Measures and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let _stats = StatsOn::enable()?;
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "conn-count",
        Variant::Ck,
        2,
        &["--policy", "round-robin"],
    )?;
    inst.wait_ready(2)?;
    let select = bpf_stats::program_of(inst.name())?;
    let conns = bpf_stats::program_using(inst.name(), bpf_stats::CONNS_PROGRAM, "conns")?;

    bench.progress(format_args!("conn-count: {HELD} connections held"));
    let (held, _) = hold(inst.addr(), HELD);
    let open = total(&mut inst, |n| n == HELD as u64)?;
    drop(held);
    let closed = total(&mut inst, |n| n == 0)?;

    let mut rounds = Rounds::default();
    let mut drift = 0;
    for round in 1..=ROUNDS {
        bench.progress(format_args!("conn-count: round {round}/{ROUNDS}"));
        let (s0, c0) = (bpf_stats::read(select)?, bpf_stats::read(conns)?);
        let report = load::run(LoadSpec::for_requests(
            inst.addr(),
            Mode::NewConnection,
            CLIENTS,
            CONNECTIONS,
        ));
        let (s1, c1) = (bpf_stats::read(select)?, bpf_stats::read(conns)?);
        let (select_runs, select_ns) = s0.until(s1);
        let (conns_runs, conns_ns) = c0.until(c1);
        let (Some(select_ns), Some(conns_ns)) = (select_ns, conns_ns) else {
            bail!(
                "the kernel counted {select_runs} run(s) of ck_select and {conns_runs} of \
                 ck_conns for {} answered connections: are BPF run-time statistics working?",
                report.ok
            );
        };
        rounds.select_ns.push(select_ns);
        rounds.conns_ns.push(conns_ns);
        rounds
            .conns_runs
            .push(conns_runs as f64 / report.ok.max(1) as f64);
        drift = drift.max(total(&mut inst, |n| n == 0)?);
    }
    bench.report_log(&inst);
    inst.stop()?;
    Ok(table(&rounds, open, closed, drift))
}

/// The sum of the slots' open connections once `done` accepts it (or the last one read).
fn total(inst: &mut Instance, done: impl Fn(u64) -> bool) -> Result<u64> {
    let sum = |s: &ck_tests::Status| -> u64 { s.slots.iter().filter_map(|s| s.connections).sum() };
    match inst.wait_status(SETTLE, Duration::from_millis(50), |s| done(sum(s))) {
        Ok(status) => Ok(sum(&status)),
        Err(_) => Ok(sum(&inst.status()?)),
    }
}

/// The table: ck_conns beside ck_select, then the counts.
fn table(rounds: &Rounds, open: u64, closed: u64, drift: u64) -> Table {
    let mut t = Table::with_columns(
        &format!(
            "conn-count: open connections counted in the kernel, {CONNECTIONS} new connections \
             per round, {ROUNDS} rounds, median shown"
        ),
        &["ck_conns", "ck_select"],
    );
    let ns = |v: f64| Cell {
        text: format!("{v:.1} ns"),
        num: Some(v),
    };
    t.row(
        "ns per run (kernel run_time_ns / run_cnt)",
        ns(median(&rounds.conns_ns)),
        ns(median(&rounds.select_ns)),
        Goal::None,
    );
    let per_conn = median(&rounds.conns_runs);
    t.row(
        "runs per connection",
        Cell {
            text: format!("{per_conn:.2}"),
            num: Some(per_conn),
        },
        Cell::count(1),
        Goal::None,
    );
    t.row(
        "ns per connection",
        ns(per_conn * median(&rounds.conns_ns)),
        ns(median(&rounds.select_ns)),
        Goal::None,
    );
    t.row(
        &format!("miscounted with {HELD} held (|counted - {HELD}|)"),
        Cell::count(open.abs_diff(HELD as u64)),
        Cell::text("-"),
        Goal::AtMost(0.0, "0"),
    );
    t.row(
        "counted once they closed",
        Cell::count(closed),
        Cell::text("-"),
        Goal::AtMost(0.0, "0"),
    );
    t.row(
        "left after a round (most over the rounds)",
        Cell::count(drift),
        Cell::text("-"),
        Goal::AtMost(0.0, "0"),
    );
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    t.note(format!(
        "ck_conns ns per run, each round: {}",
        show(&rounds.conns_ns)
    ));
    t.note(format!(
        "ck_select ns per run, each round: {}",
        show(&rounds.select_ns)
    ));
    t.note(
        "ck_conns runs on every TCP state change of the machine (about 5 per server connection, \
         plus the client ends'); its time includes the kernel's own timing of each run",
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_cost_and_counts() {
        let rounds = Rounds {
            conns_ns: vec![90.0, 100.0, 110.0],
            conns_runs: vec![10.0; 3],
            select_ns: vec![200.0; 3],
        };
        let text = table(&rounds, HELD as u64, 0, 0).render();
        for needle in ["100.0 ns", "200.0 ns", "1000.0 ns", "10.00"] {
            assert!(text.contains(needle), "no {needle:?} in {text}");
        }
    }
}
