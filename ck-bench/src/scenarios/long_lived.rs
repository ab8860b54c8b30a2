//! The `long-lived` scenario: how evenly connections that stay open spread over a fleet that
//! grows and churns, per policy. One instance at a time (least-conn, round-robin, hash, then plain
//! `SO_REUSEPORT` with `--no-bpf`), each: [`WORKERS`] workers, [`FIRST`] keep-alive connections
//! opened and held, `ck scale` to [`SCALED`], [`SECOND`] more, then churn: every
//! [`CHURN_EVERY`]th held connection closes and as many new ones open. After each step the open
//! connections per worker are read from `ck status --json` (the kernel's counts; with
//! `--no-bpf`, sock_diag's) and reduced to max/mean: 1.0 is a perfectly even fleet.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use ck_tests::Status;
use ck_tests::http::KeepAlive;

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

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

/// max/mean open connections per serving worker, after each step.
struct Outcome {
    /// After the first connections on [`WORKERS`] workers.
    first: f64,
    /// After the scale-up and the second connections.
    scaled: f64,
    /// After the churn.
    churned: f64,
    /// The counts per worker after the churn, for the notes.
    counts: Vec<u64>,
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
fn counts(inst: &mut Instance, workers: u32, total: usize) -> Result<Vec<u64>> {
    let per_worker = |s: &Status| -> Vec<u64> {
        s.ready()
            .map(|slot| slot.connections.unwrap_or(0))
            .collect()
    };
    let status = inst
        .wait_status(SETTLE, Duration::from_millis(50), |s| {
            let counts = per_worker(s);
            counts.len() == workers as usize && counts.iter().sum::<u64>() == total as u64
        })
        .with_context(|| format!("{workers} workers holding {total} connections"))?;
    Ok(per_worker(&status))
}

/// max/mean of `counts`.
fn max_over_mean(counts: &[u64]) -> f64 {
    let max = counts.iter().copied().max().unwrap_or(0) as f64;
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    if mean == 0.0 { 0.0 } else { max / mean }
}

/// Runs the steps on one instance (started, not yet ready).
fn measure(bench: &Bench, label: &str, inst: &mut Instance) -> Result<Outcome> {
    inst.wait_ready(WORKERS as usize)?;
    let addr = inst.addr();
    let mut held = open(addr, FIRST)?;
    let first = counts(inst, WORKERS, held.len())?;
    inst.ctl(&["scale", &SCALED.to_string()])?;
    inst.wait_ready(SCALED as usize)?;
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
    Ok(Outcome {
        first: max_over_mean(&first),
        scaled: max_over_mean(&scaled),
        churned: max_over_mean(&churned),
        counts: churned,
    })
}

/// A max/mean ratio.
fn ratio(v: f64) -> Cell {
    Cell {
        text: format!("{v:.3}"),
        num: Some(v),
    }
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut columns: Vec<(String, Variant, Vec<&str>)> = POLICIES
        .iter()
        .map(|p| (p.to_string(), Variant::Ck, vec!["--policy", p]))
        .collect();
    columns.push(("plain".to_string(), Variant::Baseline, Vec::new()));
    let mut outcomes = Vec::new();
    for (label, variant, flags) in &columns {
        let mut inst = Instance::start(
            &bench.bin,
            &bench.log_dir,
            &format!("long-{label}"),
            *variant,
            WORKERS,
            flags,
        )?;
        let outcome = measure(bench, label, &mut inst).with_context(|| label.clone());
        bench.report_log(&inst);
        inst.stop()?;
        outcomes.push(outcome?);
    }
    let names: Vec<&str> = columns.iter().map(|(l, _, _)| l.as_str()).collect();
    let mut t = Table::with_columns(
        &format!(
            "long-lived: {WORKERS} workers, {FIRST} keep-alive connections held, scale to \
             {SCALED}, {SECOND} more, then 1 in {CHURN_EVERY} closes and reopens: max/mean open \
             connections per worker"
        ),
        &names,
    );
    t.ratio_against(columns.len() - 1);
    let row = |t: &mut Table, metric: &str, value: fn(&Outcome) -> f64, goal: Goal| {
        t.row_of(
            metric,
            outcomes.iter().map(|o| ratio(value(o))).collect(),
            goal,
        );
    };
    row(
        &mut t,
        &format!("{WORKERS} workers, {FIRST} connections"),
        |o| o.first,
        Goal::None,
    );
    row(
        &mut t,
        &format!("scaled to {SCALED}, {} connections", FIRST + SECOND),
        |o| o.scaled,
        Goal::AtMost(1.05, "at most 1.05"),
    );
    row(
        &mut t,
        "after the churn",
        |o| o.churned,
        Goal::AtMost(1.05, "at most 1.05"),
    );
    for (name, o) in names.iter().zip(&outcomes) {
        t.note(format!(
            "{name}: open per worker after the churn {:?}",
            o.counts
        ));
    }
    t.note(
        "open connections from ck status --json (the kernel's counts; plain --no-bpf: \
         sock_diag); a client on one machine, the demo worker, keep-alive connections each \
         answered once",
    );
    Ok(t)
}
