//! The Node part of the `recovery` scenario: 3 workers of the Node hello app, 8 clients making
//! a new connection per request at [`RATE`] requests/s in total (the same offered load for
//! every supervisor), and at each of [`ROUNDS`] rounds 2 of the 3
//! workers SIGKILLed at once. Measures, for ck (default settings: the survivor steps back in CPU
//! priority while the replacements boot, its accept probe sees Node accept), ck with
//! `--boot-boost 0`, ck with
//! its exits by pidfd alone (`CK_EXIT_WATCH=pidfd`), ck with two hot spares, ck `--no-bpf`,
//! node:cluster and pm2, the time from the kill until every worker serves again (3 distinct
//! pids, none a victim, answered after the kill), the failed requests, and ck's own CPU time
//! per round (`/proc/PID/schedstat`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, bail};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};
use nix::sys::signal::Signal;

use super::fleet::{self, Contender, Fleet, Pick};
use crate::Bench;
use crate::instance::kill;
use crate::plot::timeline::{self, Panel, Series, Timeline};
use crate::table::{Cell, Goal, Table, median_duration};

/// Workers of every fleet.
const WORKERS: usize = 3;
/// Workers killed at once.
const KILLED: usize = 2;
/// Load clients.
const CLIENTS: usize = 8;
/// Requests per second of the load, in total: the same offered load for every supervisor,
/// below what the slowest one serves (an unpaced load would load each differently).
const RATE: f64 = 1500.0;
/// Kill rounds per fleet.
const ROUNDS: usize = 5;
/// Time between rounds (and before the first).
const BETWEEN: Duration = Duration::from_secs(2);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What one fleet gave.
struct Outcome {
    report: LoadReport,
    /// Per round: kill -> every worker served again (None: not within the round).
    restored: Vec<Option<Duration>>,
    /// When each round's kill happened, since the load's start.
    kills: Vec<Duration>,
    /// ck's own CPU time per round (none for the peers).
    supervisor_cpu: Option<Duration>,
    /// Per round: kill -> the second replacement's `worker started` line in ck's log (empty
    /// for the peers).
    spawned: Vec<Option<Duration>>,
}

/// Milliseconds of `d`.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of the rounds' spawn delays, in ms, if every round has one.
fn median_of_spawns(spawned: &[Option<Duration>]) -> Option<f64> {
    let all: Option<Vec<Duration>> = spawned.iter().copied().collect();
    all.filter(|a| !a.is_empty())
        .map(|a| ms(median_duration(&a)))
}

