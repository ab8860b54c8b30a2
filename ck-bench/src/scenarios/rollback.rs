//! The `rollback` scenario: taking a bad release back, two ways, side by side. [`WORKERS`]
//! workers of a server that boots in [`BOOT`] s and says nothing (`ck_tests::slow_boot`). In
//! every round each contender first deploys a release (`ck reload`, unmeasured), then takes it
//! back under a paced new-connection load that never retries: `ck rollback` (ck with
//! `--keep-previous`: the replaced workers were kept alive) against `ck reload` of the old code
//! (ck without it: the old release boots again). Reported: from the request (the client's
//! clock just before it runs the command, so a little early) to the last new connection a
//! worker of the bad release answered, the command's own length, and the failed requests.

use std::collections::BTreeSet;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use ck_tests::load::{self, LoadSpec, Mode};
use ck_tests::slow_boot::POLL_SERVER;

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{App, Contender, FailureNotes, Figures, Goal, Group, Layout, Measured};
use crate::table::{Cell, Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 2;
/// The server's boot, in seconds (its first argument).
const BOOT: &str = "4";
/// Rounds: the median of 10 rollbacks.
const ROUNDS: usize = 10;
/// Connections of the load.
const CONNECTIONS: usize = 8;
/// Requests per second of the load (a Python server per worker, on a small machine).
const RATE: f64 = 400.0;
/// Load before the take-back starts.
const LEAD: Duration = Duration::from_millis(500);
/// Load after the take-back's command exits (the bad release leaves meanwhile).
const TAIL: Duration = Duration::from_millis(500);
/// Upper bound of the load (stopped long before).
const CAP: Duration = Duration::from_secs(120);
/// How long a fleet gets to be ready: at the start, and after each deploy.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// The most time to the bad release's last answer, median of the rounds, in ms.
const MEDIAN_AT_MOST: f64 = 10.0;
/// ... and in the worst round.
const MAX_AT_MOST: f64 = 50.0;
/// Failed requests noted under the table, per contender.
const NOTED: usize = 3;
/// The contender that rolls back with `ck rollback`.
const ROLLBACK: &str = "ck rollback";
/// The contender that rolls back by deploying the old code again.
const RELOAD: &str = "ck reload (old code)";

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    let flags = ["--ready-timeout", "90s", "--reload-batch", "2"];
    let mut keep = flags.to_vec();
    keep.extend(["--keep-previous", "10m"]);
    vec![
        Contender::ck(ROLLBACK, &keep),
        Contender::ck(RELOAD, &flags),
    ]
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let server = bench.log_dir.join("poll_server.py");
    std::fs::write(&server, POLL_SERVER)
        .with_context(|| format!("writing {}", server.display()))?;
    let group = Group {
        workers: WORKERS,
        udp: false,
        app: App::Program {
            argv: vec![
                "python3".into(),
                server.to_string_lossy().into_owned(),
                BOOT.into(),
            ],
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    };
    let plan = bench.plan("rollback", ROUNDS, contenders());
    bench.progress(format_args!("rollback: first boot ({BOOT} s)"));
    let mut fleets =
        contender::start_all_within(bench, plan.contenders(), "rollback", &group, READY_WITHIN)?;
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| round(&mut fleets[i], &c.label, &mut notes))?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured, &notes)?;
    Ok(measured.outcome(vec![table]))
}

