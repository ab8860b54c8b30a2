//! The `chaos` scenario: 4 workers of the Node hello app under a new-connection load from 8
//! clients; every [`EVERY`] for [`CHAOS`], a random worker is SIGKILLed. Run side by side for
//! ck (default settings: it sees Node accept, as Node cannot send READY=1), ck `--no-bpf`,
//! node:cluster and pm2 (cluster mode). Counts failed requests by kind and per kill, the workers
//! alive a second after the last kill, and how long after it every worker answered again.

use std::time::{Duration, Instant};

use anyhow::Result;
use ck_tests::load::{self, FailureKind, LoadReport, LoadSpec, Mode};
use nix::sys::signal::Signal;

use super::fleet::{self, Contender, Fleet, Pick};
use crate::Bench;
use crate::instance::kill;
use crate::plot::timeline::{self, Panel, Series, Timeline};
use crate::table::{Cell, Goal, Table};

/// Workers of every fleet.
const WORKERS: usize = 4;
/// Load clients, each with one request in flight at a time.
const CLIENTS: usize = 8;
/// How long the chaos lasts.
const CHAOS: Duration = Duration::from_secs(60);
/// Time between kills.
const EVERY: Duration = Duration::from_millis(500);
/// Load before the first kill.
const LEAD: Duration = Duration::from_secs(2);
/// Load after the last kill.
const TAIL: Duration = Duration::from_secs(3);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What one fleet gave.
struct Outcome {
    report: LoadReport,
    /// Kill times since the load's start.
    kills: Vec<Duration>,
    /// Worker processes one second after the last kill.
    alive_after: usize,
    /// Last kill -> every worker answered a request.
    all_serving: Option<Duration>,
}

impl Outcome {
    /// Failures in the window after each kill (until the next one).
    fn per_kill(&self) -> Vec<usize> {
        let mut ends: Vec<Duration> = self.kills.iter().skip(1).copied().collect();
        ends.push(Duration::MAX);
        self.kills
            .iter()
            .zip(ends)
            .map(|(from, to)| self.report.failures_within(*from, to))
            .collect()
    }
}

/// Runs the scenario for every fleet and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let outcomes = fleet::each(bench, "chaos", WORKERS, &Contender::ALL, |fleet| {
        measure(bench, fleet)
    })?;
    let mut t = table(&outcomes);
    let plot = Timeline {
        title: format!(
            "chaos: latency per 100 ms, {WORKERS} workers of the Node hello app, a random one \
             SIGKILLed every {EVERY:?}"
        ),
        event: "SIGKILL",
        bucket: Duration::from_millis(100),
        panels: Contender::ALL
            .iter()
            .zip(&outcomes)
            .map(|(c, o)| Panel {
                title: c.label().to_string(),
                series: vec![Series::of("new-conn", &o.report)],
                events: o.kills.clone(),
            })
            .collect(),
    };
    t.plot_with(bench.plot_path("chaos-latency"), |path| {
        timeline::draw(path, &plot)
    });
    Ok(t)
}

/// Runs the load and the kills on `fleet`.
fn measure(bench: &Bench, fleet: &Fleet) -> Result<Outcome> {
    let mut spec = LoadSpec::for_duration(
        fleet.addr(),
        Mode::NewConnection,
        CLIENTS,
        LEAD + CHAOS + TAIL,
    );
    spec.timeout = REQUEST_TIMEOUT;
    let started = Instant::now();
    let handle = load::start(spec);
    std::thread::sleep(LEAD);
    let mut pick = Pick(0x0063_6b63_6861_6f73);
    let mut kills = Vec::new();
    let mut last_victim = 0;
    let mut next = started + LEAD;
    while next < started + LEAD + CHAOS {
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let mut live = fleet.workers();
        live.sort_unstable();
        if !live.is_empty() {
            let victim = live[pick.next(live.len())];
            if kill(victim, Signal::SIGKILL).is_ok() {
                kills.push(started.elapsed());
                last_victim = victim;
                if kills.len() % 20 == 0 {
                    bench.progress(format_args!("chaos: {} kills", kills.len()));
                }
            }
        }
        next += EVERY;
    }
    std::thread::sleep(Duration::from_secs(1));
    let alive_after = fleet.workers().len();
    let report = handle.join();
    let last = kills.last().copied().unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    // The victim's own answers (a response already on its way when it died) do not count: the
    // fleet serves again once its replacement answers.
    let all_serving = report
        .answers
        .iter()
        .filter(|(at, pid)| *at >= last && *pid != 0 && *pid != last_victim)
        .find_map(|(at, pid)| {
            seen.insert(*pid);
            (seen.len() >= WORKERS).then(|| at.saturating_sub(last))
        });
    Ok(Outcome {
        report,
        kills,
        alive_after,
        all_serving,
    })
}

