//! The `long-lived` scenario: how evenly connections that stay open spread over a fleet that
//! grows and churns, per policy. The contenders: least-conn, round-robin, hash, and plain
//! `SO_REUSEPORT` (`--no-bpf`); in each of [`ROUNDS`] rounds (the order rotating) each in turn
//! gets a fresh fleet of [`WORKERS`] workers: [`FIRST`] keep-alive connections opened and held,
//! `ck scale` to [`SCALED`], [`SECOND`] more, then churn: every [`CHURN_EVERY`]th held
//! connection closes and as many new ones open. After each step the open connections per
//! worker are read from `ck status --json` (the kernel's counts; with `--no-bpf`, sock_diag's)
//! and reduced to max/mean: 1.0 is a perfectly even fleet. Reported: the median of the rounds,
//! with the lowest and highest.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use ck_tests::Status;
use ck_tests::ck::Ck;
use ck_tests::http::KeepAlive;

use crate::rounds::contender::READY_TIMEOUT;
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers at the start.
const WORKERS: u32 = 2;
/// Workers after `ck scale`.
const SCALED: u32 = 4;
/// Connections opened (and held) on the first workers.
const FIRST: usize = 400;
/// Connections opened after the scale-up.
const SECOND: usize = 400;
/// Every this many held connections, one closes and is replaced in the churn step.
const CHURN_EVERY: usize = 4;
/// How long the counts get to reach what the client holds.
const SETTLE: Duration = Duration::from_secs(20);
/// The policies measured with BPF, in column order (plain `--no-bpf` comes last).
const POLICIES: [&str; 3] = ["least-conn", "round-robin", "hash"];
/// Rounds: the goals bound max/mean at 1.05, a ratio within 5 % of 1, which takes at least 7.
const ROUNDS: usize = 7;
/// The most max/mean of least-conn after the scale-up and after the churn.
const MOST_UNEVEN: f64 = 1.05;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    let mut all: Vec<Contender> = POLICIES
        .iter()
        .map(|p| Contender::ck(p, &["--policy", *p]))
        .collect();
    all.push(Contender::no_bpf(NO_BPF, &[]));
    all
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("long-lived", ROUNDS, contenders());
    let measured = plan.run(bench, |i, c, _| {
        let mut fleet = c.start(bench, &format!("long{i}"), &Group::demo(WORKERS))?;
        let addr = fleet.addr();
        let inst = fleet
            .instance_mut()
            .context("long-lived's contenders are ck instances")?;
        let figures = measure(bench, &c.label, addr, inst).with_context(|| c.label.clone());
        fleet.stop(bench)?;
        figures
    })?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// Opens `n` keep-alive connections to `addr`, each answered once (so a worker holds it).
fn open(addr: SocketAddr, n: usize) -> Result<Vec<KeepAlive>> {
    (0..n)
        .map(|i| {
            let mut conn = KeepAlive::connect(addr).map_err(|e| anyhow!("connection {i}: {e}"))?;
            conn.get().map_err(|e| anyhow!("answer on {i}: {e}"))?;
            Ok(conn)
        })
        .collect()
}

/// The open connections of each ready worker, once they add up to `total`.
fn counts(inst: &mut Ck, workers: u32, total: usize) -> Result<Vec<u64>> {
    let per_worker = |s: &Status| -> Vec<u64> {
        s.ready()
            .map(|slot| slot.connections.unwrap_or(0))
            .collect()
    };
    let status = inst
        .wait_status_every(
            "the open connections",
            SETTLE,
            Duration::from_millis(50),
            |s| {
                let counts = per_worker(s);
                counts.len() == workers as usize && counts.iter().sum::<u64>() == total as u64
            },
        )
        .with_context(|| format!("{workers} workers holding {total} connections"))?;
    Ok(per_worker(&status))
}

/// max/mean of `counts`.
fn max_over_mean(counts: &[u64]) -> f64 {
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    if mean == 0.0 { 0.0 } else { max / mean }
}