/// One contender's round: the deploy of a bad release, then its take-back under the load.
fn round(fleet: &mut Fleet, label: &str, notes: &mut FailureNotes) -> Result<Figures> {
    let ck = fleet
        .instance_mut()
        .context("rollback's contenders are ck instances")?;
    ck.wait_ready(WORKERS as usize, READY_WITHIN)?;
    let good = ck.status()?.worker_pids();
    ck.ctl_ok(&["reload"]).context("the deploy's `ck reload`")?;
    let deployed = ck.wait_status("the bad release ready", READY_WITHIN, |s| {
        s.ready()
            .filter_map(|slot| slot.pid)
            .all(|p| !good.contains(&p))
            && s.ready_count() == WORKERS as usize
    })?;
    let bad: BTreeSet<u32> = deployed.ready().filter_map(|s| s.pid).collect();
    let mut spec = LoadSpec::for_duration(fleet.addr(), Mode::NewConnection, CONNECTIONS, CAP);
    spec.rate = Some(RATE);
    spec.retry = false;
    let load_start = Instant::now();
    let load = load::start(spec);
    thread::sleep(LEAD);
    let ck = fleet
        .instance()
        .context("rollback's contenders are ck instances")?;
    let command = match label {
        ROLLBACK => "rollback",
        _ => "reload",
    };
    let asked = load_start.elapsed();
    let started = Instant::now();
    let answered = ck.ctl_ok(&[command]);
    let took = started.elapsed();
    thread::sleep(TAIL);
    load.stop();
    let report = load.join();
    notes.keep(label, &report);
    if let Err(e) = answered {
        bail!("{label}: `ck {command}` failed: {e:#}");
    }
    // The load's clock started a moment after `load_start` (well under a millisecond), so the
    // request's offset is, if anything, early: the time below is not flattered.
    let last_bad = report
        .answers
        .iter()
        .filter(|(_, pid)| bad.contains(pid))
        .map(|(at, _)| *at)
        .max();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut f = Figures::new();
    f.failures("failed", &report)
        .set("command_ms", ms(took))
        .set("p99", ms(report.p99()))
        .set("ok", report.ok as f64);
    if let Some(at) = last_bad {
        f.set("last_bad_ms", ms(at.saturating_sub(asked)));
    }
    Ok(f)
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::with_columns(
        m,
        &format!(
            "rollback: {WORKERS} workers booting in {BOOT} s; a bad release taken back per \
             round under new connections, no retries ({CONNECTIONS} at {RATE:.0} req/s); \
             `ck rollback` with --keep-previous"
        ),
        &[ROLLBACK, RELOAD],
    );
    t.values(
        "request -> the bad release's last answer",
        "last_bad_ms",
        Unit::Ms,
    )
    .goal(Goal::at_most(MEDIAN_AT_MOST, Unit::Ms).of(&[ROLLBACK]));
    let worst = t
        .columns()
        .iter()
        .map(|c| {
            let all = m.values(c, "last_bad_ms");
            match all.iter().flatten().copied().reduce(f64::max) {
                Some(v) => Unit::Ms.cell(v),
                None => Cell::text("-"),
            }
        })
        .collect();
    t.row("the same, worst round", worst)
        .goal(Goal::at_most(MAX_AT_MOST, Unit::Ms).of(&[ROLLBACK]))
        .failures("failed requests, all rounds", "failed")
        .goal(Goal::at_most(0.0, Unit::Count).of(&[ROLLBACK]))
        .values("the command's own length", "command_ms", Unit::Ms)
        .values("new-conn p99 over the window", "p99", Unit::Ms)
        .detail()
        .total("answered requests, all rounds", "ok", Unit::Count)
        .detail()
        .note(format!(
            "each round first deploys a release with `ck reload` (not measured); the window runs \
             from {LEAD:?} before the take-back's command until {TAIL:?} after it exits"
        ));
    notes.note(&mut t);
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_worst_round_is_judged_beside_the_median() {
        let plan = Plan::new("rollback", ROUNDS, contenders(), "/ck".as_ref(), None);
        let rounds = (0..ROUNDS)
            .map(|r| RoundFigures {
                order: vec![],
                figures: plan
                    .contenders()
                    .iter()
                    .map(|c| {
                        let last = match (c.label.as_str(), r) {
                            (ROLLBACK, 3) => 60.0,
                            (ROLLBACK, _) => 3.0,
                            _ => 4500.0,
                        };
                        let mut f = BTreeMap::new();
                        for (k, v) in [
                            ("last_bad_ms", last),
                            ("command_ms", 2.0),
                            ("p99", 5.0),
                            ("ok", 100.0),
                            ("failed", 0.0),
                        ] {
                            f.insert(k.to_string(), v);
                        }
                        (c.label.clone(), f)
                    })
                    .collect(),
                seconds: 10.0,
            })
            .collect();
        let table =
            table(&Measured::new(plan, rounds), &FailureNotes::new(NOTED)).expect("the table");
        let verdicts: Vec<Option<bool>> = table
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|g| g.met))
            .collect();
        // The median (3 ms) meets its goal, the worst round (60 ms) does not, no failure.
        assert_eq!(verdicts, vec![Some(true), Some(false), Some(true)]);
    }
}
