//! The Node part of the `recovery` scenario: [`WORKERS`] workers of the Node hello app, 8
//! clients making a new connection per request at [`RATE`] requests/s in total (the same
//! offered load for every supervisor), and in each round, [`LEAD`] into the load, [`KILLED`] of
//! the workers SIGKILLed at once (the same ones, by index in the sorted pids, for every
//! contender of the round). Its contenders, in the same rounds as the demo worker's: ck
//! (default settings: the survivor steps back in CPU priority while the replacements boot, its
//! accept probe sees Node accept), ck with `--boot-boost 0`, ck with its exits by pidfd alone
//! (`CK_EXIT_WATCH=pidfd`), ck with two hot spares, ck `--no-bpf`, node:cluster and pm2.
//! Measured: the time from the kill until every worker serves again (3 distinct pids, none a
//! victim, answered after the kill), the failed requests, ck's time to spawn both replacements
//! (its log) and its own CPU time over the round (`/proc/PID/schedstat`). The goals: ck no
//! slower than node:cluster, ck's spares no slower than either peer, round by round.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, bail};
use ck_tests::load::{self, LoadSpec, Mode};
use nix::sys::signal::Signal;

use super::fleet::{AnyFleet, NODE_CLUSTER, PM2, Pick, peer_contenders};
use super::recovery::{KILLED, Latest};
use crate::Bench;
use crate::process::kill;
use crate::rounds::{Contender, FailureNotes, Figures, Goal, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};

/// Workers of every fleet.
pub(super) const WORKERS: usize = 3;
/// The setup index of these contenders in the scenario's plan.
pub(super) const SETUP: usize = 1;
/// ck with hot spares' column.
pub(super) const SPARES: &str = "ck --spares 2";
/// Load clients.
const CLIENTS: usize = 8;
/// Requests per second of the load, in total: the same offered load for every supervisor,
/// below what the slowest one serves (an unpaced load would load each differently).
const RATE: f64 = 1500.0;
/// Load before the kill.
const LEAD: Duration = Duration::from_secs(1);
/// Load after the kill: the longest a fleet may take to serve again (not shortened by
/// `--quick`).
const AFTER: Duration = Duration::from_secs(2);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The victims' seed (each round's picker starts from it and the round).
const SEED: u64 = 0x0063_6b72_6563_6f76;

/// The contenders, in column order.
pub(super) fn contenders() -> Vec<Contender> {
    let mut all = vec![
        Contender::ck("ck", &[]),
        Contender::ck("ck --boot-boost 0", &["--boot-boost", "0"]),
        Contender::ck("ck, exits by pidfd", &[]).with_env(&[(ck::bpf::exits::FORCE_ENV, "pidfd")]),
        Contender::ck(SPARES, &["--spares", "2"]),
        Contender::no_bpf(NO_BPF, &[]),
    ];
    all.extend(peer_contenders());
    all.into_iter().map(|c| c.with_setup(SETUP)).collect()
}

