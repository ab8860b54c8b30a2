//! The `cork` scenario: the matrix of the SO_REUSEPORT + TCP_CORK article, reproduced with the
//! same kind of server (`examples/cork-server.c`: one connection at a time per process, four
//! small writes per response) under ck: 1 vs 4 workers, cork off vs on (and TCP_NODELAY for
//! comparison), a wrk-like keep-alive load of [`CONNECTIONS`] connections for [`DURATION`] per
//! setup and round. Beside them, as the control pair, the corked server with 4 workers under
//! `ck --no-bpf` and with no supervisor (each binding the port with `SO_REUSEPORT`). Reported:
//! requests/s (median of the rounds) and requests timed out per setup (the mean latency is
//! recorded with every round); ratios only between
//! setups measured in the same rounds (cork over no cork, 4 workers over 1); the article's
//! figures, from another machine, stand in their own column as the article's.

use std::time::Duration;

use anyhow::{Context as _, Result};
use ck_tests::load::{self, LoadSpec, Mode};

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{App, Contender, Control, Figures, Group, Layout, Measured};
use crate::table::{Cell, Table, Unit};
use crate::{Bench, Outcome};

/// Keep-alive connections of the load (wrk -c100).
const CONNECTIONS: usize = 100;
/// Length of each load.
const DURATION: Duration = Duration::from_secs(4);
/// Limit of one request (wrk's default timeout is 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Rounds: no goal, and a round (eight loads) takes about 40 s: 5 give a median and a range.
const ROUNDS: usize = 5;
/// The article's column.
const ARTICLE: &str = "the article (another machine), req/s";

/// One cell of the matrix.
struct Setup {
    /// Its row.
    label: &'static str,
    workers: u32,
    /// The server's environment: which socket option.
    env: (&'static str, &'static str),
    /// The article's requests/s, from its machine.
    article: Option<f64>,
    /// ck with its program, `--no-bpf`, or no supervisor.
    role: Role,
}

/// Who runs a setup's workers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Ck,
    NoBpf,
    Bare,
}

const SETUPS: [Setup; 8] = [
    Setup {
        label: "1 worker, no cork",
        workers: 1,
        env: ("CORK", "0"),
        article: Some(22.46),
        role: Role::Ck,
    },
    Setup {
        label: "4 workers, no cork",
        workers: 4,
        env: ("CORK", "0"),
        article: Some(88.77),
        role: Role::Ck,
    },
    Setup {
        label: "1 worker, TCP_CORK",
        workers: 1,
        env: ("CORK", "1"),
        article: Some(44_645.9),
        role: Role::Ck,
    },
    Setup {
        label: "4 workers, TCP_CORK",
        workers: 4,
        env: ("CORK", "1"),
        article: Some(143_654.0),
        role: Role::Ck,
    },
    Setup {
        label: "1 worker, TCP_NODELAY",
        workers: 1,
        env: ("NODELAY", "1"),
        article: None,
        role: Role::Ck,
    },
    Setup {
        label: "4 workers, TCP_NODELAY",
        workers: 4,
        env: ("NODELAY", "1"),
        article: None,
        role: Role::Ck,
    },
    Setup {
        label: "4 workers, TCP_CORK, ck --no-bpf",
        workers: 4,
        env: ("CORK", "1"),
        article: None,
        role: Role::NoBpf,
    },
    Setup {
        label: "4 workers, TCP_CORK, no supervisor",
        workers: 4,
        env: ("CORK", "1"),
        article: None,
        role: Role::Bare,
    },
];

/// The ratios shown, each between two setups of the same rounds: (row, over, under).
const RATIOS: [(&str, usize, usize); 3] = [
    ("1 worker: TCP_CORK / no cork", 2, 0),
    ("4 workers: TCP_CORK / no cork", 3, 1),
    ("TCP_CORK: 4 workers / 1 worker", 3, 2),
];

/// The contenders, one per setup.
fn contenders() -> Vec<Contender> {
    SETUPS
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let c = match s.role {
                Role::Ck => Contender::ck(s.label, &[]),
                Role::NoBpf => Contender::no_bpf(s.label, &[]),
                Role::Bare => Contender::bare().labelled(s.label),
            };
            c.with_setup(i)
        })
        .collect()
}

/// The control pair: the corked server under `--no-bpf` / with no supervisor.
fn control() -> Control {
    Control::pair(SETUPS[6].label, SETUPS[7].label, &[("rate", "req/s")])
}

/// The workers of setup `s`: the cork server with its socket option (with no supervisor,
/// binding the port with `SO_REUSEPORT`).
fn group(s: &Setup, server: &str) -> Group {
    Group {
        workers: s.workers,
        udp: false,
        app: App::Program {
            argv: vec![server.to_string()],
            env: vec![(s.env.0.to_string(), s.env.1.to_string())],
            bare_env: vec![("REUSEPORT".to_string(), "1".to_string())],
        },
    }
}