fn table(o: &[Outcome]) -> Table {
    let mut t = Table::with_columns(
        &format!(
            "chaos: {WORKERS} workers of the Node hello app, new connection per request from \
             {CLIENTS} clients; a random worker SIGKILLed every {EVERY:?} for {CHAOS:?}"
        ),
        &Contender::ALL.map(Contender::label),
    );
    let cells = |f: &dyn Fn(&Outcome) -> Cell| o.iter().map(f).collect::<Vec<_>>();
    let kind = |k: FailureKind| {
        move |x: &Outcome| {
            Cell::count(x.report.failures.iter().filter(|(_, f)| *f == k).count() as u64)
        }
    };
    let peers_min = o[2..].iter().map(|x| x.report.failed()).min().unwrap_or(0);
    t.row_of(
        "kills",
        cells(&|x| Cell::count(x.kills.len() as u64)),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "requests answered",
        cells(&|x| Cell::count(x.report.ok)),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "failed requests (refused/reset/timeout/other)",
        cells(&|x| Cell::failures(&x.report)),
        Goal::AtMost(peers_min as f64, "<= node:cluster and pm2"),
    );
    t.row_of(
        "failed, % of requests",
        cells(&|x| {
            let total = x.report.ok + x.report.failed();
            let pct = 100.0 * x.report.failed() as f64 / total.max(1) as f64;
            Cell {
                text: format!("{pct:.3} %"),
                num: Some(pct),
            }
        }),
        Goal::None,
    );
    t.row_of(
        "refused",
        cells(&kind(FailureKind::Refused)),
        Goal::AtMost(0.0, "0"),
    );
    t.detail();
    t.row_of(
        "timeouts",
        cells(&kind(FailureKind::Timeout)),
        Goal::AtMost(0.0, "0"),
    );
    t.detail();
    t.row_of(
        "failures after one kill, max",
        cells(&|x| Cell::count(x.per_kill().into_iter().max().unwrap_or(0) as u64)),
        Goal::AtMost(CLIENTS as f64, "<= requests in flight (8)"),
    );
    t.row_of(
        "failures after one kill, mean",
        cells(&|x| {
            let per = x.per_kill();
            let mean = per.iter().sum::<usize>() as f64 / per.len().max(1) as f64;
            Cell {
                text: format!("{mean:.2}"),
                num: Some(mean),
            }
        }),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "workers alive 1 s after the last kill",
        cells(&|x| Cell::count(x.alive_after as u64)),
        Goal::None,
    );
    t.row_of(
        "last kill -> every worker answered",
        cells(&|x| Cell::ms_or(x.all_serving, "never")),
        Goal::AtMost(1000.0, "<= 1 s"),
    );
    t.row_of(
        "p99 latency",
        cells(&|x| Cell::ms(x.report.p99())),
        Goal::None,
    );
    t.note(
        "ck runs examples/worker.js with default settings (Node cannot send READY=1: ck sees \
         it accept); node:cluster and pm2 run ck-bench/apps/hello.js, the same handler \
         binding the port itself; the same victim sequence (by index in the sorted pids) for all",
    );
    t.note(
        "failures after one kill = failures between that kill and the next; each client has one \
         request in flight, so a victim can hold at most 8",
    );
    for (label, x) in Contender::ALL.map(Contender::label).iter().zip(o) {
        t.failure_notes(label, &x.report, 2);
    }
    t
}