/// Runs the rounds for every contender and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let contenders = Contender::RECOVERY;
    let outcomes = fleet::each(bench, "recovery-node", WORKERS, &contenders, measure)?;
    let mut t = Table::with_columns(
        &format!(
            "recovery, Node hello app: {WORKERS} workers, new connection per request from \
             {CLIENTS} clients at {RATE:.0} req/s in total; SIGKILL {KILLED} workers at once, \
             {ROUNDS} rounds"
        ),
        &contenders.map(Contender::label),
    );
    // Column order is [`Contender::RECOVERY`]: ck, ck without its boot boost, ck with exits by
    // pidfd, ck --spares 2, ck --no-bpf, node:cluster, pm2.
    let (spares, cluster_at) = (3, 5);
    t.ratio_against(cluster_at);
    let median_of = |o: &Outcome| {
        let all: Option<Vec<Duration>> = o.restored.iter().copied().collect();
        all.map(|d| median_duration(&d))
    };
    let median = |o: &Outcome| median_of(o).map_or_else(|| Cell::text("not always"), Cell::ms);
    let median_ms = |o: &Outcome| median_of(o).map(|d| d.as_secs_f64() * 1000.0);
    let fastest_peer = outcomes[cluster_at..]
        .iter()
        .filter_map(median_ms)
        .fold(f64::INFINITY, f64::min);
    let cluster = median_ms(&outcomes[cluster_at]);
    t.row_of(
        "kill -> every worker answering, median",
        outcomes.iter().map(median).collect(),
        match cluster {
            Some(ms) => Goal::AtMost(ms, "default ck no slower than node:cluster"),
            None => Goal::None,
        },
    );
    t.row_of(
        "kill -> every worker answering, each round",
        outcomes
            .iter()
            .map(|o| {
                let rounds: Vec<String> = o
                    .restored
                    .iter()
                    .map(|d| d.map_or("-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1000.0)))
                    .collect();
                Cell::text(&format!("{} ms", rounds.join("/")))
            })
            .collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "kill -> both replacements spawned (ck's log), median / each round",
        outcomes
            .iter()
            .map(|o| match median_of_spawns(&o.spawned) {
                Some(median) => Cell::text(&format!(
                    "{median:.1} ms / {}",
                    o.spawned
                        .iter()
                        .map(|d| d.map_or("-".into(), |d| format!("{:.1}", ms(d))))
                        .collect::<Vec<_>>()
                        .join("/")
                )),
                None => Cell::text("-"),
            })
            .collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "failed requests (refused/reset/timeout/other)",
        outcomes.iter().map(|o| Cell::failures(&o.report)).collect(),
        Goal::None,
    );
    // What a fleet's speed costs its clients: a supervisor that holds connections back while
    // workers boot (node:cluster's master hands each worker one at a time) frees CPU for the
    // boot and makes those clients wait.
    t.row_of(
        "latency p99 / p99.9 over the run",
        outcomes
            .iter()
            .map(|o| {
                let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                Cell::text(&format!(
                    "{:.1} / {:.1} ms",
                    ms(o.report.p99()),
                    ms(o.report.p999())
                ))
            })
            .collect(),
        Goal::None,
    );
    t.row_of(
        "ck's own CPU time per round",
        outcomes
            .iter()
            .map(|o| o.supervisor_cpu.map_or_else(|| Cell::text("-"), Cell::ms))
            .collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "requests answered",
        outcomes.iter().map(|o| Cell::count(o.report.ok)).collect(),
        Goal::None,
    );
    t.detail();
    t.note(match (median_ms(&outcomes[0]), cluster) {
        (Some(ms), Some(cluster)) => format!(
            "goal for default ck: {ms:.1} ms vs {cluster:.1} ms for node:cluster (ratio {:.2}): {}",
            ms / cluster,
            if ms <= cluster { "met" } else { "NOT met" }
        ),
        (None, _) => "goal for default ck: not restored in every round: NOT met".into(),
        (Some(_), None) => "goal for default ck: no comparison, node:cluster was not restored \
                            in every round"
            .into(),
    });
    t.note(match median_ms(&outcomes[spares]) {
        Some(ms) => format!(
            "goal for ck --spares 2: {ms:.1} ms vs {fastest_peer:.1} ms for the faster of \
             node:cluster and pm2: {}",
            if ms <= fastest_peer { "met" } else { "NOT met" }
        ),
        None => "goal for ck --spares 2: not restored in every round: NOT met".into(),
    });
    for (label, o) in contenders.map(Contender::label).iter().zip(&outcomes) {
        t.failure_notes(label, &o.report, 2);
    }
    t.note(
        "every worker answering = answers from 3 distinct pids, none of them a victim, after the \
         kill (the clients see it, whatever the supervisor reports)",
    );
    let plot = Timeline {
        title: format!(
            "recovery, Node hello app: latency per 100 ms, {WORKERS} workers, SIGKILL {KILLED} \
             at once in each of {ROUNDS} rounds"
        ),
        event: "SIGKILL",
        bucket: Duration::from_millis(100),
        panels: contenders
            .iter()
            .zip(&outcomes)
            .map(|(c, o)| Panel {
                title: c.label().to_string(),
                series: vec![Series::of("new-conn", &o.report)],
                events: o.kills.clone(),
            })
            .collect(),
    };
    t.plot_with(bench.plot_path("recovery-node-latency"), |path| {
        timeline::draw(path, &plot)
    });
    Ok(t)
}

/// Runs the load and the rounds on `fleet`.
fn measure(fleet: &Fleet) -> Result<Outcome> {
    let total = BETWEEN * (ROUNDS as u32 + 1) + BETWEEN;
    let mut spec = LoadSpec::for_duration(fleet.addr(), Mode::NewConnection, CLIENTS, total);
    spec.timeout = REQUEST_TIMEOUT;
    spec.rate = Some(RATE);
    let started = Instant::now();
    let cpu_before = fleet.supervisor().and_then(cpu_time);
    let handle = load::start(spec);
    let mut pick = Pick(0x0063_6b72_6563_6f76);
    let mut kills = Vec::new();
    let mut wall_kills = Vec::new();
    for round in 1..=ROUNDS {
        std::thread::sleep(
            (started + BETWEEN * round as u32).saturating_duration_since(Instant::now()),
        );
        let mut live = fleet.workers();
        live.sort_unstable();
        if live.len() < WORKERS {
            bail!("only {} workers before round {round}", live.len());
        }
        let mut victims = BTreeSet::new();
        while victims.len() < KILLED {
            victims.insert(live[pick.next(live.len())]);
        }
        let at = started.elapsed();
        wall_kills.push(SystemTime::now());
        for pid in &victims {
            kill(*pid, Signal::SIGKILL)?;
        }
        kills.push((at, victims));
    }
    let report = handle.join();
    let supervisor_cpu = fleet
        .supervisor()
        .and_then(cpu_time)
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before) / ROUNDS as u32);
    let restored = kills
        .iter()
        .enumerate()
        .map(|(i, (at, victims))| {
            let until = kills.get(i + 1).map_or(Duration::MAX, |(next, _)| *next);
            let mut seen = BTreeSet::new();
            report
                .answers
                .iter()
                .filter(|(t, pid)| *t >= *at && *t < until && *pid != 0 && !victims.contains(pid))
                .find_map(|(t, pid)| {
                    seen.insert(*pid);
                    (seen.len() >= WORKERS).then(|| t.saturating_sub(*at))
                })
        })
        .collect();
    let kills = kills.into_iter().map(|(at, _)| at).collect();
    let spawned = match fleet.log() {
        Some(path) => spawn_delays(&std::fs::read_to_string(path)?, &wall_kills),
        None => Vec::new(),
    };
    Ok(Outcome {
        report,
        restored,
        kills,
        supervisor_cpu,
        spawned,
    })
}

