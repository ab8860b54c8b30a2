//! The `stall` scenario: 4 workers, of which slot 0 blocks its event loop for [`STALL`] every
//! [`STALL_EVERY`] (the demo worker's `--stall-ms`/`--stall-every`, given to slot 0 only by a
//! small sh script that is the app of every contender), under a paced new-connection load of
//! [`RATE`] req/s over [`CONNECTIONS`] connections for [`DURATION`]. The contenders: each
//! policy with the default `--stall-timeout` (1s, longer than the stall) and with 100ms,
//! least-queue with a `--queue-patience` (the price of evening out bursts), and `--no-bpf`; in
//! every round each runs once on a fresh fleet (the stalls are timed from the worker's start),
//! the order rotating. Reported per setup: p50/p99/p99.9 latency, the per-round ratio of its p99
//! to `--no-bpf`'s, failed requests, slot 0's share of the answers and how often ck marked a
//! slot stalled. The goal: least-queue's p99 (with either stall timeout) at most a fifth of
//! `--no-bpf`'s.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::load::{self, LoadSpec, Mode};

use crate::rounds::{App, Contender, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Cell, Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Load connections.
const CONNECTIONS: usize = 32;
/// Total requests per second.
const RATE: f64 = 2000.0;
/// Length of the load.
const DURATION: Duration = Duration::from_secs(10);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long slot 0 blocks (`--stall-ms`).
const STALL: &str = "200ms";
/// How often (`--stall-every`; the first stall is this long after the worker started).
const STALL_EVERY: &str = "1s";
/// The slot that stalls, as the answers name it.
const STALLED_SLOT: &str = "0";
/// The most p99 of least-queue, as a fraction of `--no-bpf`'s.
const GOAL_RATIO: f64 = 0.2;
/// Rounds: its goal bounds a ratio far from 1, and a round (eight fleets, each loaded for
/// [`DURATION`]) takes about a minute and a half, so the fewest allowed.
const ROUNDS: usize = 3;
/// The setups least-queue's goal is about.
const LEAST_QUEUE: [&str; 2] = [
    "least-queue, stall-timeout 1s",
    "least-queue, stall-timeout 100ms",
];

/// The contenders, in row order.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck("hash, stall-timeout 1s", &["--policy", "hash"]),
        Contender::ck(
            "round-robin, stall-timeout 1s",
            &["--policy", "round-robin"],
        ),
        Contender::ck(LEAST_QUEUE[0], &["--policy", "least-queue"]),
        Contender::ck(
            "least-queue --queue-patience 10ms, stall-timeout 1s",
            &["--policy", "least-queue", "--queue-patience", "10ms"],
        ),
        Contender::ck(
            "hash, stall-timeout 100ms",
            &["--policy", "hash", "--stall-timeout", "100ms"],
        ),
        Contender::ck(
            "round-robin, stall-timeout 100ms",
            &["--policy", "round-robin", "--stall-timeout", "100ms"],
        ),
        Contender::ck(
            LEAST_QUEUE[1],
            &["--policy", "least-queue", "--stall-timeout", "100ms"],
        ),
        Contender::no_bpf(NO_BPF, &[]),
    ]
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let app = write_app(bench)?;
    let group = Group {
        workers: WORKERS,
        udp: false,
        app: App::Program {
            argv: vec![app.to_string_lossy().into_owned()],
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    };
    let plan = bench.plan("stall", ROUNDS, contenders());
    let measured = plan.run(bench, |i, c, _| measure(bench, c, i, &group))?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// Runs the load once on a fresh fleet of `contender`.
fn measure(bench: &Bench, contender: &Contender, index: usize, group: &Group) -> Result<Figures> {
    let fleet = contender.start(bench, &format!("stall{index}"), group)?;
    let mut spec = LoadSpec::for_duration(
        fleet.addr(),
        Mode::NewConnection,
        CONNECTIONS,
        bench.span(DURATION),
    );
    spec.rate = Some(RATE);
    spec.timeout = REQUEST_TIMEOUT;
    let report = load::run(spec);
    bench.progress(format_args!(
        "stall: {}: {}",
        contender.label,
        report.summary()
    ));
    let unhealthy: Vec<String> = fleet
        .instance()
        .map(|inst| inst.complaints())
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.contains("worker unhealthy"))
        .collect();
    let marked = unhealthy.iter().filter(|l| l.contains("slot=0 ")).count();
    fleet.stop(bench)?;
    let ms = |q: f64| report.quantile(q).as_secs_f64() * 1000.0;
    let stalled = report.by_slot.get(STALLED_SLOT).copied().unwrap_or(0);
    let mut f = Figures::new();
    f.set("p50", ms(0.5))
        .set("p99", ms(0.99))
        .set("p999", ms(0.999))
        .set("failed", report.failed() as f64)
        .set("share", 100.0 * stalled as f64 / report.ok.max(1) as f64)
        .set("marked", marked as f64)
        .set("marked_others", (unhealthy.len() - marked) as f64);
    Ok(f)
}