/// Runs the matrix.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let server = ck_tests::cserver::cork_server();
    let server = server
        .to_str()
        .context("the cork server's path is not UTF-8")?;
    let plan = bench.plan("cork", ROUNDS, contenders()).control(control());
    let mut fleets = Vec::new();
    for (i, c) in plan.contenders().iter().enumerate() {
        let setup = &SETUPS[c.setup];
        fleets.push(c.start(bench, &format!("cork{i}"), &group(setup, server))?);
    }
    let measured = plan.run(bench, |i, c, _| measure(bench, &fleets[i], &c.label))?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// A keep-alive load on `fleet`, like wrk -c100 (no retries).
fn measure(bench: &Bench, fleet: &Fleet, label: &str) -> Result<Figures> {
    let mut spec = LoadSpec::for_duration(
        fleet.addr(),
        Mode::KeepAlive,
        CONNECTIONS,
        bench.span(DURATION),
    );
    spec.timeout = REQUEST_TIMEOUT;
    spec.retry = false;
    let report = load::run(spec);
    bench.progress(format_args!("cork: {label}: {}", report.summary()));
    let mut f = Figures::new();
    f.set("rate", report.rps())
        .set("mean_ms", report.latency.mean() / 1000.0)
        .set("timeouts", report.timeout as f64);
    Ok(f)
}

/// The table: a row per setup (and `--against` copy), then the ratios between setups.
fn table(m: &Measured) -> Result<Table> {
    const RATE: &str = "req/s";
    const TIMEOUTS: &str = "timed out, all rounds";
    let against = m.plan.contenders().iter().any(|c| c.build.is_some());
    let mut columns = vec![RATE, TIMEOUTS];
    if against {
        columns.push("req/s, this build / the other");
    }
    columns.push(ARTICLE);
    let mut t = Layout::with_columns(
        m,
        &format!(
            "cork: examples/cork-server.c (one connection at a time per process, four small \
             writes per response), keep-alive load of {CONNECTIONS} connections for {} s per \
             setup and round, no retry, {} s request timeout",
            DURATION.as_secs(),
            REQUEST_TIMEOUT.as_secs()
        ),
        &columns,
    );
    let rate = Unit::Rate("req/s");
    for c in m.plan.contenders() {
        let l = c.label.as_str();
        let setup = &SETUPS[c.setup];
        let mut cells = vec![
            rate.stat(m.stat(l, "rate")),
            m.total(l, "timeouts")
                .map_or_else(|| Cell::text("-"), |n| Unit::Count.cell(n)),
        ];
        if against {
            cells.push(m.against_of(l).map_or_else(
                || Cell::text(""),
                |copy| Unit::Ratio.stat(m.ratio(l, &copy, "rate")),
            ));
        }
        let article = setup.article.filter(|_| c.build.is_none());
        cells.push(article.map_or_else(|| Cell::text(""), |r| rate.cell(r)));
        t.row(l, cells);
        // BENCHMARKS.md shows the article's matrix; TCP_NODELAY and the control pair are in
        // the record.
        if setup.article.is_none() {
            t.detail();
        }
    }
    for (row, over, under) in RATIOS {
        let (a, b) = (&SETUPS[over], &SETUPS[under]);
        let mut cells = vec![
            Unit::Ratio.stat(m.ratio(a.label, b.label, "rate")),
            Cell::text(""),
        ];
        if against {
            cells.push(Cell::text(""));
        }
        let article = a.article.zip(b.article).map(|(x, y)| x / y);
        cells.push(article.map_or_else(|| Cell::text(""), |r| Unit::Ratio.cell(r)));
        t.row(row, cells);
    }
    t.note(
        "the article's column is its own figures, measured on another machine: compare only \
         the ratios within a column",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn ratios_are_only_taken_within_a_run_and_the_article_stands_apart() {
        let plan = Plan::new("cork", ROUNDS, contenders(), "/ck".as_ref(), None).control(control());
        let rates = [
            23.0, 92.0, 28_000.0, 28_000.0, 20_000.0, 22_000.0, 28_000.0, 28_100.0,
        ];
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .zip(rates)
                .map(|(c, r)| (c.label.clone(), BTreeMap::from([("rate".to_string(), r)])))
                .collect(),
            seconds: 40.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        assert_eq!(
            m.void, None,
            "28000 / 28100 is within the control pair's bounds"
        );
        let t = table(&m).unwrap();
        let row = |name: &str| t.rows.iter().find(|r| r.metric == name).unwrap();
        assert_eq!(row("4 workers, TCP_CORK").cells[0].text, "28000 req/s");
        assert_eq!(row("4 workers, TCP_CORK").cells[2].text, "143654 req/s");
        let scaling = row("TCP_CORK: 4 workers / 1 worker");
        assert_eq!(scaling.cells[0].text, "1.00");
        assert_eq!(scaling.cells[2].text, "3.22");
        assert!(t.columns[2].contains("another machine"));
        assert!(t.rows.iter().all(|r| r.goal.is_none()));
    }
}