/// For each kill (wall clock), the time until the second `worker started` line after it in
/// ck's log (None when there are not two before the next kill).
fn spawn_delays(log: &str, kills: &[SystemTime]) -> Vec<Option<Duration>> {
    let starts: Vec<SystemTime> = log
        .lines()
        .filter(|l| l.contains("worker started"))
        .filter_map(|l| log_time(l.split_whitespace().next()?))
        .collect();
    kills
        .iter()
        .enumerate()
        .map(|(i, kill)| {
            let until = kills.get(i + 1).copied();
            let after: Vec<&SystemTime> = starts
                .iter()
                .filter(|t| *t >= kill && until.is_none_or(|u| **t < u))
                .collect();
            after.get(KILLED - 1)?.duration_since(*kill).ok()
        })
        .collect()
}

/// A log line's timestamp (`2026-12-01T20:31:22.578657Z`, UTC) as a wall-clock time.
fn log_time(stamp: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(stamp)
        .ok()
        .map(SystemTime::from)
}

/// The CPU time `pid` has used (`/proc/PID/schedstat`'s first field, in nanoseconds).
fn cpu_time(pid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_read_as_utc() {
        let t = log_time("2026-12-01T20:31:22.578657Z").unwrap();
        let since = t.duration_since(std::time::UNIX_EPOCH).unwrap();
        // date -u -d 2026-12-01T20:31:22Z +%s
        assert_eq!(since.as_secs(), 1_796_157_082);
        assert_eq!(since.subsec_micros(), 578_657);
        assert_eq!(log_time("not a time"), None);
    }

    #[test]
    fn the_second_start_after_each_kill_counts() {
        let log = "2026-12-01T00:00:01.000000Z  INFO worker started slot=0\n\
                   2026-12-01T00:00:01.010000Z  INFO worker exited slot=1\n\
                   2026-12-01T00:00:01.012000Z  INFO worker started slot=1\n\
                   2026-12-01T00:00:01.020000Z  INFO worker started slot=2\n\
                   2026-12-01T00:00:03.005000Z  INFO worker started slot=1\n";
        let at = |s: &str| log_time(s).unwrap();
        let kills = [
            at("2026-12-01T00:00:01.005000Z"),
            at("2026-12-01T00:00:03.000000Z"),
        ];
        let delays = spawn_delays(log, &kills);
        assert_eq!(delays[0], Some(Duration::from_millis(15)));
        assert_eq!(delays[1], None);
    }
}
