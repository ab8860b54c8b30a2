//! The `slow-start` scenario: a roll of [`WORKERS`] demo workers that start cold (the demo
//! worker's `--capacity` [`CAPACITY`] `--warm-up` [`WARM_UP`]: a tenth of their capacity at
//! the start, all of it after the warm-up), under a paced new-connection load at
//! [`LOAD_SHARE`] of the warm fleet's capacity, with `--slow-start` against without, side by
//! side. In every round each contender first waits until its workers are warm, then has a
//! steady window of [`STEADY`], then one `ck reload` (one worker at a time) under a fresh
//! load until the last replacement is warm. Reported: the p99 over that window against the
//! steady p99 (at most [`P99_RATIO_AT_MOST`] wanted of slow start), the failed requests and
//! the reload's length. Beside them the same pair with workers that are warm from the start
//! (no `--warm-up`): what slow start costs an app that does not need it, the measurement its
//! default (off) is chosen by.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{App, Contender, FailureNotes, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// Each worker's capacity once warm, requests a second.
const CAPACITY: u32 = 400;
/// How long a worker takes to warm up (its capacity rising from a tenth).
const WARM_UP: Duration = Duration::from_secs(10);
/// The load, as a share of the warm fleet's capacity.
const LOAD_SHARE: f64 = 0.6;
/// Rounds: the goal bounds a ratio far from 1 (1.5), and a round takes about a minute: 5.
const ROUNDS: usize = 5;
/// Connections of the load.
const CONNECTIONS: usize = 16;
/// The steady window.
const STEADY: Duration = Duration::from_secs(3);
/// A request's limit: past it the request counts as failed (a timeout).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of the roll window's load (stopped long before).
const CAP: Duration = Duration::from_secs(300);
/// The most p99 during the roll, as a multiple of the steady p99.
const P99_RATIO_AT_MOST: f64 = 1.5;
/// Failed requests noted under the table, per contender.
const NOTED: usize = 3;
/// The contender with slow start.
const SLOW_START: &str = "ck --slow-start 10s";
/// The contender without.
const PLAIN: &str = "ck";
/// The contender with slow start, workers warm from the start.
const SLOW_START_WARM: &str = "ck --slow-start 10s, no warm-up";
/// The contender without, workers warm from the start.
const PLAIN_WARM: &str = "ck, no warm-up";
/// The setups: workers that warm up, workers warm from the start.
const WARMING: usize = 0;
const WARM: usize = 1;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    let flags = ["--policy", "round-robin", "--reload-batch", "1"];
    let mut slow = flags.to_vec();
    slow.extend(["--slow-start", "10s"]);
    vec![
        Contender::ck(SLOW_START, &slow).with_setup(WARMING),
        Contender::ck(PLAIN, &flags).with_setup(WARMING),
        Contender::ck(SLOW_START_WARM, &slow).with_setup(WARM),
        Contender::ck(PLAIN_WARM, &flags).with_setup(WARM),
    ]
}

/// The workers of `setup`: demo workers of [`CAPACITY`], warming up over [`WARM_UP`] or not.
fn group(bench: &Bench, setup: usize) -> Group {
    let mut argv = vec![
        bench.bin.to_string_lossy().into_owned(),
        "demo-worker".into(),
        "--capacity".into(),
        CAPACITY.to_string(),
    ];
    if setup == WARMING {
        argv.extend(["--warm-up".into(), format!("{}s", WARM_UP.as_secs())]);
    }
    Group {
        workers: WORKERS,
        udp: false,
        app: App::Program {
            argv,
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    }
}

/// The load's rate: [`LOAD_SHARE`] of the warm fleet's capacity.
fn rate() -> f64 {
    LOAD_SHARE * f64::from(WORKERS * CAPACITY)
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("slow-start", ROUNDS, contenders());
    let mut fleets = Vec::new();
    for (i, c) in plan.contenders().iter().enumerate() {
        fleets.push(c.start(bench, &format!("slow-start{i}"), &group(bench, c.setup))?);
    }
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| round(&mut fleets[i], &c.label, &mut notes))?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured, &notes)?;
    Ok(measured.outcome(vec![table]))
}