/// The table: a row per setup (and per `--against` copy).
fn table(m: &Measured) -> Result<Table> {
    const P99_RATIO: &str = "p99 / --no-bpf's";
    let against = m.plan.contenders().iter().any(|c| c.build.is_some());
    let mut columns = vec!["p50", "p99", "p99.9", P99_RATIO];
    if against {
        columns.push("p99, this build / the other");
    }
    columns.extend([
        "failed, all rounds",
        "slot 0's share of answers",
        "slot 0 marked stalled (others)",
    ]);
    let mut t = Layout::with_columns(
        m,
        &format!(
            "stall: {WORKERS} workers, slot 0 stalls {STALL} every {STALL_EVERY}; new connection \
             per request, {CONNECTIONS} connections at {RATE:.0} req/s for {} s per setup and \
             round, a fresh fleet each time, {} s request timeout",
            DURATION.as_secs(),
            REQUEST_TIMEOUT.as_secs()
        ),
        &columns,
    );
    for c in m.plan.contenders() {
        let l = c.label.as_str();
        let stat = |key| m.stat(l, key);
        let mut cells = vec![
            Unit::Ms.stat(stat("p50")),
            Unit::Ms.stat(stat("p99")),
            Unit::Ms.stat(stat("p999")),
            match l {
                NO_BPF => Cell::text(""),
                l => Unit::Ratio.stat(m.ratio(l, NO_BPF, "p99")),
            },
        ];
        if against {
            cells.push(m.against_of(l).map_or_else(
                || Cell::text(""),
                |copy| Unit::Ratio.stat(m.ratio(l, &copy, "p99")),
            ));
        }
        let marked = |key| {
            m.total(l, key)
                .map_or_else(|| "-".into(), |n| format!("{n:.0}"))
        };
        cells.extend([
            m.total(l, "failed")
                .map_or_else(|| Cell::text("-"), |n| Unit::Count.cell(n)),
            Unit::Percent(1).stat(stat("share")),
            Cell::text(&format!(
                "{} ({})",
                marked("marked"),
                marked("marked_others")
            )),
        ]);
        t.row(l, cells);
        if LEAST_QUEUE.contains(&l) {
            t.goal(Goal::at_most(GOAL_RATIO, Unit::Ratio).of(&[P99_RATIO]));
        }
    }
    t.note(
        "latency counts from the scheduled send when a connection is behind schedule: a \
         connection stuck behind the stall also delays the sends it missed meanwhile",
    );
    t.finish()
}

/// Writes the app of every fleet, `<log_dir>/stall-app.sh` (see [`app_script`]).
fn write_app(bench: &Bench) -> Result<PathBuf> {
    let ck = bench
        .bin
        .to_str()
        .context("the ck binary's path is not UTF-8")?;
    if ck.contains('\'') {
        bail!("the ck binary's path contains a quote: {ck}");
    }
    let path = bench.log_dir.join("stall-app.sh");
    fs::write(&path, app_script(ck)).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))?;
    Ok(path)
}

/// The app script: slot [`STALLED_SLOT`] runs `ck`'s demo worker with the stall, the other
/// slots the plain demo worker (`exec`, so that the worker keeps the pid ck started).
fn app_script(ck: &str) -> String {
    format!(
        "#!/bin/sh\n\
         if [ \"$CK_SLOT\" = {STALLED_SLOT} ]; then\n\
         \x20   exec '{ck}' demo-worker --stall-ms {STALL} --stall-every {STALL_EVERY}\n\
         fi\n\
         exec '{ck}' demo-worker\n"
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn script_stalls_slot_0_only() {
        let script = app_script("/x/ck");
        assert!(script.starts_with("#!/bin/sh\n"), "{script}");
        assert!(
            script.contains(
                "if [ \"$CK_SLOT\" = 0 ]; then\n    \
                 exec '/x/ck' demo-worker --stall-ms 200ms --stall-every 1s\nfi\n"
            ),
            "{script}"
        );
        assert!(script.ends_with("exec '/x/ck' demo-worker\n"), "{script}");
    }

    #[test]
    fn least_queue_is_held_to_a_fifth_of_plain_p99_round_by_round() {
        let plan = Plan::new("stall", ROUNDS, contenders(), "/ck".as_ref(), None);
        // --no-bpf's p99 is 180 ms in every round; least-queue's 30 ms, the rest 180 ms.
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let p99 = if c.label.starts_with("least-queue,") {
                        30.0
                    } else {
                        180.0
                    };
                    let f = BTreeMap::from([("p99".to_string(), p99), ("marked".into(), 2.0)]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 90.0,
        };
        let t = table(&Measured::new(
            plan.clone(),
            (0..ROUNDS).map(round).collect(),
        ))
        .unwrap();
        assert_eq!(t.rows.len(), 8);
        let goals: Vec<(String, String)> = t
            .rows
            .iter()
            .filter_map(|r| Some((r.metric.clone(), r.goal.as_ref()?.text())))
            .collect();
        assert_eq!(
            goals,
            [
                (
                    LEAST_QUEUE[0].to_string(),
                    "<= 0.20 (p99 / --no-bpf's): met".to_string()
                ),
                (
                    LEAST_QUEUE[1].to_string(),
                    "<= 0.20 (p99 / --no-bpf's): met".to_string()
                )
            ]
        );
        assert_eq!(t.rows[2].cells[3].text, "0.17");
        assert_eq!(t.rows[0].cells[6].text, "6 (-)");
    }
}
