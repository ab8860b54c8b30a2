//! The `conn-count` scenario: what counting open connections in the kernel (`ck_conns`, a
//! `tp_btf/inet_sock_set_state` program) costs, beside the selection program every connection
//! already pays for (`ck_select`), both from the kernel's own accounting in the same rounds (see
//! [`ck_tests::bpf_stats`]); and how exact the counts are, in every round.
//!
//! One contender, ck with [`WORKERS`] demo workers (round-robin), and with `--against` its copy
//! on the other build. In each of [`ROUNDS`] rounds: [`HELD`] keep-alive connections are held
//! (the count in `ck status` should be [`HELD`]), then closed (it should fall to 0); then new
//! connections (one request each, then closed) for [`LOAD`], the programs' counters read before
//! and after, and the count read again once they closed (none should be left). The tracepoint
//! runs for every TCP state change on the machine (other traffic included), so runs per
//! connection is what it saw in the round divided by the round's connections. The exactness
//! goals are on the sums over the rounds: one miscount in any round misses them.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::bpf_stats::{self, StatsOn};
use ck_tests::ck::Ck;
use ck_tests::http::hold;
use ck_tests::load::{self, LoadSpec, Mode};

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of the fleet.
const WORKERS: u32 = 2;
/// Length of a round's load of new connections.
const LOAD: Duration = Duration::from_secs(1);
/// Concurrent load connections.
const CLIENTS: usize = 16;
/// Rounds: no goal bounds a ratio, and a round takes a few seconds; many short rounds keep a
/// round during which other work evicted the maps from the caches an outlier, not a shift.
const ROUNDS: usize = 9;
/// Connections held open for the exactness check.
const HELD: usize = 200;
/// How long counts get to reach what is expected (closing crosses loopback).
const SETTLE: Duration = Duration::from_secs(10);

/// The contenders.
fn contenders() -> Vec<Contender> {
    vec![Contender::ck("ck", &["--policy", "round-robin"])]
}

/// Measures and returns the table.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let _stats = StatsOn::enable()?;
    let plan = bench.plan("conn-count", ROUNDS, contenders());
    let mut fleets = contender::start_all(
        bench,
        plan.contenders(),
        "conn-count",
        &Group::demo(WORKERS),
    )?;
    let mut programs = Vec::new();
    for fleet in &fleets {
        let name = ck_of(fleet)?.name();
        let select = bpf_stats::program_of(name)?;
        let conns = bpf_stats::program_using(name, bpf_stats::CONNS_PROGRAM, "conns")?;
        programs.push((select, conns));
    }
    let measured = plan.run(bench, |i, c, _| {
        round(bench, &mut fleets[i], programs[i], &c.label)
    })?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// One round: the held connections counted, then the load with both programs' counters.
fn round(
    bench: &Bench,
    fleet: &mut Fleet,
    (select, conns): (u32, u32),
    label: &str,
) -> Result<Figures> {
    let addr = fleet.addr();
    let inst = fleet
        .instance_mut()
        .context("conn-count's contenders are ck instances")?;
    let (held, _) = hold(addr, HELD);
    let open = total(inst, |n| n == HELD as u64)?;
    drop(held);
    let closed = total(inst, |n| n == 0)?;

    let (s0, c0) = (bpf_stats::read(select)?, bpf_stats::read(conns)?);
    let report = load::run(LoadSpec::for_duration(
        addr,
        Mode::NewConnection,
        CLIENTS,
        bench.span(LOAD),
    ));
    let (s1, c1) = (bpf_stats::read(select)?, bpf_stats::read(conns)?);
    let (select_runs, select_ns) = s0.until(s1);
    let (conns_runs, conns_ns) = c0.until(c1);
    let (Some(select_ns), Some(conns_ns)) = (select_ns, conns_ns) else {
        bail!(
            "the kernel counted {select_runs} run(s) of ck_select and {conns_runs} of ck_conns \
             for {} answered connections: are BPF run-time statistics working?",
            report.ok
        );
    };
    let left = total(inst, |n| n == 0)?;
    bench.progress(format_args!(
        "conn-count: {label}: {} connections, ck_conns {conns_ns:.1} ns, ck_select \
         {select_ns:.1} ns; held {open}/{HELD}, closed {closed}, left {left}",
        report.ok
    ));
    let per_conn = conns_runs as f64 / report.ok.max(1) as f64;
    let mut f = Figures::new();
    f.set("conns_ns", conns_ns)
        .set("select_ns", select_ns)
        .set("conns_runs_per_conn", per_conn)
        .set("conns_ns_per_conn", per_conn * conns_ns)
        .set("connections", report.ok as f64)
        .set("miscounted", open.abs_diff(HELD as u64) as f64)
        .set("closed", closed as f64)
        .set("left", left as f64);
    Ok(f)
}