/// One contender's round (`round`, 0-based, picks the victims): once the fleet is whole, the
/// load and the kill.
pub(super) fn round(
    bench: &Bench,
    fleet: &mut AnyFleet,
    round: usize,
) -> Result<(Figures, Latest)> {
    fleet.wait_whole(WORKERS)?;
    let lead = bench.span(LEAD);
    let mut spec = LoadSpec::for_duration(fleet.addr(), Mode::NewConnection, CLIENTS, lead + AFTER);
    spec.timeout = REQUEST_TIMEOUT;
    spec.rate = Some(RATE);
    let cpu_before = fleet.supervisor().and_then(cpu_time);
    let started = Instant::now();
    let handle = load::start(spec);
    std::thread::sleep(lead);
    let mut live = fleet.workers();
    live.sort_unstable();
    if live.len() < WORKERS {
        bail!("only {} workers before the kill", live.len());
    }
    let mut pick = Pick::of_round(SEED, round);
    let mut victims = BTreeSet::new();
    while victims.len() < KILLED {
        victims.insert(live[pick.next(live.len())]);
    }
    let at = started.elapsed();
    let wall = SystemTime::now();
    for pid in &victims {
        kill(*pid, Signal::SIGKILL)?;
    }
    let report = handle.join();
    let cpu = fleet
        .supervisor()
        .and_then(cpu_time)
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let restored = restored_after(&report.answers, at, &victims);
    let spawned = match fleet.ck() {
        Some(ck) => spawn_delay(&ck.log(), wall),
        None => None,
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut f = Figures::new();
    f.failures("failed", &report)
        .set("not_restored", f64::from(u8::from(restored.is_none())))
        .set("p99", ms(report.p99()))
        .set("p999", ms(report.p999()))
        .set("ok", report.ok as f64);
    for (key, value) in [
        ("restored_ms", restored),
        ("spawned_ms", spawned),
        ("cpu_ms", cpu),
    ] {
        if let Some(d) = value {
            f.set(key, ms(d));
        }
    }
    Ok((f, Latest { report, kill: at }))
}

/// The time from the kill (`at`, on the load's clock) until `answers` (time, pid) came from
/// [`WORKERS`] distinct pids, none of them a victim (the clients see it, whatever the
/// supervisor reports).
fn restored_after(
    answers: &[(Duration, u32)],
    at: Duration,
    victims: &BTreeSet<u32>,
) -> Option<Duration> {
    let mut seen = BTreeSet::new();
    answers
        .iter()
        .filter(|(t, pid)| *t >= at && *pid != 0 && !victims.contains(pid))
        .find_map(|(t, pid)| {
            seen.insert(*pid);
            (seen.len() >= WORKERS).then(|| t.saturating_sub(at))
        })
}

/// The time from the kill (wall clock) until the second `worker started` line after it in
/// ck's log, if there are two.
fn spawn_delay(log: &str, kill: SystemTime) -> Option<Duration> {
    let starts: Vec<SystemTime> = log
        .lines()
        .filter(|l| l.contains("worker started"))
        .filter_map(|l| log_time(l.split_whitespace().next()?))
        .filter(|t| *t >= kill)
        .collect();
    starts.get(KILLED - 1)?.duration_since(kill).ok()
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

/// The Node app's table.
pub(super) fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let columns: Vec<String> = contenders().into_iter().map(|c| c.label).collect();
    let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut t = Layout::with_columns(
        m,
        &format!(
            "recovery, Node hello app: {WORKERS} workers, new connection per request from \
             {CLIENTS} clients at {RATE:.0} req/s in total; SIGKILL {KILLED} workers at once, \
             {LEAD:?} into the load, once per round"
        ),
        &columns,
    );
    let no_slower = || Goal::at_most(1.0, Unit::Ratio);
    t.values("kill -> every worker answering", "restored_ms", Unit::Ms)
        .ratios(
            "kill -> every worker answering / node:cluster's",
            "restored_ms",
            NODE_CLUSTER,
        )
        .goal(no_slower().of(&["ck", SPARES]))
        .ratios("kill -> every worker answering / pm2's", "restored_ms", PM2)
        .goal(no_slower().of(&[SPARES]))
        .total(
            &format!("rounds not every worker answering within {AFTER:?}"),
            "not_restored",
            Unit::Count,
        )
        .detail()
        .values(
            "kill -> both replacements spawned (ck's log)",
            "spawned_ms",
            Unit::Ms,
        )
        .detail()
        .failures("failed requests, all rounds", "failed")
        // What a fleet's speed costs its clients: a supervisor that holds connections back
        // while workers boot (node:cluster's master hands each worker one at a time) frees CPU
        // for the boot and makes those clients wait.
        .values("latency p99", "p99", Unit::Ms)
        .values("latency p99.9", "p999", Unit::Ms)
        .detail()
        .values("ck's own CPU time per round", "cpu_ms", Unit::Ms)
        .detail()
        .total("requests answered, all rounds", "ok", Unit::Count)
        .detail()
        .note(format!(
            "every worker answering = answers from {WORKERS} distinct pids, none of them a \
             victim, after the kill (the clients see it, whatever the supervisor reports); the \
             victims are the same for every contender of a round (by index in the sorted pids)"
        ));
    notes.note(&mut t);
    t.finish()
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
    fn the_second_start_after_the_kill_counts() {
        let log = "2026-12-01T00:00:01.000000Z  INFO worker started slot=0\n\
                   2026-12-01T00:00:01.010000Z  INFO worker exited slot=1\n\
                   2026-12-01T00:00:01.012000Z  INFO worker started slot=1\n\
                   2026-12-01T00:00:01.020000Z  INFO worker started slot=2\n";
        let at = |s: &str| log_time(s).unwrap();
        let delay = spawn_delay(log, at("2026-12-01T00:00:01.005000Z"));
        assert_eq!(delay, Some(Duration::from_millis(15)));
        assert_eq!(spawn_delay(log, at("2026-12-01T00:00:01.015000Z")), None);
    }

    #[test]
    fn a_fleet_is_restored_once_every_worker_but_the_victims_answered() {
        let ms = Duration::from_millis;
        // Before the kill at 100 ms, then the survivor (3), a victim's late answer (1), and
        // the two replacements (7, 8).
        let mut answers = vec![
            (ms(50), 1),
            (ms(120), 3),
            (ms(130), 1),
            (ms(300), 7),
            (ms(420), 8),
        ];
        let victims = BTreeSet::from([1, 2]);
        assert_eq!(restored_after(&answers, ms(100), &victims), Some(ms(320)));
        answers.pop();
        assert_eq!(restored_after(&answers, ms(100), &victims), None);
    }
}
