//! The `sticky` scenario: session affinity, per policy. One fleet per policy (sticky, hash,
//! round-robin), [`WORKERS`] demo workers each, side by side; in each of [`ROUNDS`] rounds (the
//! order rotating), each in turn: [`CLIENTS`] clients, each a source address of its own
//! (127.1.x.y, bound before connecting), open one new connection each, then one worker is
//! drained (it leaves the active set, as a crash or a scale-down would take it out), and each
//! client connects again: the share of clients whose worker changed, and the share of those
//! that had been on the drained worker; the worker is taken back. Then [`KEEPERS`] clients
//! open [`LONG`] new connections each with the fleet unchanged: the share that kept one worker
//! throughout. Reported: the median of the rounds, with the lowest and highest. Last, the time
//! the supervisor takes to compute the Maglev table, from the debug lines of a sticky fleet of
//! [`MANY`] workers (its start-up computes a table at every size up to 64 as workers become
//! ready; then one is drained).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{Context as _, Result, anyhow};
use ck_tests::ck::StartOptions;
use ck_tests::http::get_new_conn_from;
use ck_tests::sys::free_port;
use serde_json::Value;

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit, median};
use crate::{Bench, Outcome};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Rounds: no goal bounds a ratio, and a round takes some 15 s: the safe default.
const ROUNDS: usize = 7;
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
/// Workers of the fleet whose table computations are timed.
const MANY: u32 = 64;
/// Table sizes (ready workers) whose computation time is shown, when the log has them.
const BUILD_AT: [usize; 4] = [2, 16, 63, 64];
/// ck's log filter and format for the timed fleet: the table's debug line, as JSON.
const DEBUG_LOG: [(&str, &str); 1] = [("CK_LOG", "info,ck::bpf::sticky=debug")];
/// The most clients that change worker when one of four leaves, % (sticky).
const MOVED_GOAL: f64 = 30.0;
/// The least clients that keep their worker, % (sticky).
const KEPT_GOAL: f64 = 100.0;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    POLICIES
        .iter()
        .map(|p| Contender::ck(p, &["--policy", *p]))
        .collect()
}

/// Runs the scenario: the rounds, then the table computations timed.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("sticky", ROUNDS, contenders());
    let fleets = contender::start_all(bench, plan.contenders(), "sticky", &Group::demo(WORKERS))?;
    let measured = plan.run(bench, |i, c, _| {
        measure(bench, &c.label, &fleets[i]).with_context(|| format!("policy {}", c.label))
    })?;
    contender::stop_all(bench, fleets)?;
    let times = table_times(bench)?;
    let table = table(&measured, &times)?;
    Ok(measured.outcome(vec![table]))
}

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

/// One round of one fleet: the clients moved by a drain, then the ones that keep their worker.
fn measure(bench: &Bench, policy: &str, fleet: &Fleet) -> Result<Figures> {
    let addr = fleet.addr();
    let inst = fleet
        .instance()
        .context("sticky's contenders are ck instances")?;
    let before: BTreeMap<u32, u32> = (0..CLIENTS)
        .map(|i| Ok((i, slot_of(addr, client(i))?)))
        .collect::<Result<_>>()?;
    inst.ctl_ok(&["drain", &DRAINED.to_string()])?;
    let mut moved = 0u32;
    let mut from_drained = 0u32;
    for (i, was) in &before {
        if slot_of(addr, client(*i))? != *was {
            moved += 1;
            from_drained += u32::from(*was == DRAINED);
        }
    }
    inst.ctl_ok(&["undrain", &DRAINED.to_string()])?;
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
    let mut f = Figures::new();
    f.set("moved", pct(moved, CLIENTS))
        .set("moved_from_drained", pct(from_drained, moved))
        .set("kept", pct(kept, KEEPERS));
    Ok(f)
}

/// Table computation times in the log `log` (JSON lines `sticky table computed`), in ms, by
/// the number of slots in the set.
fn build_times(log: &str) -> BTreeMap<usize, Vec<f64>> {
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
    times
}

/// A sticky fleet of [`MANY`] workers that logs its table computations: started, one worker
/// drained, stopped; the computations' times from its log.
fn table_times(bench: &Bench) -> Result<BTreeMap<usize, Vec<f64>>> {
    bench.progress(format_args!("sticky: {MANY} workers, timing the table"));
    let port = free_port();
    let mut many = StartOptions::new()
        .bin(&bench.bin)
        .port(port)
        .args(&[
            "-w",
            &MANY.to_string(),
            "--policy",
            "sticky",
            "--log-format",
            "json",
        ])
        .env(&DEBUG_LOG)
        .log_dir(&bench.log_dir)
        .start(&format!("bench-sticky-many-{port}"))?;
    many.wait_ready(MANY as usize, std::time::Duration::from_secs(30))?;
    many.ctl_ok(&["drain", "0"])?;
    let times = build_times(&many.log());
    many.stop()?;
    Ok(times)
}

/// The table of the rounds, with the table computations' times in a note.
fn table(m: &Measured, times: &BTreeMap<usize, Vec<f64>>) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "sticky: {WORKERS} demo workers, {CLIENTS} clients (one source address each) \
             connect, slot {DRAINED} is drained, they connect again; then {KEEPERS} clients open \
             {LONG} new connections each; per round"
        ),
    );
    t.values(
        "clients that change worker when 1 of 4 workers leaves",
        "moved",
        Unit::Percent(1),
    )
    .goal(Goal::at_most(MOVED_GOAL, Unit::Percent(0)).of(&["sticky"]))
    .values(
        "of those, clients of the worker that left",
        "moved_from_drained",
        Unit::Percent(1),
    )
    .values(
        &format!("clients that keep their worker over {LONG} new connections"),
        "kept",
        Unit::Percent(1),
    )
    .goal(Goal::at_least(KEPT_GOAL, Unit::Percent(0)).of(&["sticky"]));
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
         the ready set changes, from the debug log of a fleet of {MANY}: {}",
        ck::bpf::maglev::TABLE_SIZE,
        if builds.is_empty() {
            "no computation logged".to_string()
        } else {
            builds.join(", ")
        }
    ))
    .note(
        "a client is its source address: sticky looks it up in the table; hash and round-robin \
         place each new connection on its own (its source port differs), so a client's \
         connections spread whatever the fleet does",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_goals_are_sticky_s_and_the_table_times_are_read_from_the_log() {
        let plan = Plan::new("sticky", ROUNDS, contenders(), "/ck".as_ref(), None);
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let sticky = c.label == "sticky";
                    let f = BTreeMap::from([
                        ("moved".to_string(), if sticky { 25.4 } else { 75.0 }),
                        ("moved_from_drained".to_string(), 98.0),
                        ("kept".to_string(), if sticky { 100.0 } else { 0.0 }),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 15.0,
        };
        let log = [
            r#"{"message":"sticky table computed","slots":"[0, 1]","ms":0.02}"#,
            r#"{"message":"sticky table computed","slots":"[0, 1]","ms":0.04}"#,
            r#"{"message":"other","slots":"[0]","ms":9.0}"#,
            "not json",
        ]
        .join("\n");
        let times = build_times(&log);
        assert_eq!(times, BTreeMap::from([(2, vec![0.02, 0.04])]));
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let t = table(&m, &times).unwrap();
        let verdicts: Vec<String> = t
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|v| v.text()))
            .collect();
        assert_eq!(
            verdicts,
            ["<= 30 % (sticky): met", ">= 100 % (sticky): met"]
        );
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("2 workers 0.030 ms (median of 2)"))
        );
    }
}
