//! The `canary-withdraw` scenario: a bad release deployed as a canary of half of [`WORKERS`]
//! demo workers by connection (`ck reload --canary 50`), once per round, under a paced
//! new-connection load that never retries, in three ways it fails: its worker exits 2 s after
//! it starts (`exits`); it answers every request with a reset (`resets`, with
//! `--canary-max-resets 5`); it stops accepting for 3 s from 3.5 s after it starts (`stalls`,
//! with `--canary-max-queue-age 300ms`). Reported:
//! the rounds it was withdrawn in, the requests that failed beside the connections the canary
//! was sent before its withdrawal (which bound them), and the polls that found a worker of the
//! current release out of the active set.

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadSpec, Mode};

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{App, Contender, FailureNotes, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 2;
/// Rounds.
const ROUNDS: usize = 5;
/// Connections of the load.
const CONNECTIONS: usize = 8;
/// Requests per second of the load.
const RATE: f64 = 400.0;
/// Load before the reload starts, and after it answers.
const LEAD: Duration = Duration::from_millis(500);
/// Upper bound of the load (stopped long before).
const CAP: Duration = Duration::from_secs(120);
/// How long the canary's workers may take to leave after the withdrawal (a stalled one wakes
/// after its stall, then finishes what it was given).
const LEAVE_WITHIN: Duration = Duration::from_secs(30);
/// Failed requests noted under the table, per contender.
const NOTED: usize = 3;
/// The contenders: their label, what the new release does (the demo worker's options, or
/// `crash`), and the limit given to `ck reload`.
const BAD: [(&str, &str, &[&str]); 3] = [
    ("exits", "crash", &[]),
    ("resets", "--reset-requests", &["--canary-max-resets", "5"]),
    (
        "stalls",
        "--stall-ms 3000 --stall-every 3500ms",
        &["--canary-max-queue-age", "300ms"],
    ),
];

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    // A queue-age limit needs its program loaded for the watch: given to `ck run` as well.
    BAD.iter()
        .map(|(label, _, limit)| match limit.first() {
            Some(&"--canary-max-queue-age") => Contender::ck(label, limit),
            _ => Contender::ck(label, &[]),
        })
        .collect()
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let marker = bench.log_dir.join("canary-release");
    std::fs::write(&marker, b"").with_context(|| format!("writing {}", marker.display()))?;
    // The release the next workers run: a plain demo worker while the marker is empty.
    let script = bench.log_dir.join("canary-app.sh");
    let body = format!(
        "#!/bin/sh\nF=$(cat '{marker}')\nif [ \"$F\" = crash ]; then (sleep 2; kill -9 $$) & \
         F=; fi\nexec '{ck}' demo-worker $F\n",
        marker = marker.display(),
        ck = ck_tests::ck::ck_bin().display()
    );
    std::fs::write(&script, body).with_context(|| format!("writing {}", script.display()))?;
    let group = Group {
        workers: WORKERS,
        udp: false,
        app: App::Program {
            argv: vec!["sh".into(), script.to_string_lossy().into_owned()],
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    };
    let plan = bench.plan("canary-withdraw", ROUNDS, contenders());
    let mut fleets = contender::start_all(bench, plan.contenders(), "canary-withdraw", &group)?;
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| {
        let bad = BAD
            .iter()
            .find(|b| b.0 == c.label)
            .context("a contender's release")?;
        round(&mut fleets[i], bad, &marker, &mut notes)
    })?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured, &notes)?;
    Ok(measured.outcome(vec![table]))
}

/// One contender's round: the bad release as a canary under the load, until it is withdrawn
/// and its workers left.
fn round(
    fleet: &mut Fleet,
    (label, release, limit): &(&str, &str, &[&str]),
    marker: &std::path::Path,
    notes: &mut FailureNotes,
) -> Result<Figures> {
    let addr = fleet.addr();
    let ck = fleet
        .instance_mut()
        .context("canary-withdraw's contenders are ck instances")?;
    let before = ck.wait_ready(WORKERS as usize, Duration::from_secs(30))?;
    let current = before.worker_pids();
    let current_slots: BTreeSet<u32> = before.slots.iter().map(|s| s.slot).collect();
    let mut spec = LoadSpec::for_duration(addr, Mode::NewConnection, CONNECTIONS, CAP);
    spec.rate = Some(RATE);
    spec.retry = false;
    let load = load::start(spec);
    thread::sleep(LEAD);
    std::fs::write(marker, release.as_bytes())?;
    let args: Vec<String> = ["reload", "--name", ck.name(), "--canary", "50"]
        .iter()
        .chain(&["--canary-for", "30s", "--canary-by", "connection"])
        .chain(limit.iter())
        .map(|a| a.to_string())
        .collect();
    let started = Instant::now();
    let reload = thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ck_tests::ck::ck_output(&args)
    });
    let (mut sent, mut out_of_set) = (0u64, 0u64);
    while !reload.is_finished() {
        let s = ck.status()?;
        out_of_set += current_slots
            .iter()
            .filter(|x| !s.active.contains(x))
            .count() as u64;
        let canary = s.slots.iter().filter(|x| x.canary);
        sent = sent.max(canary.map(|x| x.selected).sum());
        thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let out = reload
        .join()
        .map_err(|_| anyhow::anyhow!("the reload thread"))?;
    std::fs::write(marker, b"")?;
    thread::sleep(LEAD);
    load.stop();
    let report = load.join();
    notes.keep(label, &report);
    let err = String::from_utf8_lossy(&out.stderr);
    let withdrawn = !out.status.success() && err.contains("canary withdrawn");
    // ck names the connections sent to a canary a limit withdrew: the polls may miss the last.
    let sent = sent.max(ck_tests::canary::sent_before_withdrawal(&err).unwrap_or(0));
    ck.wait_status("the canary's workers gone", LEAVE_WITHIN, |s| {
        s.worker_pids() == current
    })?;
    let mut f = Figures::new();
    f.failures("failed", &report)
        .set("sent", sent as f64)
        .set("over", f64::from(u8::from(report.failed() > sent)))
        .set("withdrawn", f64::from(u8::from(withdrawn)))
        .set("out_of_set", out_of_set as f64)
        .set("took_ms", took.as_secs_f64() * 1000.0);
    Ok(f)
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let columns: Vec<&str> = BAD.iter().map(|b| b.0).collect();
    let mut t = Layout::with_columns(
        m,
        &format!(
            "canary-withdraw: {WORKERS} demo workers; a bad release as a 50 % canary per round, \
             new connections without retries ({CONNECTIONS} at {RATE:.0} req/s)"
        ),
        &columns,
    );
    t.total("withdrawn, rounds", "withdrawn", Unit::Count)
        .goal(Goal::at_least(ROUNDS as f64, Unit::Count))
        .failures("failed requests, all rounds", "failed")
        .total(
            "connections sent to the canary, all rounds",
            "sent",
            Unit::Count,
        )
        .total("rounds failing more than it was sent", "over", Unit::Count)
        .goal(Goal::at_most(0.0, Unit::Count))
        .total(
            "polls with the current release out",
            "out_of_set",
            Unit::Count,
        )
        .goal(Goal::at_most(0.0, Unit::Count))
        .values("reload's answer", "took_ms", Unit::Ms)
        .detail();
    notes.note(&mut t);
    t.finish()
}
