//! The `upgrade` scenario: `ck upgrade` and `--survive-supervisor` under the three paced loads
//! of [`super::three_loads`] (keep-alive, keep-alive that never retries, a new connection per
//! request). Two contenders of [`WORKERS`] demo workers each, side by side: ck, whose round
//! has a steady window of [`STEADY`], then fresh loads from [`LEAD`] before the first of
//! [`UPGRADES`] `ck upgrade`s (each waits until the new image has its steering checked)
//! until [`TAIL`] after the last; and ck `--survive-supervisor`, whose round is the survive
//! table's ([`super::survive`]: a kill -9 of ck and the take-back). During the upgrades a
//! client asks `status` on the control socket in a tight loop: the longest time between two
//! answers around each upgrade is how long the control socket was unavailable. Reported per
//! load: the p99 during the upgrades over the steady p99 round by round (at most 2 wanted), the
//! failed requests over all rounds (none wanted).

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::survive;
use super::three_loads::{self, CONNECTIONS, Loads, RATE, Rows};
use crate::rounds::contender::{self, Fleet};
use crate::rounds::stats::median_duration;
use crate::rounds::{Contender, FailureNotes, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
pub(super) const WORKERS: u32 = 4;
/// Rounds: the goals bound failures (none) and ratios far from 1 (p99 at most twice the
/// steady one), and a round (both contenders) takes about 15 s: the safe default.
const ROUNDS: usize = 7;
/// The steady window (of both tables).
pub(super) const STEADY: Duration = Duration::from_secs(3);
/// Load before the first `ck upgrade`.
const LEAD: Duration = Duration::from_millis(300);
/// Load after the last `ck upgrade` exits.
const TAIL: Duration = Duration::from_millis(300);
/// Pause between two upgrades.
const PAUSE: Duration = Duration::from_millis(200);
/// Upgrades per round.
const UPGRADES: usize = 3;
/// Upper bound of the upgrade window's loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(300);
/// The most p99 during the event, as a multiple of the steady p99 (both tables).
pub(super) const P99_RATIO_AT_MOST: f64 = 2.0;
/// The most time the control socket may leave `status` unanswered during an upgrade, in ms.
const UNAVAILABLE_AT_MOST: f64 = 50.0;
/// Failed requests noted under each table, per contender.
pub(super) const NOTED: usize = 3;
/// The contender of the upgrade table.
const CK: &str = "ck";
/// The setup index of the upgrade table's contender (the survive table's is
/// [`survive::SETUP`]).
const SETUP: usize = 0;

/// The contenders, in column order: each table's.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck(CK, &[]).with_setup(SETUP),
        Contender::ck(survive::CK, &["--survive-supervisor"]).with_setup(survive::SETUP),
    ]
}

/// Runs the scenario: both tables' contenders in the same rounds.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("upgrade", ROUNDS, contenders());
    let mut fleets =
        contender::start_all(bench, plan.contenders(), "upgrade", &Group::demo(WORKERS))?;
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| match c.setup {
        survive::SETUP => survive::round(bench, &mut fleets[i], &c.label, &mut notes),
        _ => round(bench, &fleets[i], &c.label, &mut notes),
    })?;
    contender::stop_all(bench, fleets)?;
    let tables = vec![
        table(&measured, &notes)?,
        survive::table(&measured, &notes)?,
    ];
    Ok(measured.outcome(tables))
}

/// Answers to `status` on the control socket, asked one after the other.
struct Poller {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Vec<Instant>>,
}

impl Poller {
    /// Asks `status` of instance `name` in a loop; each answer's arrival time is kept.
    fn start(name: &str) -> Poller {
        let path = ck_tests::ck::control_socket(name);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = thread::spawn(move || {
            let mut answers = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                if ask_status(&path) {
                    answers.push(Instant::now());
                }
            }
            answers
        });
        Poller { stop, thread }
    }

    /// Stops asking; the answers' times.
    fn finish(self) -> Vec<Instant> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// One `status` request; whether it was answered.
fn ask_status(path: &PathBuf) -> bool {
    let Ok(mut stream) = UnixStream::connect(path) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream.write_all(b"{\"cmd\":\"status\"}\n").is_err() {
        return false;
    }
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).is_ok() && line.starts_with("{\"status\"")
}

/// The longest time between two answers within `[from, to]` (the answers just outside count
/// as its ends).
fn longest_gap(answers: &[Instant], from: Instant, to: Instant) -> Duration {
    let first = answers.partition_point(|a| *a < from).saturating_sub(1);
    let last = (answers.partition_point(|a| *a <= to) + 1).min(answers.len());
    answers[first..last]
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(to - from)
}

