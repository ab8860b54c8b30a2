//! The `reload` scenario: ck and `ck --no-bpf`, [`WORKERS`] demo workers each, side by side
//! under the three paced loads of [`super::three_loads`] (keep-alive, keep-alive that never
//! retries, a new connection per request). In every round each contender in turn has a steady
//! window of [`STEADY`], then fresh loads from [`LEAD`] before the first of [`RELOADS`]
//! back-to-back `ck reload`s until [`TAIL`] after the last one exits (its old workers are still
//! draining when it returns). Reported: each load's p99 in both windows and their ratio, the
//! failed requests over all rounds (none wanted of ck), and the reloads' length and failures.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::three_loads::{self, CONNECTIONS, Loads, RATE, Rows, Window};
use crate::plot::timeline::{self, Panel, Timeline};
use crate::rounds::contender::{self, Fleet};
use crate::rounds::{Contender, FailureNotes, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// Rounds: its goals are counts of failures (none wanted), not ratios near 1; a round takes
/// about 15 s, so the safe default.
const ROUNDS: usize = 7;
/// The steady window.
const STEADY: Duration = Duration::from_secs(2);
/// Load before the first `ck reload` (keep-alive connections are open on the old workers).
const LEAD: Duration = Duration::from_millis(100);
/// Load after the last `ck reload` exits.
const TAIL: Duration = Duration::from_millis(500);
/// Rolling restarts per contender and round, one after the other.
const RELOADS: usize = 15;
/// Upper bound of the reload window's loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(600);
/// Failed requests noted under the table, per contender.
const NOTED: usize = 3;

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![Contender::ck("ck", &[]), Contender::no_bpf(NO_BPF, &[])]
}

/// What a contender's latest round left for the plot: its reload window and when each reload
/// started.
struct Latest {
    window: Window,
    reloads: Vec<Duration>,
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("reload", ROUNDS, contenders());
    let fleets = contender::start_all(bench, plan.contenders(), "reload", &Group::demo(WORKERS))?;
    let mut latest: Vec<Option<Latest>> = fleets.iter().map(|_| None).collect();
    let mut notes = FailureNotes::new(NOTED);
    let measured = plan.run(bench, |i, c, _| {
        let (f, last) = round(bench, &fleets[i], &c.label)?;
        last.window.keep_failures(&mut notes, &c.label);
        latest[i] = Some(last);
        Ok(f)
    })?;
    contender::stop_all(bench, fleets)?;
    let mut t = table(&measured, &notes)?;
    let panels = measured
        .plan
        .contenders()
        .iter()
        .zip(&latest)
        .filter_map(|(c, l)| {
            let l = l.as_ref()?;
            Some(Panel {
                title: c.label.clone(),
                series: l.window.series(),
                events: l.reloads.clone(),
            })
        })
        .collect();
    let plot = Timeline {
        title: format!(
            "reload: latency per 100 ms during {RELOADS} `ck reload`s in a row (the last round), \
             {WORKERS} workers"
        ),
        event: "ck reload",
        bucket: Duration::from_millis(100),
        panels,
    };
    t.plot_with(bench.plot_path("reload-latency"), |path| {
        timeline::draw(path, &plot)
    });
    Ok(measured.outcome(vec![t]))
}

/// One contender's round: the steady window, then the reloads under fresh loads.
fn round(bench: &Bench, fleet: &Fleet, label: &str) -> Result<(Figures, Latest)> {
    let ck = fleet
        .instance()
        .context("reload's contenders are ck instances")?;
    let steady = Loads::start(fleet.addr(), bench.span(STEADY)).join();
    // The loads' clocks start within microseconds of this.
    let loads_started = Instant::now();
    let loads = Loads::start(fleet.addr(), CAP);
    thread::sleep(LEAD);
    let started = Instant::now();
    let mut failed = 0;
    let mut reloads = Vec::with_capacity(RELOADS);
    for i in 0..RELOADS {
        reloads.push(loads_started.elapsed());
        if let Err(e) = ck.ctl_ok(&["reload"]) {
            failed += 1;
            eprintln!("bench: {label}: reload {} failed: {e:#}", i + 1);
        }
    }
    let took = started.elapsed();
    thread::sleep(TAIL);
    loads.stop();
    let window = loads.join();
    let mut f = Figures::new();
    three_loads::figures(&mut f, &steady, &window);
    f.set("reload_ms", took.as_secs_f64() * 1000.0 / RELOADS as f64)
        .set("reloads_failed", failed as f64);
    Ok((f, Latest { window, reloads }))
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "reload: {WORKERS} workers, {RELOADS} `ck reload`s in a row per round under three \
             loads at once: keep-alive, keep-alive without retries (like wrk) and new connection \
             per request, each {CONNECTIONS} connections at {RATE:.0} req/s"
        ),
    );
    three_loads::lay_out(
        &mut t,
        &Rows {
            event: "during the rolls",
            steady: STEADY,
            p99_ratio_at_most: None,
            columns: &["ck"],
        },
    );
    t.values("`ck reload` mean duration", "reload_ms", Unit::Ms)
        .total(
            "`ck reload`s that failed, all rounds",
            "reloads_failed",
            Unit::Count,
        )
        .goal(Goal::at_most(0.0, Unit::Count).of(&["ck"]))
        .note(format!(
            "during the rolls = from {LEAD:?} before the first `ck reload` until {TAIL:?} after \
             the last one exits (old workers drain after it returns)"
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
    fn the_goals_hold_ck_to_no_failure_in_any_round() {
        let plan = Plan::new("reload", ROUNDS, contenders(), "/ck".as_ref(), None);
        // ck loses one new-conn request in the third round; --no-bpf loses some in every one.
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let mut f = BTreeMap::new();
                    for key in ["ka", "ka_no_retry", "new"] {
                        let lost = match (c.label.as_str(), key) {
                            ("ck", "new") if r == 2 => 1.0,
                            ("ck", _) => 0.0,
                            _ => 5.0,
                        };
                        for (k, v) in [
                            ("steady_p99", 2.0),
                            ("event_p99", 6.0),
                            ("p99_ratio", 3.0),
                            ("event_max", 9.0),
                            ("steady_failed", 0.0),
                            ("event_failed", lost),
                            ("event_failed_reset", lost),
                        ] {
                            f.insert(format!("{key}_{k}"), v);
                        }
                    }
                    f.insert("reload_ms".into(), 200.0);
                    f.insert("reloads_failed".into(), 0.0);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 15.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let t = table(&m, &FailureNotes::new(NOTED)).unwrap();
        let verdict = |metric: &str| {
            let row = t
                .rows
                .iter()
                .find(|r| r.metric.starts_with(metric))
                .unwrap();
            (row.cells[0].text.clone(), row.goal.as_ref().unwrap().text())
        };
        assert_eq!(
            verdict("new-conn failed, during the rolls"),
            ("1 (0/1/0/0)".to_string(), "<= 0 (ck): NOT met".to_string())
        );
        assert_eq!(
            verdict("keep-alive failed, during the rolls"),
            ("0 (0/0/0/0)".to_string(), "<= 0 (ck): met".to_string())
        );
        assert_eq!(
            verdict("`ck reload`s that failed"),
            ("0".to_string(), "<= 0 (ck): met".to_string())
        );
        let ratio = t
            .rows
            .iter()
            .find(|r| r.metric == "new-conn p99, during the rolls / steady")
            .unwrap();
        assert!(ratio.detail && ratio.goal.is_none());
        assert_eq!(ratio.cells[0].text, "3.00");
    }
}