/// A paced new-connection load on `fleet` for up to `limit`.
fn load_on(fleet: &Fleet, limit: Duration) -> load::LoadHandle {
    let mut spec = LoadSpec::for_duration(fleet.addr(), Mode::NewConnection, CONNECTIONS, limit);
    spec.rate = Some(rate());
    spec.timeout = REQUEST_TIMEOUT;
    load::start(spec)
}

/// One contender's round: warm workers, the steady window, then one `ck reload` under a fresh
/// load until its last replacement is warm.
fn round(fleet: &mut Fleet, label: &str, notes: &mut FailureNotes) -> Result<Figures> {
    let ck = fleet
        .instance_mut()
        .context("slow-start's contenders are ck instances")?;
    let ready = ck.wait_ready(WORKERS as usize, Duration::from_secs(30))?;
    // Warm: the youngest worker has run for the whole warm-up.
    let youngest = ready
        .ready()
        .map(|s| Duration::from_millis(s.uptime_ms))
        .min()
        .unwrap_or_default();
    thread::sleep((WARM_UP + Duration::from_millis(500)).saturating_sub(youngest));
    let steady = load_on(fleet, STEADY).join();
    let roll = load_on(fleet, CAP);
    let ck = fleet
        .instance()
        .context("slow-start's contenders are ck instances")?;
    let started = Instant::now();
    let reloaded = ck
        .ctl_ok(&["reload"])
        .map_err(|e| eprintln!("bench: {label}: reload failed: {e:#}"))
        .is_ok();
    let took = started.elapsed();
    // The last replacement warms up for WARM_UP after it started (well before the reload
    // returned): the window ends once it is warm.
    thread::sleep(WARM_UP);
    roll.stop();
    let roll = roll.join();
    notes.keep(label, &roll);
    Ok(figures(&steady, &roll, took, reloaded))
}

/// A round's figures.
fn figures(steady: &LoadReport, roll: &LoadReport, took: Duration, reloaded: bool) -> Figures {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut f = Figures::new();
    f.set("steady_p99", ms(steady.p99()))
        .set("roll_p99", ms(roll.p99()))
        .set("p99_ratio", ms(roll.p99()) / ms(steady.p99()).max(1e-3))
        .set("roll_max", ms(roll.quantile(1.0)))
        .failures("roll_failed", roll)
        .set("reload_ms", ms(took))
        .set("reload_failed", f64::from(u8::from(!reloaded)));
    f
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::with_columns(
        m,
        &format!(
            "slow-start: {WORKERS} demo workers of {CAPACITY} req/s, warming up from a tenth \
             over {WARM_UP:?} (the first pair) or warm from the start; one roll per round under \
             new connections at {:.0} % of the warm capacity ({:.0} req/s)",
            LOAD_SHARE * 100.0,
            rate()
        ),
        &[SLOW_START, PLAIN, SLOW_START_WARM, PLAIN_WARM],
    );
    t.values(
        &format!("new-conn p99, steady {STEADY:?}"),
        "steady_p99",
        Unit::Ms,
    )
    .values(
        "new-conn p99, the roll until its last worker is warm",
        "roll_p99",
        Unit::Ms,
    )
    .values("p99 during the roll / steady p99", "p99_ratio", Unit::Ratio)
    .goal(Goal::at_most(P99_RATIO_AT_MOST, Unit::Ratio).of(&[SLOW_START]))
    .values("`ck reload` duration", "reload_ms", Unit::Ms)
    .values("new-conn max, during the roll", "roll_max", Unit::Ms)
    .detail()
    .failures("failed, during the roll, all rounds", "roll_failed")
    .total(
        "`ck reload`s that failed, all rounds",
        "reload_failed",
        Unit::Count,
    )
    .note(format!(
        "with --slow-start a roll starts its next worker once the last one's ramp is over: \
         {WORKERS} x 10 s, or {WORKERS} x {:.1} s when each ramp keeps up (its worker holds no \
         more connections per unit of its share than a warm one); a request over {REQUEST_TIMEOUT:?} counts as failed",
        10.0 * ck::supervisor::fleet::slow_start::SHORT_END
    ));
    notes.note(&mut t);
    t.finish()
}
