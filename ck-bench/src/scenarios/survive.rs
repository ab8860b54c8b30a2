//! The `upgrade` scenario's second table: `--survive-supervisor`. 4 workers under the same
//! three loads as the upgrade table; ck is SIGKILLed, stays away for [`DOWN`], and the same
//! `ck run` starts again and takes the fleet back. Counts the failed requests, compares the
//! p99 latency of that window with a steady one, checks the worker pids are the same, and
//! times the take-back (from `ck run` to every worker ready with steering checked).

use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;

use super::three_loads::{Loads, Window};
use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};
use ck_tests::load::LoadReport;

/// Workers of the instance.
const WORKERS: u32 = 4;
/// The steady window.
const STEADY: Duration = Duration::from_secs(3);
/// Load before ck is killed.
const LEAD: Duration = Duration::from_millis(500);
/// How long no ck runs.
const DOWN: Duration = Duration::from_millis(500);
/// Load after the fleet is taken back.
const TAIL: Duration = Duration::from_millis(500);
/// Upper bound of the loads (they are stopped long before).
const CAP: Duration = Duration::from_secs(120);

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "survive",
        Variant::Ck,
        WORKERS,
        &["--survive-supervisor"],
    )?;
    inst.wait_ready(WORKERS as usize)?;
    bench.progress(format_args!("survive: steady window ({STEADY:?})"));
    let steady = Loads::start(&inst, STEADY).join();
    let loads = Loads::start(&inst, CAP);
    thread::sleep(LEAD);
    let before = inst.serving_pids()?;
    inst.signal(Signal::SIGKILL)?;
    inst.wait_exit(Duration::from_secs(10))?;
    thread::sleep(DOWN);
    let spawned = Instant::now();
    inst.respawn()?;
    inst.wait_ready(WORKERS as usize)?;
    let took = spawned.elapsed();
    let after = inst.serving_pids()?;
    thread::sleep(TAIL);
    loads.stop();
    let killed = loads.join();
    bench.progress("survive: fleet taken back");
    bench.report_log(&inst);
    inst.stop()?;

    let mut t = Table::with_columns(
        &format!(
            "survive: {WORKERS} workers with --survive-supervisor under the same three loads; \
             ck SIGKILLed, {DOWN:?} without a supervisor, then the same `ck run` again"
        ),
        &["kill + take-back", "steady"],
    );
    type Pick = fn(&Window) -> &LoadReport;
    let modes: [(&str, Pick); 3] = [
        ("keep-alive", |w| &w.keep_alive),
        ("keep-alive no retry", |w| &w.no_retry),
        ("new-conn", |w| &w.new_conn),
    ];
    for (mode, pick) in modes {
        t.row(
            &format!("{mode} p99"),
            Cell::ms(pick(&killed).p99()),
            Cell::ms(pick(&steady).p99()),
            Goal::RatioAtMost(2.0),
        );
        t.row(
            &format!("{mode} failed (refused/reset/timeout/other)"),
            Cell::failures(pick(&killed)),
            Cell::failures(pick(&steady)),
            Goal::AtMost(0.0, "0"),
        );
    }
    let kept = before.iter().filter(|p| after.contains(p)).count();
    t.row(
        "workers taken back (same pids)",
        Cell::count(kept as u64),
        Cell::count(before.len() as u64),
        Goal::None,
    );
    t.row(
        "take-back: `ck run` to every worker ready, steering checked",
        Cell::ms(took),
        Cell::text("-"),
        Goal::None,
    );
    t.note(format!(
        "kill + take-back = from {LEAD:?} before the SIGKILL until {TAIL:?} after the new ck \
         has every worker ready; the take-back time is polled with `ck status` every 10 ms"
    ));
    for r in [&killed.keep_alive, &killed.no_retry, &killed.new_conn] {
        t.failure_notes("ck", r, 3);
    }
    Ok(t)
}