/// Runs the steps on one fleet, ready, at `addr`.
fn measure(bench: &Bench, label: &str, addr: SocketAddr, inst: &mut Ck) -> Result<Figures> {
    let mut held = open(addr, FIRST)?;
    let first = counts(inst, WORKERS, held.len())?;
    inst.ctl_ok(&["scale", &SCALED.to_string()])?;
    inst.wait_ready(SCALED as usize, READY_TIMEOUT)?;
    held.extend(open(addr, SECOND)?);
    let scaled = counts(inst, SCALED, held.len())?;
    // Churn: a share of every worker's connections (every CHURN_EVERY-th, old and new alike)
    // closes, then as many open again.
    let before = held.len();
    let mut i = 0;
    held.retain(|_| {
        i += 1;
        i % CHURN_EVERY != 0
    });
    let closed = before - held.len();
    counts(inst, SCALED, held.len())?;
    held.extend(open(addr, closed)?);
    let churned = counts(inst, SCALED, held.len())?;
    bench.progress(format_args!(
        "long-lived: {label}: {first:?} -> {scaled:?} -> churned {churned:?}"
    ));
    let mut f = Figures::new();
    f.set("first", max_over_mean(&first))
        .set("scaled", max_over_mean(&scaled))
        .set("churned", max_over_mean(&churned));
    for (slot, n) in churned.iter().enumerate() {
        f.set(&format!("churned_open{slot}"), *n as f64);
    }
    Ok(f)
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "long-lived: {WORKERS} demo workers, {FIRST} keep-alive connections held, scale to \
             {SCALED}, {SECOND} more, then 1 in {CHURN_EVERY} closes and reopens, a fresh fleet \
             each round: max/mean open connections per worker"
        ),
    );
    let even = || Goal::at_most(MOST_UNEVEN, Unit::Ratio).of(&[POLICIES[0]]);
    t.values(
        &format!("{WORKERS} workers, {FIRST} connections"),
        "first",
        Unit::Ratio,
    )
    .values(
        &format!("scaled to {SCALED}, {} connections", FIRST + SECOND),
        "scaled",
        Unit::Ratio,
    )
    .goal(even())
    .values("after the churn", "churned", Unit::Ratio)
    .goal(even());
    for slot in 0..SCALED {
        t.values(
            &format!("open on worker {slot} after the churn"),
            &format!("churned_open{slot}"),
            Unit::Count,
        )
        .detail();
    }
    t.note(
        "open connections from ck status --json (the kernel's counts; --no-bpf: sock_diag); a \
         client on one machine, the demo worker, keep-alive connections each answered once",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn least_conn_is_held_to_an_even_fleet_over_seven_rounds() {
        assert_eq!(max_over_mean(&[110, 90, 100, 100]), 1.1);
        assert_eq!(max_over_mean(&[]), 0.0);
        let plan = Plan::new("long-lived", ROUNDS, contenders(), "/ck".as_ref(), None);
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let uneven = if c.label == "least-conn" {
                        1.0 + r as f64 * 0.01
                    } else {
                        1.4
                    };
                    let f = BTreeMap::from([
                        ("first".to_string(), 1.0),
                        ("scaled".to_string(), uneven),
                        ("churned".to_string(), uneven + 0.03),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 30.0,
        };
        let t = table(&Measured::new(
            plan.clone(),
            (0..ROUNDS).map(round).collect(),
        ))
        .unwrap();
        let verdicts: Vec<String> = t
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|v| v.text()))
            .collect();
        assert_eq!(
            verdicts,
            ["<= 1.05 (least-conn): met", "<= 1.05 (least-conn): NOT met"]
        );
        // Seven rounds are the fewest for a bound this near 1.
        let short = Plan::new("long-lived", 5, contenders(), "/ck".as_ref(), None);
        assert!(table(&Measured::new(short, Vec::new())).is_err());
    }
}
