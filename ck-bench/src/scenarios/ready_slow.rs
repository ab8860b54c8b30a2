//! The `ready-slow` scenario: [`WORKERS`] workers of a server that boots in [`BOOT`] s and
//! says nothing (`ck_tests::slow_boot`: Python, waits in `poll`), under ck and the `--no-bpf`
//! baseline (whose kernel sends connections to the booting replacements' sockets), side by
//! side. In every round each contender in turn has a steady window of [`STEADY`] under a paced
//! new-connection load, then a fresh load from [`LEAD`] before one `ck reload` (both
//! replacements boot at once, `--reload-batch 2`) until [`TAIL`] after it exits. Reported: the
//! p99 during the roll over the steady p99, round by round (at most 2 wanted of ck), the failed
//! requests over all rounds (none wanted of ck), the reload's length, and how each worker was
//! taken as ready (the log's reason).

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};
use ck_tests::slow_boot::POLL_SERVER;

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{App, Contender, FailureNotes, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Cell, Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 2;
/// The server's boot, in seconds (its first argument).
const BOOT: &str = "10";
/// Rounds: the goals bound a ratio far from 1 (at most 2) and failures (none), and a round
/// takes about half a minute (each contender's replacements boot for [`BOOT`] s): 5.
const ROUNDS: usize = 5;
/// Connections of the load.
const CONNECTIONS: usize = 12;
/// Requests per second of the load (a Python server per worker, on a small machine).
const RATE: f64 = 300.0;
/// The steady window.
const STEADY: Duration = Duration::from_secs(3);
/// Load before `ck reload` starts.
const LEAD: Duration = Duration::from_millis(500);
/// Load after `ck reload` exits (the old workers drain meanwhile).
const TAIL: Duration = Duration::from_secs(1);
/// Upper bound of the roll window's load (stopped long before).
const CAP: Duration = Duration::from_secs(120);
/// How long a fleet gets to be ready: at the start, and again before each round.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// The most p99 during the roll, as a multiple of the steady p99.
const P99_RATIO_AT_MOST: f64 = 2.0;
/// Failed requests noted under the table, per contender.
const NOTED: usize = 3;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    let flags = ["--ready-timeout", "90s", "--reload-batch", "2"];
    vec![
        Contender::ck("ck", &flags),
        Contender::no_bpf(NO_BPF, &flags),
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
    let plan = bench.plan("ready-slow", ROUNDS, contenders());
    bench.progress(format_args!("ready-slow: first boot ({BOOT} s)"));
    let mut fleets =
        contender::start_all_within(bench, plan.contenders(), "ready-slow", &group, READY_WITHIN)?;
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| {
        round(bench, &mut fleets[i], &c.label, &mut notes)
    })?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured, &notes)?;
    Ok(measured.outcome(vec![table]))
}

/// A paced new-connection load on `fleet` for up to `limit`.
fn load_on(fleet: &Fleet, limit: Duration) -> load::LoadHandle {
    let mut spec = LoadSpec::for_duration(fleet.addr(), Mode::NewConnection, CONNECTIONS, limit);
    spec.rate = Some(RATE);
    load::start(spec)
}

/// One contender's round: once every worker is ready, the steady window, then one `ck reload`
/// under a fresh load.
fn round(
    bench: &Bench,
    fleet: &mut Fleet,
    label: &str,
    notes: &mut FailureNotes,
) -> Result<Figures> {
    let ck = fleet
        .instance_mut()
        .context("ready-slow's contenders are ck instances")?;
    ck.wait_ready(WORKERS as usize, READY_WITHIN)?;
    let readies_before = ck.log_lines("worker ready").len();
    let steady = load_on(fleet, bench.span(STEADY)).join();
    let roll = load_on(fleet, CAP);
    thread::sleep(LEAD);
    let ck = fleet
        .instance()
        .context("ready-slow's contenders are ck instances")?;
    let started = Instant::now();
    let reloaded = ck
        .ctl_ok(&["reload"])
        .map_err(|e| eprintln!("bench: {label}: reload failed: {e:#}"))
        .is_ok();
    let took = started.elapsed();
    thread::sleep(TAIL);
    roll.stop();
    let roll = roll.join();
    notes.keep(label, &roll);
    let reasons: Vec<String> = ck
        .log_lines("worker ready")
        .into_iter()
        .skip(readies_before)
        .map(|l| l.split_once("reason=").map_or("", |(_, r)| r).to_string())
        .collect();
    Ok(figures(&steady, &roll, took, reloaded, &reasons))
}