/// The upgrade contender's round: the steady window (with the status client's pace), then
/// the upgrades under fresh loads.
fn round(bench: &Bench, fleet: &Fleet, label: &str, notes: &mut FailureNotes) -> Result<Figures> {
    let ck = fleet
        .instance()
        .context("upgrade's contenders are ck instances")?;
    let poller = Poller::start(ck.name());
    let steady_from = Instant::now();
    let steady = Loads::start(fleet.addr(), bench.span(STEADY)).join();
    let paces: Vec<Duration> = poller
        .finish()
        .windows(2)
        .filter(|w| w[0] >= steady_from)
        .map(|w| w[1] - w[0])
        .collect();

    let loads = Loads::start(fleet.addr(), CAP);
    let poller = Poller::start(ck.name());
    thread::sleep(LEAD);
    let mut spans = Vec::new();
    let mut failed = 0;
    for i in 0..UPGRADES {
        let from = Instant::now();
        if let Err(e) = ck.ctl_ok(&["upgrade"]) {
            failed += 1;
            eprintln!("bench: {label}: upgrade {} failed: {e:#}", i + 1);
        }
        spans.push((from, Instant::now()));
        thread::sleep(PAUSE);
    }
    thread::sleep(TAIL);
    loads.stop();
    let answers = poller.finish();
    let upgrading = loads.join();
    upgrading.keep_failures(notes, label);

    let gaps: Vec<Duration> = spans
        .iter()
        .map(|(from, to)| longest_gap(&answers, *from, *to))
        .collect();
    let took: Vec<Duration> = spans.iter().map(|(from, to)| *to - *from).collect();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut f = Figures::new();
    three_loads::figures(&mut f, &steady, &upgrading);
    f.set("unavailable_median", ms(median_duration(&gaps)))
        .set(
            "unavailable_max",
            ms(gaps.iter().max().copied().unwrap_or_default()),
        )
        .set("status_pace", ms(median_duration(&paces)))
        .set("upgrade_ms", ms(median_duration(&took)))
        .set("upgrades_failed", failed as f64);
    Ok(f)
}

/// The upgrade table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::with_columns(
        m,
        &format!(
            "upgrade: {WORKERS} workers, {UPGRADES} `ck upgrade`s ({PAUSE:?} apart) per round \
             under three loads at once: keep-alive, keep-alive without retries (like wrk) and \
             new connection per request, each {CONNECTIONS} connections at {RATE:.0} req/s"
        ),
        &[CK],
    );
    three_loads::lay_out(
        &mut t,
        &Rows {
            event: "during upgrades",
            steady: STEADY,
            p99_ratio_at_most: Some(P99_RATIO_AT_MOST),
            columns: &[CK],
        },
    );
    t.values(
        "control socket unavailable per upgrade, each round's median",
        "unavailable_median",
        Unit::Ms,
    )
    .goal(Goal::at_most(UNAVAILABLE_AT_MOST, Unit::Ms).of(&[CK]))
    .values(
        "control socket unavailable per upgrade, each round's max",
        "unavailable_max",
        Unit::Ms,
    )
    .detail()
    .values(
        "time between two status answers, steady",
        "status_pace",
        Unit::Ms,
    )
    .detail()
    .values(
        "`ck upgrade` duration, each round's median (until steering is checked)",
        "upgrade_ms",
        Unit::Ms,
    )
    .detail()
    .total(
        "`ck upgrade`s that failed, all rounds",
        "upgrades_failed",
        Unit::Count,
    )
    .goal(Goal::at_most(0.0, Unit::Count).of(&[CK]))
    .note(format!(
        "during upgrades = from {LEAD:?} before the first `ck upgrade` until {TAIL:?} after the \
         last one exits"
    ))
    .note(
        "control socket unavailable = the longest time between two answers of a client asking \
         `status` in a tight loop, from each `ck upgrade`'s start to its end; the same client's \
         median time between answers when nothing happens is the steady row",
    );
    notes.note(&mut t);
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    /// Every load's figures: `p99_ratio` and `lost` requests during the event, none steady.
    fn loads(p99_ratio: f64, lost: f64) -> BTreeMap<String, f64> {
        let mut f = BTreeMap::new();
        for key in ["ka", "ka_no_retry", "new"] {
            for (k, v) in [
                ("steady_p99", 2.0),
                ("event_p99", 2.0 * p99_ratio),
                ("p99_ratio", p99_ratio),
                ("event_max", 9.0),
                ("steady_failed", 0.0),
                ("event_failed", lost),
            ] {
                f.insert(format!("{key}_{k}"), v);
            }
        }
        f
    }

    #[test]
    fn each_table_holds_its_own_contender_to_its_goals() {
        let plan = Plan::new("upgrade", ROUNDS, contenders(), "/ck".as_ref(), None);
        let round = |_| {
            // The upgrades triple the p99 and leave the control socket silent for 30 ms; the
            // take-back keeps the p99 and every worker, and loses no request.
            let mut upgrade = loads(3.0, 0.0);
            upgrade.extend([
                ("unavailable_median".to_string(), 30.0),
                ("upgrades_failed".to_string(), 0.0),
            ]);
            let mut survive = loads(1.0, 0.0);
            survive.extend([
                ("not_taken_back".to_string(), 0.0),
                ("take_back_ms".to_string(), 400.0),
            ]);
            RoundFigures {
                order: vec![],
                figures: BTreeMap::from([
                    (CK.to_string(), upgrade),
                    (survive::CK.to_string(), survive),
                ]),
                seconds: 15.0,
            }
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let notes = FailureNotes::new(NOTED);
        let verdicts = |t: &Table| -> Vec<(String, String)> {
            t.rows
                .iter()
                .filter_map(|r| Some((r.metric.clone(), r.goal.as_ref()?.text())))
                .collect()
        };
        let upgrade = table(&m, &notes).unwrap();
        assert_eq!(upgrade.columns, [CK]);
        let v = verdicts(&upgrade);
        assert!(v.contains(&(
            "new-conn p99, during upgrades / steady".into(),
            "<= 2.00 (ck): NOT met".into()
        )));
        assert!(v.contains(&(
            "control socket unavailable per upgrade, each round's median".into(),
            "<= 50.0 ms (ck): met".into()
        )));
        let survive = survive::table(&m, &notes).unwrap();
        assert_eq!(survive.columns, [survive::CK]);
        let v = verdicts(&survive);
        assert!(v.iter().all(|(_, text)| text.ends_with(": met")), "{v:?}");
        assert!(v.contains(&(
            "workers not taken back (other pids after), all rounds".into(),
            "<= 0 (ck --survive-supervisor): met".into()
        )));
    }
}
