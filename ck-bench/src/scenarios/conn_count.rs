//! The `conn-count` scenario: what counting open connections in the kernel costs, on each hook
//! ck can count on (`ck_conns_ops`, a `sock_ops` program on each slot's cgroup, the default;
//! `ck_conns` on `tp_btf/inet_sock_set_state`, host-wide, `CK_CONN_COUNT=host`), beside the
//! selection program every connection already pays for (`ck_select`), all from the kernel's own
//! accounting in the same rounds (see [`ck_tests::bpf_stats`]); what ck charges to connections
//! that are not its fleet's; and how exact the counts are, in every round.
//!
//! Four contenders: ck on either hook with [`WORKERS`] demo workers (round-robin), each with
//! [`IDLE`] more idle instances on the same hook beside it (so [`IDLE`] + 1 ck instances per
//! hook); the floor ([`FLOOR`]), a `--no-bpf` fleet of as many workers with minimal programs
//! of ck's object attached in the same places as ck's (`ck_udp_minimal` on its group,
//! `ck_minimal_count` on the cgroup of its listening sockets): what any select program plus
//! any count kept by `sock_ops` costs per connection here; and the same floor for a count
//! whose closes are seen at the last `close()` of a connection instead of its `CLOSE` state
//! ([`FLOOR_RELEASE`]: `ck_minimal_open` and `ck_minimal_release`), fewer runs per connection
//! for a count of another thing (a connection its worker closed leaves it at once, one never
//! accepted and dropped with its listener never does). Beside them, a bare fleet on a port of
//! its own that no ck serves. In each of [`ROUNDS`] rounds,
//! for each contender: [`HELD`] keep-alive connections are held (the count in `ck status` should
//! be [`HELD`]), then closed (it should fall to 0); then new connections (one request each,
//! then closed) for [`LOAD`], the programs' counters read before and after, and the count read
//! again once they closed (none should be left); then the same load to the bare fleet, and what
//! the contender's instances' programs ran meanwhile, per connection of that fleet: the tax ck
//! puts on the host's other traffic. The exactness goals are on the sums over the rounds: one
//! miscount in any round misses them.

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::bpf_stats::{self, RunStats, StatsOn};
use ck_tests::ck::Ck;
use ck_tests::http::hold;
use ck_tests::load::{self, LoadSpec, Mode};

use nix::sys::socket::SockType;

use super::minimal_program::{Count, Minimal};
use crate::rounds::contender::{self, Fleet, Role};
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
/// Idle ck instances started beside each contender, on its hook.
const IDLE: usize = 2;
/// At most this many ns of ck's programs per foreign connection (with every instance of a hook).
const FOREIGN_GOAL_NS: f64 = 5.0;
/// At most this many ns of ck's programs (select and count) per connection of its fleet.
const FLEET_GOAL_NS: f64 = 350.0;
/// The contender on the host-wide tracepoint.
const HOST: &str = "ck, host-wide hook";
/// The contender with the minimal programs.
const FLOOR: &str = "minimal programs";
/// The contender with the minimal programs that see a close at its release.
const FLOOR_RELEASE: &str = "minimal, closes at release";
/// Its setup index ([`Contender::setup`]), which its `--against` copy keeps.
const RELEASE_SETUP: usize = 1;
/// Connections held open for the exactness check.
const HELD: usize = 200;
/// How long counts get to reach what is expected (closing crosses loopback).
const SETTLE: Duration = Duration::from_secs(10);

/// The contenders.
fn contenders() -> Vec<Contender> {
    let ck = Contender::ck("ck", &["--policy", "round-robin"]);
    let host = ck
        .clone()
        .labelled(HOST)
        .with_env(&[("CK_CONN_COUNT", "host")]);
    vec![
        ck,
        host,
        Contender::no_bpf(FLOOR, &[]),
        Contender::no_bpf(FLOOR_RELEASE, &[]).with_setup(RELEASE_SETUP),
    ]
}

/// The programs of one contender: its fleet's `ck_select` and counter (one program, or two for
/// [`FLOOR_RELEASE`]), and the counters of every instance on its hook (its own and the idle
/// ones).
struct Programs {
    select: u32,
    conns: Vec<u32>,
    all_conns: Vec<u32>,
}

impl Programs {
    /// The fleet's counter programs' runs and time so far, summed.
    fn counter(&self) -> Result<RunStats> {
        bpf_stats::read_sum(&self.conns)
    }

