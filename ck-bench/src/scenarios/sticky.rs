//! The `sticky` scenario: session affinity, per policy. One instance per policy (sticky, hash,
//! round-robin), 4 workers each, side by side. [`CLIENTS`] clients, each a source address of
//! its own (127.1.x.y, bound before connecting), open one new connection each, then one
//! worker is drained (it leaves the active set, as a crash or a scale-down would take it out),
//! and each client connects again: the share of clients whose worker changed, and the share of
//! those that had been on the drained worker. Then [`KEEPERS`] clients open [`LONG`] new
//! connections each with the fleet unchanged: the share that kept one worker throughout. Last,
//! the time the supervisor takes to compute the Maglev table, from the debug lines of the
//! sticky instance and of one with [`MANY`] workers (its start-up computes a table at every
//! size up to 64 as workers become ready; then one is drained).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{Context as _, Result, anyhow};
use ck_tests::http::get_new_conn_from;
use serde_json::Value;

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table, median};

/// Workers of each instance.
const WORKERS: u32 = 4;
/// The slot drained (one of the 4 leaves).
const DRAINED: u32 = 3;
/// Clients of the move measurement.
const CLIENTS: u32 = 1_000;
/// Clients of the keep measurement.
const KEEPERS: u32 = 16;
/// New connections of each of them.
const LONG: u32 = 1_000;
/// The policies, in column order.
const POLICIES: [&str; 3] = ["sticky", "hash", "round-robin"];
/// Workers of the instance whose table computations are timed.
const MANY: u32 = 64;
/// Table sizes (ready workers) whose computation time is shown, when the logs have them.
const BUILD_AT: [usize; 4] = [2, 16, 63, 64];
/// ck's log filter and format for the sticky instances: the table's debug line, as JSON.
const DEBUG_LOG: [(&str, &str); 1] = [("CK_LOG", "info,ck::bpf::group=debug")];

/// Client `i`'s source address: 127.1.0.1, 127.1.0.2, ... (all on loopback).
fn client(i: u32) -> IpAddr {
    let n = i + 1;
    IpAddr::V4(Ipv4Addr::new(127, 1, (n >> 8) as u8, n as u8))
}

/// The slot that answers one new connection from `source`.
fn slot_of(addr: SocketAddr, source: IpAddr) -> Result<u32> {
    get_new_conn_from(source, addr)
        .map(|a| a.slot)
        .map_err(|e| anyhow!("a connection from {source} to {addr}: {e}"))
}

/// What one policy did.
#[derive(Default)]
struct Outcome {
    /// Clients whose worker changed when the drained one left, in %.
    moved: f64,
    /// Of those, the ones that had been on the drained worker, in %.
    moved_from_drained: f64,
    /// Clients that kept one worker over `LONG` connections, in %.
    kept: f64,
}

fn measure(bench: &Bench, policy: &str, inst: &Instance) -> Result<Outcome> {
    let addr = inst.addr();
    let before: BTreeMap<u32, u32> = (0..CLIENTS)
        .map(|i| Ok((i, slot_of(addr, client(i))?)))
        .collect::<Result<_>>()?;
    inst.ctl(&["drain", &DRAINED.to_string()])?;
    let mut moved = 0u32;
    let mut from_drained = 0u32;
    for (i, was) in &before {
        if slot_of(addr, client(*i))? != *was {
            moved += 1;
            from_drained += u32::from(*was == DRAINED);
        }
    }
    inst.ctl(&["undrain", &DRAINED.to_string()])?;
    bench.progress(format_args!(
        "sticky: {policy}: {moved} of {CLIENTS} clients moved when slot {DRAINED} left"
    ));
    let mut kept = 0u32;
    for k in 0..KEEPERS {
        // Other addresses than the movers'.
        let source = client(CLIENTS + k);
        let first = slot_of(addr, source)?;
        let mut same = true;
        for _ in 1..LONG {
            same &= slot_of(addr, source)? == first;
        }
        kept += u32::from(same);
    }
    bench.progress(format_args!(
        "sticky: {policy}: {kept} of {KEEPERS} clients kept their worker over {LONG} connections"
    ));
    let pct = |n: u32, of: u32| f64::from(n) * 100.0 / f64::from(of.max(1));
    Ok(Outcome {
        moved: pct(moved, CLIENTS),
        moved_from_drained: pct(from_drained, moved),
        kept: pct(kept, KEEPERS),
    })
}

