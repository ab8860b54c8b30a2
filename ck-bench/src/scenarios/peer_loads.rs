//! The `peers` scenario: ck beside node:cluster and pm2 as someone choosing between them tries
//! them. [`WORKERS`] workers of the Node hello app under each of ck, `ck --adopt`, `ck
//! --no-bpf`, node:cluster and pm2 (cluster mode); the peers and `--adopt` run the same
//! unmodified app (`ck-bench/apps/hello.js`, binding its port itself), ck and `--no-bpf` its
//! handler on the socket ck hands over (`examples/worker.js`). In every round each contender
//! in turn starts a fresh fleet and, the moment its port first answers (as a balancer's pool
//! or a service's HTTP agent reconnects after a restart), takes [`KEEP_ALIVE`] keep-alive
//! connections that never retry for [`LOAD`], then [`CLIENTS`] clients opening a new
//! connection per request for as long. A peer is started until its processes serve (neither
//! says when a worker is ready); ck is not waited for. All the while an idle ck runs on
//! another port.
//!
//! Reported: each load's rate and its ratio to node:cluster's (goal: ck's new connections at
//! least node:cluster's); ck's programs' run time per connection of its fleet (the kernel's
//! accounting of `ck_select` and the connection counter during the new-connection load); and
//! the idle ck's programs' run time per connection of each fleet, the tax ck lays on traffic
//! that is not its own (goal, on the peers' fleets: under [`HOST_TAX_GOAL_NS`]).

use std::time::Duration;

use anyhow::{Context as _, Result};
use ck_tests::bpf_stats::{self, RunStats, StatsOn};
use ck_tests::ck::Ck;
use ck_tests::load::{self, LoadSpec, Mode};

use super::fleet::{
    AnyFleet, NODE_CLUSTER, PM2, first_answer, node_app, node_script, peer_contenders, peer_tools,
};
use super::peers::apps_dir;
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured, NO_BPF, Role};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of every fleet.
const WORKERS: u32 = 2;
/// Keep-alive connections of the first load.
const KEEP_ALIVE: usize = 50;
/// Clients of the new-connection load, each one request in flight.
const CLIENTS: usize = 16;
/// The length of each load.
const LOAD: Duration = Duration::from_secs(4);
/// Pause between the loads.
const PAUSE: Duration = Duration::from_millis(300);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Rounds: a goal bounds a ratio at 1 (ck's new connections over node:cluster's), which takes
/// at least 7; a round (four fresh fleets) is about 40 s.
const ROUNDS: usize = 7;
/// The most an idle ck's programs may cost a connection that is not its own, in ns.
const HOST_TAX_GOAL_NS: f64 = 5.0;

/// ck adopting the peers' own app's sockets: its column.
const ADOPT: &str = "ck --adopt";
/// Its setup index ([`Contender::setup`]), which its `--against` copy keeps: it runs
/// [`hello_app`], the others [`node_app`].
const ADOPT_SETUP: usize = 1;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    let mut all = vec![
        Contender::ck("ck", &[]),
        Contender::ck(ADOPT, &["--adopt"]).with_setup(ADOPT_SETUP),
        Contender::no_bpf(NO_BPF, &[]),
    ];
    all.extend(peer_contenders());
    all
}

/// `workers` workers of the app the peers run, `ck-bench/apps/hello.js`, unmodified: each binds
/// `PORT` (which ck sets) on 127.0.0.1 itself, and `--adopt` takes its socket into the group.
fn hello_app(workers: u32) -> Result<Group> {
    Ok(node_script(&apps_dir()?.join("hello.js"), workers))
}

/// ck's programs of one instance's group: `ck_select` and the connection counter.
struct Programs([u32; 2]);

impl Programs {
    /// The programs of the ck instance `ck`.
    fn of(ck: &Ck) -> Result<Programs> {
        let name = ck.name();
        Ok(Programs([
            bpf_stats::program_of(name)?,
            bpf_stats::conns_program_of(name)?,
        ]))
    }