/// A round's figures.
fn figures(
    steady: &LoadReport,
    roll: &LoadReport,
    took: Duration,
    reloaded: bool,
    reasons: &[String],
) -> Figures {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let by_poll = reasons.iter().filter(|r| r.contains("poll()")).count();
    let mut f = Figures::new();
    f.set("steady_p99", ms(steady.p99()))
        .set("roll_p99", ms(roll.p99()))
        .set("p99_ratio", ms(roll.p99()) / ms(steady.p99()).max(1e-3))
        .set("roll_max", ms(roll.quantile(1.0)))
        .failures("steady_failed", steady)
        .failures("roll_failed", roll)
        .set("reload_ms", ms(took))
        .set("reload_failed", f64::from(u8::from(!reloaded)))
        .set("ready_by_poll", by_poll as f64)
        .set("ready", reasons.len() as f64);
    f
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "ready-slow: {WORKERS} workers of a server that boots in {BOOT} s and waits in poll() \
             without a word, one `ck reload` per round under new connections ({CONNECTIONS} \
             connections at {RATE:.0} req/s)"
        ),
    );
    let none = || Goal::at_most(0.0, Unit::Count).of(&["ck"]);
    t.values(
        &format!("new-conn p99, steady {STEADY:?}"),
        "steady_p99",
        Unit::Ms,
    )
    .values("new-conn p99, during the roll", "roll_p99", Unit::Ms)
    .values("p99 during the roll / steady p99", "p99_ratio", Unit::Ratio)
    .goal(Goal::at_most(P99_RATIO_AT_MOST, Unit::Ratio).of(&["ck"]))
    .values("new-conn max, during the roll", "roll_max", Unit::Ms)
    .detail()
    .failures("failed, steady, all rounds", "steady_failed")
    .detail()
    .failures("failed, during the roll, all rounds", "roll_failed")
    .goal(none())
    .values("`ck reload` duration", "reload_ms", Unit::Ms)
    .total(
        "`ck reload`s that failed, all rounds",
        "reload_failed",
        Unit::Count,
    );
    let cells = t
        .columns()
        .iter()
        .map(
            |c| match (m.total(c, "ready_by_poll"), m.total(c, "ready")) {
                (Some(poll), Some(all)) => Cell::text(&format!("{poll:.0} / {all:.0}")),
                _ => Cell::text("-"),
            },
        )
        .collect();
    t.row(
        "workers ready by their poll() wait / all ready, all rounds",
        cells,
    )
    .note(format!(
        "during the roll = from {LEAD:?} before `ck reload` until {TAIL:?} after it exits; \
         with --no-bpf the kernel sends connections to the booting replacements' sockets, \
         which wait for their boot (or time out at {:?}), and the old workers keep getting \
         connections until --drain-timeout kills them",
        load::DEFAULT_TIMEOUT
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
    fn ck_is_held_to_twice_its_steady_p99_and_no_failure() {
        let plan = Plan::new("ready-slow", ROUNDS, contenders(), "/ck".as_ref(), None);
        // ck's roll doubles its p99 but for one round; --no-bpf's is 40 times its steady one
        // and fails requests.
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let (ratio, failed) = match c.label.as_str() {
                        "ck" if r == 0 => (5.0, 0.0),
                        "ck" => (1.5, 0.0),
                        _ => (40.0, 12.0),
                    };
                    let f = BTreeMap::from([
                        ("p99_ratio".to_string(), ratio),
                        ("steady_failed".to_string(), 0.0),
                        ("roll_failed".to_string(), failed),
                        ("roll_failed_timeout".to_string(), failed),
                        ("ready_by_poll".to_string(), 2.0),
                        ("ready".to_string(), 2.0),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 30.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let t = table(&m, &FailureNotes::new(NOTED)).unwrap();
        let row = |metric: &str| {
            t.rows
                .iter()
                .find(|r| r.metric.starts_with(metric))
                .unwrap()
        };
        let ratio = row("p99 during the roll / steady p99");
        assert_eq!(ratio.cells[0].text, "1.50 (1.50-5.00)");
        assert_eq!(ratio.goal.as_ref().unwrap().text(), "<= 2.00 (ck): met");
        let failed = row("failed, during the roll");
        assert_eq!(failed.cells[1].text, "60 (0/0/60/0)");
        assert_eq!(failed.goal.as_ref().unwrap().text(), "<= 0 (ck): met");
        assert_eq!(
            row("workers ready by their poll()").cells[0].text,
            "10 / 10"
        );
    }
}
