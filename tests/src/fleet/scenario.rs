//! What a fleet goes through, each under the client's load through the front with every
//! request counted: a rolling replacement of the hosts (ck's quiet wait, or the preStop model:
//! a fixed sleep then SIGTERM with the wait off), `ck upgrade` and `ck reload` on every host at
//! once, a `--survive-supervisor` ck SIGKILLed and started again, a whole host killed, a host
//! drained with `ck drain --all`. Each returns a [`Row`]: the load's report and what the
//! scenario measured; the tests assert on it, `cargo xtask fleet` prints it ([`table`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::load::LoadReport;

use super::{Rig, RigSpec};

/// Load after the last step of a scenario, so that its effect is seen under load.
const TAIL: Duration = Duration::from_millis(1000);

/// Which scenario a [`Row`] is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rolling replacement with the quiet wait off and no sleep: what neither gives.
    NoWait,
    /// Rolling replacement with a preStop sleep and the quiet wait off.
    PreStopSleep,
    /// Rolling replacement with ck's quiet wait.
    Rolling,
    /// `ck upgrade` and `ck reload` on every host at once.
    UpgradeReload,
    /// A `--survive-supervisor` ck SIGKILLed, started again.
    Survive,
    /// `ck drain --all` on one host.
    DrainAll,
    /// A whole host killed.
    HostKilled,
}

/// The outcome of one scenario.
#[derive(Debug, Clone)]
pub struct Row {
    /// Which scenario.
    pub kind: Kind,
    /// What was done.
    pub scenario: String,
    /// The load through the front meanwhile.
    pub report: LoadReport,
    /// Per host replaced: from its termination (SIGTERM, or the start of the preStop sleep)
    /// to its ck's exit.
    pub stop_times: Vec<Duration>,
    /// For a host taken out (killed, drained): from then until the front stopped sending to it.
    pub detection: Option<Duration>,
    /// For a killed host: the most failures allowed (what was in flight plus every request
    /// the front took between the kill and the host's removal).
    pub failure_bound: Option<u64>,
    /// For a killed host: failures later than a second after the front took it out.
    pub late_failures: Option<u64>,
    /// For a drained host: answers from its workers later than a second after the front took
    /// it out.
    pub late_answers: Option<u64>,
}

impl Row {
    /// A row of `scenario` with `report` and nothing else measured.
    fn new(kind: Kind, scenario: &str, report: LoadReport) -> Row {
        Row {
            kind,
            scenario: scenario.to_string(),
            report,
            stop_times: Vec::new(),
            detection: None,
            failure_bound: None,
            late_failures: None,
            late_answers: None,
        }
    }

    /// The failures by kind, `0` when none.
    pub fn failed_text(&self) -> String {
        let r = &self.report;
        let kinds = [
            ("refused", r.refused),
            ("reset", r.reset),
            ("timeout", r.timeout),
            ("other", r.other),
        ];
        let parts: Vec<String> = kinds
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        if parts.is_empty() {
            "0".to_string()
        } else {
            parts.join(", ")
        }
    }

    /// The stop times, `-` when none.
    pub fn stop_text(&self) -> String {
        if self.stop_times.is_empty() {
            return "-".to_string();
        }
        let times: Vec<String> = self
            .stop_times
            .iter()
            .map(|t| format!("{:.1}", t.as_secs_f64()))
            .collect();
        format!("{} s", times.join(" / "))
    }
}

