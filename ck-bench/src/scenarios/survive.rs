//! The `upgrade` scenario's second table: `--survive-supervisor`. Its contender (ck
//! `--survive-supervisor`, [`super::upgrade::WORKERS`] demo workers) runs in the same rounds
//! as the upgrade table's; in each of its rounds, a steady window under the three loads of
//! [`super::three_loads`], then fresh loads from [`LEAD`] before ck is SIGKILLed; no ck runs
//! for [`DOWN`], then the same `ck run` starts again and takes the fleet back, and the loads go
//! on until [`TAIL`] after every worker is ready again. Reported: per load, the p99 of that
//! window over the steady p99 round by round (at most 2 wanted) and the failed requests over
//! all rounds (none wanted); the workers not taken back (the same pids; none wanted) and the
//! take-back's time (from `ck run` to every worker ready with steering checked).

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::three_loads::{self, Loads, Rows};
use super::upgrade::{P99_RATIO_AT_MOST, STEADY, WORKERS};
use crate::Bench;
use crate::rounds::{FailureNotes, Figures, Fleet, Goal, Layout, Measured};
use crate::table::{Table, Unit};

/// The contender's label.
pub(super) const CK: &str = "ck --survive-supervisor";
/// Its setup index in the upgrade scenario's plan.
pub(super) const SETUP: usize = 1;
/// Load before ck is killed.
const LEAD: Duration = Duration::from_millis(500);
/// How long no ck runs.
const DOWN: Duration = Duration::from_millis(500);
/// Load after the fleet is taken back.
const TAIL: Duration = Duration::from_millis(500);
/// Upper bound of the loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(120);
/// How long the new ck gets to take the fleet back.
const TAKE_BACK_WITHIN: Duration = Duration::from_secs(15);

/// One round: the steady window, then the kill and the take-back under fresh loads.
pub(super) fn round(
    bench: &Bench,
    fleet: &mut Fleet,
    label: &str,
    notes: &mut FailureNotes,
) -> Result<Figures> {
    let addr = fleet.addr();
    let ck = fleet
        .instance_mut()
        .context("survive's contender is a ck instance")?;
    let steady = Loads::start(addr, bench.span(STEADY)).join();
    let loads = Loads::start(addr, CAP);
    thread::sleep(LEAD);
    let before = ck.status()?.serving_pids();
    ck.kill_supervisor()?;
    thread::sleep(DOWN);
    let spawned = Instant::now();
    ck.respawn()?;
    ck.wait_ready(WORKERS as usize, TAKE_BACK_WITHIN)?;
    let took = spawned.elapsed();
    let after = ck.status()?.serving_pids();
    thread::sleep(TAIL);
    loads.stop();
    let killed = loads.join();
    killed.keep_failures(notes, label);
    let lost = before.iter().filter(|p| !after.contains(p)).count();
    let mut f = Figures::new();
    three_loads::figures(&mut f, &steady, &killed);
    f.set("not_taken_back", lost as f64)
        .set("take_back_ms", took.as_secs_f64() * 1000.0);
    Ok(f)
}

/// The survive table.
pub(super) fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::with_columns(
        m,
        &format!(
            "survive: {WORKERS} workers with --survive-supervisor under the same three loads; \
             ck SIGKILLed, {DOWN:?} without a supervisor, then the same `ck run` again"
        ),
        &[CK],
    );
    three_loads::lay_out(
        &mut t,
        &Rows {
            event: "kill + take-back",
            steady: STEADY,
            p99_ratio_at_most: Some(P99_RATIO_AT_MOST),
            columns: &[CK],
        },
    );
    t.total(
        "workers not taken back (other pids after), all rounds",
        "not_taken_back",
        Unit::Count,
    )
    .goal(Goal::at_most(0.0, Unit::Count).of(&[CK]))
    .values(
        "take-back: `ck run` to every worker ready, steering checked",
        "take_back_ms",
        Unit::Ms,
    )
    .note(format!(
        "kill + take-back = from {LEAD:?} before the SIGKILL until {TAIL:?} after the new ck \
         has every worker ready; the take-back time is polled with `ck status` every 10 ms"
    ));
    notes.note(&mut t);
    t.finish()
}