    /// Their runs and run time so far, summed.
    fn read(&self) -> Result<RunStats> {
        bpf_stats::read_sum(&self.0)
    }
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let pm2 = peer_tools()?;
    let _stats = StatsOn::enable()?;
    let (worker_js, hello) = (node_app(WORKERS)?, hello_app(WORKERS)?);
    let plan = bench.plan("peers", ROUNDS, contenders());
    // The idle instance, from the measured build's binary.
    let idle = Contender {
        bin: plan.contenders()[0].bin.clone(),
        ..Contender::ck("idle ck", &[])
    };
    let idle = idle.start(bench, "peers-idle", &Group::demo(1))?;
    let idle_programs = Programs::of(idle.instance().context("the idle ck is a ck")?)?;
    let measured = plan.run(bench, |_, c, r| {
        let what = format!("peers{}", r + 1);
        // By setup, not label: an `--against` copy is labelled after its build.
        let group = if c.setup == ADOPT_SETUP {
            &hello
        } else {
            &worker_js
        };
        let fleet = AnyFleet::spawn(bench, c, &what, group, &pm2)?;
        let figures =
            measure(bench, &fleet, c.role, &idle_programs).with_context(|| c.label.clone());
        fleet.stop(bench)?;
        figures
    });
    idle.stop(bench)?;
    let measured = measured?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// One round of one fresh fleet: both loads from its first answer, and what ck's programs (its
/// own, and the idle instance's) ran meanwhile.
fn measure(bench: &Bench, fleet: &AnyFleet, role: Role, idle: &Programs) -> Result<Figures> {
    let addr = fleet.addr();
    first_answer(addr)?;
    let run = |mode, connections| {
        let mut spec = LoadSpec::for_duration(addr, mode, connections, bench.span(LOAD));
        spec.retry = false;
        spec.timeout = REQUEST_TIMEOUT;
        load::run(spec)
    };
    let keep_alive = run(Mode::KeepAlive, KEEP_ALIVE);
    std::thread::sleep(PAUSE);
    // ck's own programs, for a contender that loads them (`--no-bpf` and the peers do not).
    let own = match (role, fleet.ck()) {
        (Role::Ck, Some(ck)) => Some(Programs::of(ck)?),
        _ => None,
    };
    let before = (own.as_ref().map(Programs::read).transpose()?, idle.read()?);
    let new_conn = run(Mode::NewConnection, CLIENTS);
    let after = (own.as_ref().map(Programs::read).transpose()?, idle.read()?);
    let connections = new_conn.ok.max(1) as f64;
    let mut f = Figures::new();
    f.set("keep_alive_rate", keep_alive.rps())
        .set("new_conn_rate", new_conn.rps())
        .set(
            "host_tax_ns",
            after.1.time_ns.saturating_sub(before.1.time_ns) as f64 / connections,
        )
        .set("failed", (keep_alive.failed() + new_conn.failed()) as f64);
    if let (Some(b), Some(a)) = (before.0, after.0) {
        f.set(
            "own_ns",
            a.time_ns.saturating_sub(b.time_ns) as f64 / connections,
        );
    }
    bench.progress(format_args!(
        "peers: {:.0} req/s keep-alive, {:.0} conn/s new-conn, an idle ck's programs {:.1} ns \
         per connection",
        f.get("keep_alive_rate").unwrap_or(0.0),
        f.get("new_conn_rate").unwrap_or(0.0),
        f.get("host_tax_ns").unwrap_or(0.0),
    ));
    Ok(f)
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "peers: {WORKERS} workers of the Node hello app, a fresh fleet each round: \
             {KEEP_ALIVE} keep-alive connections (never retrying) from the port's first \
             answer, then new connections from {CLIENTS} clients, {} s each",
            LOAD.as_secs()
        ),
    );
    t.values(
        "keep-alive from the first answer, req/s",
        "keep_alive_rate",
        Unit::Rate("req/s"),
    )
    .ratios(
        "keep-alive: / node:cluster",
        "keep_alive_rate",
        NODE_CLUSTER,
    )
    .values(
        "new connection per request, conn/s",
        "new_conn_rate",
        Unit::Rate("conn/s"),
    )
    .ratios("new-conn: / node:cluster", "new_conn_rate", NODE_CLUSTER)
    .goal(Goal::at_least(1.0, Unit::Ratio).of(&["ck", ADOPT]))
    .total("failed requests, all rounds", "failed", Unit::Count)
    .goal(Goal::at_most(0.0, Unit::Count).of(&["ck", ADOPT]))
    .values(
        "ck's programs, ns per connection of its fleet",
        "own_ns",
        Unit::Ns,
    )
    .values(
        "an idle ck's programs, ns per connection of this fleet",
        "host_tax_ns",
        Unit::Ns,
    )
    .goal(Goal::at_most(HOST_TAX_GOAL_NS, Unit::Ns).of(&[NODE_CLUSTER, PM2]));
    t.note(
        "a peer is started until its processes serve, ck is not waited for; the peers and ck \
         --adopt run ck-bench/apps/hello.js, ck and --no-bpf examples/worker.js (its handler \
         plus the connection bookkeeping of a graceful close); programs' run time from the \
         kernel's accounting (ck_select and the connection counter) during the new-connection \
         load; the load client runs on the workers' CPUs",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn ck_s_own_programs_show_in_its_columns_only_and_the_host_tax_is_judged_on_the_peers() {
        let plan = Plan::new("peers", ROUNDS, contenders(), "/ck".as_ref(), None);
        let labels = ["ck", ADOPT, NO_BPF, NODE_CLUSTER, PM2];
        let figures = |label: &str, r: usize| {
            let mut f = BTreeMap::from([
                ("keep_alive_rate".to_string(), 1000.0),
                ("new_conn_rate".to_string(), 100.0 * (1.0 + r as f64)),
                ("failed".to_string(), 0.0),
                // pm2's column taxed in the last round only.
                (
                    "host_tax_ns".to_string(),
                    if label == PM2 && r == ROUNDS - 1 {
                        40.0
                    } else {
                        0.1
                    },
                ),
            ]);
            if label == "ck" {
                f.insert("own_ns".to_string(), 500.0);
            }
            if label == ADOPT {
                f.insert("own_ns".to_string(), 600.0);
            }
            f
        };
        let round = |r: usize| RoundFigures {
            order: labels.iter().map(|l| l.to_string()).collect(),
            figures: labels
                .iter()
                .map(|l| (l.to_string(), figures(l, r)))
                .collect(),
            seconds: 40.0,
        };
        let t = table(&Measured::new(plan, (0..ROUNDS).map(round).collect())).unwrap();
        let row = |start: &str| t.rows.iter().find(|r| r.metric.starts_with(start)).unwrap();
        let own = row("ck's programs");
        assert_eq!(own.cells[0].text, "500.0 ns");
        assert_eq!(own.cells[1].text, "600.0 ns");
        assert!(own.cells[2..].iter().all(|c| c.text == "-"), "{own:?}");
        let new_conn = row("new-conn: / node:cluster");
        assert_eq!(new_conn.cells[0].text, "1.00");
        assert_eq!(
            new_conn.goal.as_ref().unwrap().text(),
            ">= 1.00 (ck, ck --adopt): met"
        );
        // The median hides one round; the verdict is the median's.
        let tax = row("an idle ck's");
        assert_eq!(tax.cells[4].text, "0.1 ns (0.1-40.0)");
        assert_eq!(
            tax.goal.as_ref().unwrap().text(),
            "<= 5.0 ns (node:cluster, pm2): met"
        );
    }
}