/// The sum of the slots' open connections once `done` accepts it (or the last one read).
fn total(inst: &mut Ck, done: impl Fn(u64) -> bool) -> Result<u64> {
    let sum = |s: &ck_tests::Status| -> u64 { s.slots.iter().filter_map(|s| s.connections).sum() };
    match inst.wait_status_every(
        "the open connections",
        SETTLE,
        Duration::from_millis(50),
        |s| done(sum(s)),
    ) {
        Ok(status) => Ok(sum(&status)),
        Err(_) => Ok(sum(&inst.status()?)),
    }
}

/// The `ck run` of a fleet.
fn ck_of(fleet: &Fleet) -> Result<&Ck> {
    fleet
        .instance()
        .context("conn-count's contenders are ck instances")
}

/// The table: ck_conns beside ck_select, then the counts.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "conn-count: open connections counted in the kernel, {WORKERS} demo workers, new \
             connections for {} s per round; {HELD} held, then closed, in every round",
            LOAD.as_secs()
        ),
    );
    let none = || Goal::at_most(0.0, Unit::Count);
    t.values(
        "ck_conns: ns per run (kernel run_time_ns / run_cnt)",
        "conns_ns",
        Unit::Ns,
    )
    .values(
        "ck_select: ns per run (kernel run_time_ns / run_cnt)",
        "select_ns",
        Unit::Ns,
    )
    .values(
        "ck_conns: runs per connection",
        "conns_runs_per_conn",
        Unit::Ratio,
    )
    .values("ck_conns: ns per connection", "conns_ns_per_conn", Unit::Ns)
    .values("new connections per round", "connections", Unit::Count)
    .detail()
    .total(
        &format!("miscounted with {HELD} held (|counted - {HELD}|), all rounds"),
        "miscounted",
        Unit::Count,
    )
    .goal(none())
    .total(
        "counted once they closed, all rounds",
        "closed",
        Unit::Count,
    )
    .goal(none())
    .total("left after a round's load, all rounds", "left", Unit::Count)
    .goal(none())
    .note(
        "ck_conns runs on every TCP state change of the machine (about 5 per server connection, \
         plus the client ends'); its time includes the kernel's own timing of each run; \
         ck_select runs once per new connection",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_table_shows_both_programs_and_judges_every_rounds_counts() {
        let plan = Plan::new("conn-count", ROUNDS, contenders(), "/ck".as_ref(), None);
        let round = |r: usize| RoundFigures {
            order: vec!["ck".into()],
            figures: BTreeMap::from([(
                "ck".to_string(),
                BTreeMap::from([
                    ("conns_ns".to_string(), 90.0 + r as f64),
                    ("select_ns".to_string(), 200.0),
                    ("conns_runs_per_conn".to_string(), 10.0),
                    ("conns_ns_per_conn".to_string(), 900.0 + 10.0 * r as f64),
                    ("miscounted".to_string(), 0.0),
                    ("closed".to_string(), 0.0),
                    // One connection left in the last round only.
                    ("left".to_string(), f64::from(r == ROUNDS - 1)),
                ]),
            )]),
            seconds: 5.0,
        };
        let t = table(&Measured::new(plan, (0..ROUNDS).map(round).collect())).unwrap();
        let row = |start: &str| t.rows.iter().find(|r| r.metric.starts_with(start)).unwrap();
        assert_eq!(
            row("ck_conns: ns per run").cells[0].text,
            "94.0 ns (90.0-98.0)"
        );
        assert_eq!(row("ck_select").cells[0].text, "200.0 ns");
        assert_eq!(
            row("ck_conns: ns per connection").cells[0].text,
            "940.0 ns (900.0-980.0)"
        );
        let verdict = |start: &str| row(start).goal.as_ref().unwrap().text();
        assert_eq!(verdict("miscounted"), "<= 0 (ck): met");
        assert_eq!(verdict("left after"), "<= 0 (ck): NOT met");
    }
}