/// A share in %.
fn percent(v: f64) -> Cell {
    Cell {
        text: format!("{v:.1} %"),
        num: Some(v),
    }
}

/// Table computation times in `inst`'s log (JSON lines `sticky table computed`), in ms, by the
/// number of slots in the set.
fn build_times(inst: &Instance) -> Result<BTreeMap<usize, Vec<f64>>> {
    let log = std::fs::read_to_string(inst.log())
        .with_context(|| format!("reading {}", inst.log().display()))?;
    let mut times = BTreeMap::<usize, Vec<f64>>::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["message"] != "sticky table computed" {
            continue;
        }
        // `slots` is the set's Debug text: `[0, 1, 2]`.
        let slots = event["slots"].as_str().unwrap_or("[]");
        let n = slots
            .split(',')
            .filter(|s| !s.trim_matches(['[', ']', ' ']).is_empty())
            .count();
        if let Some(ms) = event["ms"].as_f64() {
            times.entry(n).or_default().push(ms);
        }
    }
    Ok(times)
}

/// Starts a sticky instance of `workers` workers that logs its table computations.
fn start_sticky(bench: &Bench, what: &str, workers: u32) -> Result<Instance> {
    Instance::start_with_env(
        &bench.bin,
        &bench.log_dir,
        what,
        Variant::Ck,
        workers,
        &["--policy", "sticky", "--log-format", "json"],
        &DEBUG_LOG,
    )
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut instances = vec![start_sticky(bench, "sticky-sticky", WORKERS)?];
    for policy in &POLICIES[1..] {
        let inst = Instance::start(
            &bench.bin,
            &bench.log_dir,
            &format!("sticky-{policy}"),
            Variant::Ck,
            WORKERS,
            &["--policy", policy],
        )?;
        instances.push(inst);
    }
    for inst in &mut instances {
        inst.wait_ready(WORKERS as usize)?;
    }
    let mut outcomes = Vec::new();
    for (policy, inst) in POLICIES.iter().zip(&instances) {
        outcomes.push(measure(bench, policy, inst).with_context(|| format!("policy {policy}"))?);
    }
    let mut times = build_times(&instances[0])?;
    for inst in instances {
        bench.report_log(&inst);
        inst.stop()?;
    }
    bench.progress(format_args!("sticky: {MANY} workers, timing the table"));
    let mut many = start_sticky(bench, "sticky-many", MANY)?;
    many.wait_ready(MANY as usize)?;
    many.ctl(&["drain", "0"])?;
    for (n, mut ms) in build_times(&many)? {
        times.entry(n).or_default().append(&mut ms);
    }
    bench.report_log(&many);
    many.stop()?;

    let mut t = Table::with_columns(
        &format!(
            "sticky: {WORKERS} workers, {CLIENTS} clients (one source address each) connect, \
             slot {DRAINED} is drained, they connect again; then {KEEPERS} clients open {LONG} \
             new connections each"
        ),
        &POLICIES,
    );
    let row = |t: &mut Table, metric: &str, value: fn(&Outcome) -> f64, goal: Goal| {
        t.row_of(
            metric,
            outcomes.iter().map(|o| percent(value(o))).collect(),
            goal,
        );
    };
    row(
        &mut t,
        "clients that change worker when 1 of 4 workers leaves",
        |o| o.moved,
        Goal::AtMost(30.0, "at most 30 %"),
    );
    row(
        &mut t,
        "of those, clients of the worker that left",
        |o| o.moved_from_drained,
        Goal::None,
    );
    row(
        &mut t,
        "clients that keep their worker over 1,000 new connections",
        |o| o.kept,
        Goal::AtLeast(100.0, "100 %"),
    );
    let builds: Vec<String> = BUILD_AT
        .iter()
        .filter_map(|n| {
            let ms = times.get(n)?;
            Some(format!(
                "{n} workers {:.3} ms (median of {})",
                median(ms),
                ms.len()
            ))
        })
        .collect();
    t.note(format!(
        "sticky's Maglev table ({} entries): computed by the supervisor (release build) when \
         the ready set changes, from its debug log: {}",
        ck::bpf::maglev::TABLE_SIZE,
        if builds.is_empty() {
            "no computation logged".to_string()
        } else {
            builds.join(", ")
        }
    ));
    t.note(
        "a client is its source address: sticky looks it up in the table; hash and round-robin \
         place each new connection on its own (its source port differs), so a client's \
         connections spread whatever the fleet does",
    );
    Ok(t)
}
