//! The `sticky` scenario: session affinity, per policy. One instance per policy (sticky, hash,
//! round-robin), 4 workers each, side by side. [`CLIENTS`] clients, each a source address of
//! its own (127.1.x.y, bound before connecting), open one new connection each, then one
//! worker is drained (it leaves the active set, as a crash or a scale-down would take it out),
//! and each client connects again: the share of clients whose worker changed, and the share of
//! those that had been on the drained worker. Then [`KEEPERS`] clients open [`LONG`] new
//! connections each with the fleet unchanged: the share that kept one worker throughout. Last,
//! the time the supervisor takes to compute the Maglev table (in this process, the same code).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use anyhow::{Context as _, Result, anyhow};
use ck::bpf::maglev::Maglev;
use ck_tests::http::get_new_conn_from;

use super::Bench;
use super::instance::{Instance, Variant};
use super::table::{Cell, Goal, Table, median};

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
/// Worker counts at which the table's computation is timed.
const BUILD_AT: [u32; 3] = [2, 16, 64];
/// Builds timed per worker count (the median is shown).
const BUILDS: usize = 21;

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

/// The median time to compute the table at `workers` workers.
fn build_ms(workers: u32) -> f64 {
    let slots: Vec<u32> = (0..workers).collect();
    let times: Vec<f64> = (0..BUILDS)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(Maglev::build(&slots));
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(&times)
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut instances = Vec::new();
    for policy in POLICIES {
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
    for inst in instances {
        bench.report_log(&inst);
        inst.stop()?;
    }

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
        .map(|w| format!("{w} workers {:.2} ms", build_ms(*w)))
        .collect();
    t.note(format!(
        "sticky's Maglev table ({} entries), computed by the supervisor when the ready set \
         changes, median of {BUILDS}: {}",
        ck::bpf::maglev::TABLE_SIZE,
        builds.join(", ")
    ));
    t.note(
        "a client is its source address: sticky looks it up in the table; hash and round-robin \
         place each new connection on its own (its source port differs), so a client's \
         connections spread whatever the fleet does",
    );
    Ok(t)
}