    /// Run time (ns) of every instance's counter so far, summed.
    fn counters_ns(&self) -> Result<u64> {
        Ok(bpf_stats::read_sum(&self.all_conns)?.time_ns)
    }
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
    let mut idle = Vec::new();
    let mut programs = Vec::new();
    // The floor's minimal programs, held while its fleet runs.
    let mut minimals = Vec::new();
    for (fleet, contender) in fleets.iter().zip(plan.contenders()) {
        let name = ck_of(fleet)?.name();
        if contender.role == Role::NoBpf {
            let mut minimal = Minimal::attach(&bench.bin, ck_of(fleet)?, SockType::Stream)?;
            let sockets = ck_tests::sys::cgroup_dir(name)
                .context("no cgroup2 here: the floor's counter needs one")?
                .join("sockets");
            // By setup, not label: an `--against` copy is labelled after its build.
            let way = match contender.setup {
                RELEASE_SETUP => Count::Release,
                _ => Count::StateChanges,
            };
            let conns = minimal.attach_counter(&sockets, way)?;
            programs.push(Programs {
                select: minimal.id,
                all_conns: conns.clone(),
                conns,
            });
            minimals.push(minimal);
            continue;
        }
        let conns = bpf_stats::conns_program_of(name)?;
        let mut all_conns = vec![conns];
        for _ in 0..IDLE {
            let other = contender.start(bench, "conn-count-idle", &Group::demo(1))?;
            all_conns.push(bpf_stats::conns_program_of(ck_of(&other)?.name())?);
            idle.push(other);
        }
        programs.push(Programs {
            select: bpf_stats::program_of(name)?,
            conns: vec![conns],
            all_conns,
        });
    }
    // The demo workers with no supervisor, from the measured build's binary.
    let bare = Contender {
        bin: plan.contenders()[0].bin.clone(),
        ..Contender::bare()
    };
    let foreign = bare.start(bench, "conn-count-foreign", &Group::demo(WORKERS))?;
    let measured = plan.run(bench, |i, c, _| {
        round(
            bench,
            &mut fleets[i],
            &programs[i],
            foreign.addr(),
            &c.label,
        )
    })?;
    drop(minimals);
    contender::stop_all(bench, fleets)?;
    contender::stop_all(bench, idle)?;
    foreign.stop(bench)?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// One round: the held connections counted, then the load with both programs' counters.
fn round(
    bench: &Bench,
    fleet: &mut Fleet,
    programs: &Programs,
    foreign: std::net::SocketAddr,
    label: &str,
) -> Result<Figures> {
    let select = programs.select;
    let addr = fleet.addr();
    let inst = fleet
        .instance_mut()
        .context("conn-count's contenders are ck instances")?;
    let (held, _) = hold(addr, HELD);
    let open = total(inst, |n| n == HELD as u64)?;
    drop(held);
    let closed = total(inst, |n| n == 0)?;

    let (s0, c0) = (bpf_stats::read(select)?, programs.counter()?);
    let report = load::run(LoadSpec::for_duration(
        addr,
        Mode::NewConnection,
        CLIENTS,
        bench.span(LOAD),
    ));
    let (s1, c1) = (bpf_stats::read(select)?, programs.counter()?);
    let (select_runs, select_ns) = s0.until(s1);
    let (conns_runs, conns_ns) = c0.until(c1);
    let (Some(select_ns), Some(conns_ns)) = (select_ns, conns_ns) else {
        bail!(
            "the kernel counted {select_runs} run(s) of ck_select and {conns_runs} of the counter \
             for {} answered connections: are BPF run-time statistics working?",
            report.ok
        );
    };
    let left = total(inst, |n| n == 0)?;

    // The same load to a fleet that is not ck's: what every instance on this hook ran.
    let (tax0, select_before) = (programs.counters_ns()?, bpf_stats::read(select)?);
    let other = load::run(LoadSpec::for_duration(
        foreign,
        Mode::NewConnection,
        CLIENTS,
        bench.span(LOAD),
    ));
    let (tax1, select_after) = (programs.counters_ns()?, bpf_stats::read(select)?);
    let foreign_ns = (tax1.saturating_sub(tax0)
        + select_after.time_ns.saturating_sub(select_before.time_ns)) as f64
        / other.ok.max(1) as f64;

    let per_conn = conns_runs as f64 / report.ok.max(1) as f64;
    let fleet_ns = per_conn * conns_ns + select_runs as f64 / report.ok.max(1) as f64 * select_ns;
    bench.progress(format_args!(
        "conn-count: {label}: {} connections, counter {conns_ns:.1} ns x {per_conn:.2}, \
         ck_select {select_ns:.1} ns: {fleet_ns:.0} ns per connection; {} foreign: \
         {foreign_ns:.1} ns each; held {open}/{HELD}, closed {closed}, left {left}",
        report.ok, other.ok
    ));
    let mut f = Figures::new();
    f.set("conns_ns", conns_ns)
        .set("select_ns", select_ns)
        .set("conns_runs_per_conn", per_conn)
        .set("conns_ns_per_conn", per_conn * conns_ns)
        .set("fleet_ns_per_conn", fleet_ns)
        .set("foreign_ns_per_conn", foreign_ns)
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

/// The table: the programs per connection of the fleet and of the host's other traffic, the
/// counter beside ck_select, then the counts.
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
        "ck's programs, ns per fleet connection",
        "fleet_ns_per_conn",
        Unit::Ns,
    )
    // The floors beside ck, in the same line: the goal is ck's, and no count kept in their
    // shape can cost less than they do.
    .goal(Goal::at_most(FLEET_GOAL_NS, Unit::Ns).of(&["ck", FLOOR, FLOOR_RELEASE]))
    .values(
        &format!(
            "ck's programs, ns per foreign connection ({} instances)",
            IDLE + 1
        ),
        "foreign_ns_per_conn",
        Unit::Ns,
    )
    .goal(Goal::at_most(FOREIGN_GOAL_NS, Unit::Ns).of(&["ck"]))
    .values(
        "counter: ns per run (kernel run_time_ns / run_cnt)",
        "conns_ns",
        Unit::Ns,
    )
    .values(
        "ck_select: ns per run (kernel run_time_ns / run_cnt)",
        "select_ns",
        Unit::Ns,
    )
    .values(
        "counter: runs per connection",
        "conns_runs_per_conn",
        Unit::Ratio,
    )
    .values("counter: ns per connection", "conns_ns_per_conn", Unit::Ns)
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
        "counter: ck_conns_ops (sock_ops, on each slot's cgroup) for ck, ck_conns \
         (tp_btf/inet_sock_set_state, every TCP state change of the host) for the host-wide \
         hook; times include the kernel's timing of each run",
    )
    .note(
        "minimal programs: a --no-bpf fleet with ck_udp_minimal (hash % n) on its group and \
         ck_minimal_count (one per-CPU count, +1 established, -1 at CLOSE) on its sockets' \
         cgroup, run by the kernel as often as ck's counter: the floor of a select program \
         and a sock_ops count; closes at release: +1 established (sock_ops, no state change \
         asked), -1 at the last close() (cgroup/sock_release); their open connections in ck \
         status are the sock_diag scan's",
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
        let figures = |r: usize| {
            BTreeMap::from([
                ("conns_ns".to_string(), 90.0 + r as f64),
                ("select_ns".to_string(), 200.0),
                ("conns_runs_per_conn".to_string(), 10.0),
                ("conns_ns_per_conn".to_string(), 900.0 + 10.0 * r as f64),
                ("fleet_ns_per_conn".to_string(), 300.0),
                ("foreign_ns_per_conn".to_string(), 0.0),
                ("miscounted".to_string(), 0.0),
                ("closed".to_string(), 0.0),
                // One connection left in the last round only.
                ("left".to_string(), f64::from(r == ROUNDS - 1)),
            ])
        };
        let round = |r: usize| RoundFigures {
            order: vec!["ck".into(), HOST.into(), FLOOR.into(), FLOOR_RELEASE.into()],
            figures: BTreeMap::from([
                ("ck".to_string(), figures(r)),
                (HOST.to_string(), figures(r)),
                (FLOOR.to_string(), figures(r)),
                (FLOOR_RELEASE.to_string(), figures(r)),
            ]),
            seconds: 5.0,
        };
        let t = table(&Measured::new(plan, (0..ROUNDS).map(round).collect())).unwrap();
        let row = |start: &str| t.rows.iter().find(|r| r.metric.starts_with(start)).unwrap();
        assert_eq!(
            row("counter: ns per run").cells[0].text,
            "94.0 ns (90.0-98.0)"
        );
        assert_eq!(row("ck_select").cells[0].text, "200.0 ns");
        assert_eq!(
            row("counter: ns per connection").cells[0].text,
            "940.0 ns (900.0-980.0)"
        );
        let verdict = |start: &str| row(start).goal.as_ref().unwrap().text();
        assert_eq!(verdict("miscounted"), "<= 0 (ck, ck, host-wide hook): met");
        assert_eq!(
            verdict("left after"),
            "<= 0 (ck, ck, host-wide hook): NOT met"
        );
        assert_eq!(
            verdict("ck's programs, ns per fleet"),
            "<= 350.0 ns (ck, minimal programs, minimal, closes at release): met"
        );
        assert_eq!(
            verdict("ck's programs, ns per foreign"),
            "<= 5.0 ns (ck): met"
        );
    }
}