/// A Markdown table of `rows`: scenario, requests, failed by kind, p99, stop time per host,
/// the front's detection time.
pub fn table(rows: &[Row]) -> String {
    let mut text = String::from(
        "| scenario | requests | failed | p99 | stop time (per host) | front took the host out after |\n\
         | --- | ---: | --- | ---: | --- | ---: |\n",
    );
    for row in rows {
        let detection = row
            .detection
            .map_or("-".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
        text += &format!(
            "| {} | {} | {} | {:.1} ms | {} | {} |\n",
            row.scenario,
            row.report.ok + row.report.failed(),
            row.failed_text(),
            row.report.p99().as_secs_f64() * 1000.0,
            row.stop_text(),
            detection
        );
    }
    text
}

/// Runs `action` on `rig` under the client's load, then [`TAIL`] more load; returns the
/// report, when the load started, and what `action` returned.
fn under_load<T>(rig: &mut Rig, action: impl FnOnce(&mut Rig, Instant) -> T) -> (LoadReport, T) {
    let start = Instant::now();
    let load = rig.load();
    // Some load before the action.
    std::thread::sleep(TAIL);
    let out = action(rig, start);
    std::thread::sleep(TAIL);
    load.stop();
    (load.join(), out)
}

/// A rolling replacement of every host (a row of `kind`), one at a time, as a pod rollout
/// does: the host is
/// terminated (the Service removes it from its endpoints after the propagation delay; HAProxy
/// learns only from its checks), after `pre_stop` (a preStop sleep, or none) its ck gets
/// SIGTERM, and once it exited a new ck with `next_options` starts there; the next host waits
/// until the front has the new one in rotation.
pub fn rolling(
    rig: &mut Rig,
    kind: Kind,
    pre_stop: Option<Duration>,
    next_options: &[String],
) -> Row {
    let (report, stop_times) = under_load(rig, |rig, _| {
        let mut times = Vec::new();
        for i in 0..rig.hosts.len() {
            let terminated = Instant::now();
            rig.front.terminating(i);
            if let Some(sleep) = pre_stop {
                std::thread::sleep(sleep);
            }
            rig.hosts[i].stop();
            times.push(terminated.elapsed());
            rig.hosts[i].set_options(next_options);
            rig.hosts[i].start();
            rig.front.started(i);
            rig.wait_in_rotation(i);
        }
        times
    });
    let name = match (kind, pre_stop) {
        (_, Some(sleep)) => format!(
            "rolling replacement, preStop sleep {} s, quiet wait off",
            sleep.as_secs_f64()
        ),
        (Kind::NoWait, None) => "rolling replacement, quiet wait off, no sleep".to_string(),
        _ => "rolling replacement, ck's quiet wait".to_string(),
    };
    Row {
        stop_times,
        ..Row::new(kind, &name, report)
    }
}

/// `ck upgrade` on every host at once, each waited for, then `ck reload` (a rolling restart of
/// its workers) on every host at once.
pub fn upgrade_and_reload(rig: &mut Rig) -> Row {
    let (report, ()) = under_load(rig, |rig, _| {
        let before: Vec<u32> = rig
            .hosts
            .iter()
            .map(|h| h.ck().status().expect("ck status").upgrades)
            .collect();
        on_every_host(rig, &["upgrade"]);
        for (host, n) in rig.hosts.iter_mut().zip(before) {
            host.wait_upgraded(n + 1);
        }
        on_every_host(rig, &["reload"]);
    });
    Row::new(
        Kind::UpgradeReload,
        "`ck upgrade`, then `ck reload`, on every host at once",
        report,
    )
}

/// Runs `ck ARGS` for every host's instance at once, each required to succeed.
fn on_every_host(rig: &Rig, args: &[&str]) {
    std::thread::scope(|scope| {
        for host in &rig.hosts {
            scope.spawn(move || host.ck().ctl_ok(args).expect("ck control command"));
        }
    });
}

/// Host 0's ck (started with `--survive-supervisor`) SIGKILLed: its workers keep serving
/// while no ck answers `/readyz`; a new ck started there takes them over.
pub fn survive(rig: &mut Rig) -> Row {
    let (report, ()) = under_load(rig, |rig, _| {
        rig.hosts[0].crash_supervisor();
        // Long enough for the front to notice that /readyz is gone.
        std::thread::sleep(rig.front.detection_bound());
        rig.hosts[0].start();
        rig.wait_in_rotation(0);
    });
    Row::new(
        Kind::Survive,
        "one host's ck SIGKILLed (`--survive-supervisor`), started again",
        report,
    )
}

/// Host 1 killed whole (every process of its namespace); the front's detection time measured,
/// then the host started again. Failures are bounded by what was in flight on it plus the
/// requests the front took between the kill and the host's removal.
pub fn host_killed(rig: &mut Rig) -> Row {
    let (report, (killed, removed)) = under_load(rig, |rig, start| {
        let killed = Instant::now();
        rig.hosts[1].kill();
        let removed = rig
            .front
            .wait_rotation(1, false, rig.front.detection_bound() * 3)
            .unwrap_or_else(|| panic!("the front kept the dead host\n{}", rig.front.describe()));
        // Failures of requests the front sent it up to then show up within the tail.
        std::thread::sleep(TAIL);
        rig.hosts[1].start();
        rig.front.started(1);
        rig.wait_in_rotation(1);
        (killed - start, removed.saturating_duration_since(start))
    });
    let window_answers = report
        .answers
        .iter()
        .filter(|(at, _)| (killed..removed).contains(at))
        .count();
    let window_failures = report.failures_within(killed, removed);
    let bound = rig.spec().connections + window_answers + window_failures;
    let late = report.failures_within(removed + TAIL, Duration::MAX);
    Row {
        detection: Some(removed.saturating_sub(killed)),
        failure_bound: Some(bound as u64),
        late_failures: Some(late as u64),
        ..Row::new(
            Kind::HostKilled,
            "a whole host killed (every process of its namespace)",
            report,
        )
    }
}

/// Host 0 drained with `ck drain --all` (its `/readyz` 503, its sockets open): the front takes
/// it out at its next checks; then `ck undrain --all` puts it back.
pub fn drain_all(rig: &mut Rig) -> Row {
    let pids: BTreeSet<u32> = rig.hosts[0].worker_pids().into_iter().collect();
    let (report, (drained, removed, undrained)) = under_load(rig, |rig, start| {
        let drained = Instant::now();
        rig.hosts[0]
            .ck()
            .ctl_ok(&["drain", "--all"])
            .expect("ck drain");
        let removed = rig
            .front
            .wait_rotation(0, false, rig.front.detection_bound() * 3)
            .unwrap_or_else(|| panic!("the front kept the drained host\n{}", rig.front.describe()));
        // Long enough to see that nothing reaches it any more.
        std::thread::sleep(rig.front.detection_bound());
        let undrained = Instant::now();
        rig.hosts[0]
            .ck()
            .ctl_ok(&["undrain", "--all"])
            .expect("ck undrain");
        rig.wait_in_rotation(0);
        (
            drained - start,
            removed.saturating_duration_since(start),
            undrained - start,
        )
    });
    // From a second after the front took it out until it was undrained, nothing may reach it.
    let late = report
        .answers
        .iter()
        .filter(|(at, pid)| (removed + TAIL..undrained).contains(at) && pids.contains(pid))
        .count();
    Row {
        detection: Some(removed.saturating_sub(drained)),
        late_answers: Some(late as u64),
        ..Row::new(
            Kind::DrainAll,
            "a host drained with `ck drain --all`, then undrained",
            report,
        )
    }
}

/// Every scenario, in order, on one rig of `spec` (built with the quiet wait off, so that the
/// preStop rollout comes first and leaves hosts with ck's wait), each row given to `row` as it
/// is done; `kinds` chooses which (the preStop rollout always runs when the rolling one does
/// not, to turn the wait on). Returns the rows and the rig's name prefix (gone once this
/// returns; see [`super::assert_gone`]).
pub fn run_all(spec: RigSpec, kinds: &[Kind], mut row: impl FnMut(&Row)) -> (Vec<Row>, String) {
    let quiet = spec.options(true);
    let mut rig = Rig::start(spec.clone(), false);
    let prefix = rig.prefix().to_string();
    let mut rows = Vec::new();
    let mut done = |r: Row, rows: &mut Vec<Row>| {
        row(&r);
        rows.push(r);
    };
    if kinds.contains(&Kind::NoWait) {
        let off = spec.options(false);
        done(rolling(&mut rig, Kind::NoWait, None, &off), &mut rows);
    }
    if kinds.contains(&Kind::PreStopSleep) {
        done(
            rolling(&mut rig, Kind::PreStopSleep, Some(spec.pre_stop), &quiet),
            &mut rows,
        );
    } else {
        // The hosts get the quiet wait without a rollout under load.
        for i in 0..rig.hosts.len() {
            rig.hosts[i].stop();
            rig.hosts[i].set_options(&quiet);
            rig.hosts[i].start();
            rig.front.started(i);
            rig.wait_in_rotation(i);
        }
    }
    let steps: [(Kind, Step); 5] = [
        (Kind::Rolling, |rig| {
            let quiet = rig.spec().options(true);
            rolling(rig, Kind::Rolling, None, &quiet)
        }),
        (Kind::UpgradeReload, upgrade_and_reload),
        (Kind::Survive, survive),
        (Kind::DrainAll, drain_all),
        (Kind::HostKilled, host_killed),
    ];
    for (kind, step) in steps {
        if kinds.contains(&kind) {
            done(step(&mut rig), &mut rows);
        }
    }
    drop(rig);
    (rows, prefix)
}

/// A scenario run on a rig.
type Step = fn(&mut Rig) -> Row;

/// Every scenario kind, in the order [`run_all`] runs them: `cargo xtask fleet`.
pub const ALL: [Kind; 7] = [
    Kind::NoWait,
    Kind::PreStopSleep,
    Kind::Rolling,
    Kind::UpgradeReload,
    Kind::Survive,
    Kind::DrainAll,
    Kind::HostKilled,
];

/// The scenarios the tests run: every one but the rollout without any wait (which shows
/// what neither the wait nor a sleep gives and promises nothing).
pub const TESTED: [Kind; 6] = [
    Kind::PreStopSleep,
    Kind::Rolling,
    Kind::UpgradeReload,
    Kind::Survive,
    Kind::DrainAll,
    Kind::HostKilled,
];
