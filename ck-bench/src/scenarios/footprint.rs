//! The `footprint` scenario: what the supervisor costs to have around. ck and `ck --no-bpf` of
//! the workspace's release build (glibc), and ck as it ships (the static musl build every
//! package holds, which `cargo xtask bench` builds for this scenario), [`WORKERS`] demo
//! workers each, in [`ROUNDS`] rounds, the order rotating; in every round each
//! is started afresh and timed from spawning `ck run` to the first answered request (a new
//! connection + `GET /` every [`PROBE_EVERY`]); once its workers have been ready and idle for
//! [`IDLE`], the supervisor's `VmRSS` is read and SIGTERM sent, timed until the supervisor
//! exits. Reported: the median of the rounds, with the lowest and highest.

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use ck_tests::load;
use ck_tests::sys::rss_kib;
use nix::sys::signal::Signal;

use crate::rounds::contender::READY_TIMEOUT;
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// Rounds: no goal bounds a ratio, and a round (two starts and stops) takes a few seconds: the
/// safe default.
const ROUNDS: usize = 7;
/// Interval of the first-answer probe.
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// Limit of one probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest wait for the first answer.
const START_LIMIT: Duration = Duration::from_secs(10);
/// Idle time before the RSS is read and SIGTERM is sent.
const IDLE: Duration = Duration::from_millis(500);
/// Longest wait for the exit.
const EXIT_LIMIT: Duration = Duration::from_secs(15);
/// The most supervisor RSS, MiB.
const RSS_GOAL: f64 = 8.0;
/// The most time from spawn to the first answer, ms.
const FIRST_ANSWER_GOAL: f64 = 20.0;
/// The most time from SIGTERM to the exit, ms.
const SHUTDOWN_GOAL: f64 = 50.0;

/// The static build ck ships, its column.
const SHIPPED: &str = "ck, static (as shipped)";
/// The static build's target: every package of `cargo xtask dist` holds its binary.
const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// The contenders, in column order: `shipped` is the static build's ck.
fn contenders(shipped: PathBuf) -> Vec<Contender> {
    vec![
        Contender::ck("ck", &[]),
        Contender::no_bpf(NO_BPF, &[]),
        Contender::ck(SHIPPED, &[]).with_bin(shipped),
    ]
}

/// The static build's ck beside the measured release ck `bin` (`<target>/release/ck`), built.
fn shipped(bin: &Path) -> Result<PathBuf> {
    let target = bin
        .parent()
        .and_then(Path::parent)
        .context("the release ck is not in a cargo target directory")?;
    let shipped = target.join(STATIC_TARGET).join("release").join("ck");
    if !shipped.is_file() {
        bail!(
            "no static build at {}: run the scenario through `cargo xtask bench footprint`, \
             which builds it",
            shipped.display()
        );
    }
    Ok(shipped)
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("footprint", ROUNDS, contenders(shipped(&bench.bin)?));
    let measured = plan.run(bench, |i, c, _| measure(bench, c, i))?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// One start, idle and stop of `contender`.
fn measure(bench: &Bench, contender: &Contender, index: usize) -> Result<Figures> {
    let mut fleet = contender.spawn(bench, &format!("footprint{index}"), &Group::demo(WORKERS))?;
    let addr = fleet.addr();
    let inst = fleet
        .instance_mut()
        .context("footprint's contenders are ck instances")?;
    let first_answer = loop {
        let probe = Instant::now();
        if load::get_once(addr, PROBE_TIMEOUT).is_ok() {
            break inst.spawned().elapsed();
        }
        if inst.spawned().elapsed() >= START_LIMIT {
            bail!(
                "no answer within {START_LIMIT:?} of starting ck; see {}",
                inst.log_path().display()
            );
        }
        if inst.try_exit().is_some() {
            bail!(
                "ck exited while starting; see {}",
                inst.log_path().display()
            );
        }
        thread::sleep(PROBE_EVERY.saturating_sub(probe.elapsed()));
    };
    inst.wait_ready(WORKERS as usize, READY_TIMEOUT)?;
    thread::sleep(bench.span(IDLE));
    let pid = inst.pid();
    let rss_kib = rss_kib(pid).with_context(|| format!("no VmRSS of ck (pid {pid})"))?;
    let term = Instant::now();
    inst.signal(Signal::SIGTERM)?;
    inst.wait_exit(EXIT_LIMIT)?;
    let shutdown = term.elapsed();
    bench.report_complaints(inst);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut f = Figures::new();
    f.set("rss_mib", rss_kib as f64 / 1024.0)
        .set("first_answer_ms", ms(first_answer))
        .set("shutdown_ms", ms(shutdown));
    Ok(f)
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "footprint: {WORKERS} demo workers, a fresh start of each contender in every round"
        ),
    );
    t.values("supervisor VmRSS, idle", "rss_mib", Unit::Mib)
        .goal(Goal::at_most(RSS_GOAL, Unit::Mib).of(&[SHIPPED]))
        .values(
            "spawn `ck run` -> first answer (app boot included)",
            "first_answer_ms",
            Unit::Ms,
        )
        .goal(Goal::at_most(FIRST_ANSWER_GOAL, Unit::Ms).of(&["ck"]))
        .values("SIGTERM -> ck exit, idle", "shutdown_ms", Unit::Ms)
        .goal(Goal::at_most(SHUTDOWN_GOAL, Unit::Ms).of(&["ck"]))
        .note(format!(
            "first answer: the app's own boot is included (it is not separated); probe = new \
             connection + GET / every {} ms",
            PROBE_EVERY.as_millis()
        ))
        .note(
            "the RSS goal is judged on the static build, the ck every package ships (no shared \
             libc mapped, musl's allocator gives freed pages back); the workspace's glibc build \
             is shown beside it",
        )
        .note(
            "shutdown includes the demo worker's close: after SIGTERM it keeps each listener \
             open until it has been quiet for 10 ms (CLOSE_QUIET)",
        );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_goals_are_ck_s_medians() {
        let plan = Plan::new(
            "footprint",
            ROUNDS,
            contenders("/static/ck".into()),
            "/ck".as_ref(),
            None,
        );
        // ck's shutdown takes 40 ms in most rounds, 90 in one: the median meets the goal.
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let shutdown = if r == 3 { 90.0 } else { 40.0 };
                    let f = BTreeMap::from([
                        (
                            "rss_mib".to_string(),
                            9.5 - f64::from(c.label == SHIPPED) * 3.0,
                        ),
                        ("first_answer_ms".to_string(), 12.0),
                        ("shutdown_ms".to_string(), shutdown),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 3.0,
        };
        let t = table(&Measured::new(
            plan.clone(),
            (0..ROUNDS).map(round).collect(),
        ))
        .unwrap();
        let verdicts: Vec<String> = t
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|v| v.text()))
            .collect();
        assert_eq!(
            verdicts,
            [
                "<= 8.00 MiB (ck, static (as shipped)): met",
                "<= 20.0 ms (ck): met",
                "<= 50.0 ms (ck): met"
            ]
        );
        assert_eq!(t.rows[2].cells[0].text, "40.0 ms (40.0-90.0)");
        assert_eq!(t.rows[0].cells[1].text, "9.50 MiB");
    }
}
