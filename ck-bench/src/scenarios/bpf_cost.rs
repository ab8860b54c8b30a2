//! The `bpf-cost` scenario: what ck's `ck_select` program costs per selection, from the
//! kernel's own accounting (`run_time_ns / run_cnt`, see [`ck_tests::bpf_stats`]), for each
//! policy and for 2, 16 and 64 workers. Wall-clock rates on a shared machine swing by 10 %
//! between runs; the kernel's figure for the program alone does not depend on the load client
//! or the workers.
//!
//! A contender per policy and worker count (and with `--against` its copy on the other build,
//! comparing two builds of the program in the same rounds), all running side by side; in each
//! of [`ROUNDS`] rounds (the order rotating) each in turn takes new connections for [`LOAD`],
//! the program's counters read before and after. Reported: per policy and worker count the
//! median of the rounds' ns per selection (with the lowest and highest), the runs counted (the
//! load's connections plus ck's canary, one a second), and with `--against` the per-round ratio
//! of the two builds. Beside them, at 16 workers, the policies that read weights with a
//! canary at 25 % judged all along (`ck reload --canary 25 --canary-by connection`): the
//! program then picks from a weighted list (and least-conn and least-queue compare load per
//! unit of weight).
//!
//! The yardstick, at each worker count: a minimal select program (`hash % n` over the same
//! socket array, see [`super::minimal_program`]) attached to a plain `--no-bpf` fleet and
//! measured the same way in the same rounds. The goals: round-robin at most
//! [`MOST_OVER_MINIMAL`] times the minimal program, every other policy at most
//! [`MOST_ABOVE_MINIMAL_NS`] above it (medians of the per-round ratio and difference).

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::bpf_stats::{self, StatsOn};
use ck_tests::load::{self, LoadSpec, Mode};
use nix::sys::socket::SockType;

use super::grid;
use super::minimal_program::Minimal;
use crate::plot::bars::{self, Bars, Group as BarGroup};
use crate::rounds::contender::{self, Fleet};
use crate::rounds::{Contender, Figures, Goal, Group, Layout, Measured, Role};
use crate::table::{Cell, Table, Unit};
use crate::{Bench, Outcome};

/// The policies, in row order.
const POLICIES: [&str; 5] = ["round-robin", "hash", "least-queue", "sticky", "least-conn"];
/// The rows measured with a canary judged (a weighted list), at [`WEIGHTED_WORKERS`]: (row,
/// policy).
const WEIGHTED: [(&str, &str); 3] = [
    ("round-robin, canary 25 %", "round-robin"),
    ("least-queue, canary 25 %", "least-queue"),
    ("least-conn, canary 25 %", "least-conn"),
];
/// The worker count of the weighted rows (their column's index in [`WORKERS`]).
const WEIGHTED_WORKERS: usize = 1;
/// The row of the minimal select program.
const MINIMAL: &str = "minimal program";
/// Round-robin per selection at most this many times the minimal program.
const MOST_OVER_MINIMAL: f64 = 1.5;
/// Every other policy per selection at most this many ns above the minimal program.
const MOST_ABOVE_MINIMAL_NS: f64 = 100.0;
/// The worker counts (64 is `--workers`' maximum).
const WORKERS: [u32; 3] = [2, 16, 64];
/// Length of one contender's load in a round.
const LOAD: Duration = Duration::from_millis(600);
/// Concurrent load connections.
const CLIENTS: usize = 16;
/// Rounds: no goal bounds a ratio, and a round takes a quarter of a minute. Many short rounds
/// and their median: a round during which other work on the machine evicted the maps and
/// sockets from the caches is an outlier, not a shift.
const ROUNDS: usize = 15;

/// The grid's column of `workers` workers.
fn column(workers: u32) -> String {
    format!("{workers} workers")
}

/// The contenders: each policy at each worker count (the setup is the count's index) and the
/// minimal program beside them, then the weighted rows.
fn contenders() -> Vec<Contender> {
    let plain = WORKERS.iter().enumerate().flat_map(|(w, workers)| {
        let minimal = Contender::no_bpf(&grid::label(&column(*workers), MINIMAL), &[]);
        POLICIES
            .iter()
            .map(move |p| {
                Contender::ck(&grid::label(&column(*workers), p), &["--policy", *p]).with_setup(w)
            })
            .chain(std::iter::once(minimal.with_setup(w)))
    });
    let weighted = WEIGHTED.iter().map(|(row, p)| {
        let label = grid::label(&column(WORKERS[WEIGHTED_WORKERS]), row);
        Contender::ck(&label, &["--policy", p]).with_setup(WEIGHTED_WORKERS)
    });
    plain.chain(weighted).collect()
}

/// A canary at 25 % judged in `ck` for the rest of the run: its `ck reload`, which returns
/// only when ck stops (the caller waits for it then), once the canary is judged.
fn hold_a_canary(ck: &mut ck_tests::ck::Ck) -> Result<std::process::Child> {
    let reload = ck_tests::ck::ck_command()
        .args(["reload", "--name", ck.name(), "--canary", "25"])
        .args(["--canary-by", "connection", "--canary-for", "1h"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting ck reload --canary")?;
    ck.wait_status("a canary judged", Duration::from_secs(30), |s| {
        s.canary.as_deref().is_some_and(|c| c.starts_with("judged"))
    })?;
    Ok(reload)
}

/// Measures every policy at every worker count and returns the table (with a bar plot).
pub fn run(bench: &Bench) -> Result<Outcome> {
    let _stats = StatsOn::enable()?;
    let plan = bench.plan("bpf-cost", ROUNDS, contenders());
    let mut fleets = Vec::new();
    let mut programs = Vec::new();
    // The minimal programs, held while their fleets run, and the canaries' `ck reload`s.
    let mut minimals = Vec::new();
    let mut reloads = Vec::new();
    for (i, c) in plan.contenders().iter().enumerate() {
        let mut fleet = c.start(bench, &format!("cost{i}"), &Group::demo(WORKERS[c.setup]))?;
        if WEIGHTED.iter().any(|(row, _)| c.label.contains(row)) {
            let ck = fleet
                .instance_mut()
                .context("bpf-cost's contenders are ck instances")?;
            reloads.push(hold_a_canary(ck)?);
        }
        let program = match c.role {
            Role::Ck => bpf_stats::program_of(ck_of(&fleet)?.name())?,
            // The yardstick is one program for every column: the measured build's (an
            // `--against` copy's fleet runs it too, its own ck being `--no-bpf`).
            _ => {
                let minimal = Minimal::attach(&bench.bin, ck_of(&fleet)?, SockType::Stream)?;
                let id = minimal.id;
                minimals.push(minimal);
                id
            }
        };
        programs.push(program);
        fleets.push(fleet);
    }
    let measured = plan.run(bench, |i, c, _| {
        measure(bench, &fleets[i], programs[i], &c.label)
    })?;
    contender::stop_all(bench, fleets)?;
    drop(minimals);
    // Each `ck reload` ended with its ck (a reload cut short by the stop exits non-zero).
    for mut reload in reloads {
        let _ = reload.wait();
    }
    let mut t = table(&measured)?;
    let plot = plot(&measured);
    t.plot_with(bench.plot_path("bpf-cost"), |path| bars::draw(path, &plot));
    Ok(measured.outcome(vec![t]))
}

/// One contender's round: new connections, the program's counters around them.
fn measure(bench: &Bench, fleet: &Fleet, program: u32, label: &str) -> Result<Figures> {
    let before = bpf_stats::read(program)?;
    let report = load::run(LoadSpec::for_duration(
        fleet.addr(),
        Mode::NewConnection,
        CLIENTS,
        bench.span(LOAD),
    ));
    let after = bpf_stats::read(program)?;
    let (runs, ns) = before.until(after);
    let Some(ns) = ns.filter(|_| runs >= report.ok && report.ok > 0) else {
        bail!(
            "{label}: the kernel counted {runs} run(s) of {} for {} answered connections: are \
             BPF run-time statistics working?",
            bpf_stats::PROGRAM,
            report.ok
        );
    };
    bench.progress(format_args!("bpf-cost: {label}: {ns:.1} ns ({runs} runs)"));
    let mut f = Figures::new();
    f.set("ns", ns).set("runs", runs as f64);
    Ok(f)
}

/// The `ck run` of a fleet.
fn ck_of(fleet: &Fleet) -> Result<&ck_tests::ck::Ck> {
    fleet
        .instance()
        .context("bpf-cost's contenders are ck instances")
}

/// The table: a row per policy, a column per worker count (and `--against` copy).
fn table(m: &Measured) -> Result<Table> {
    let counts: Vec<String> = WORKERS.iter().map(|w| column(*w)).collect();
    let counts: Vec<&str> = counts.iter().map(String::as_str).collect();
    let columns = grid::columns(m, &counts);
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut t = Layout::with_columns(
        m,
        &format!(
            "bpf-cost: ns per selection of the ck_select program (kernel run_time_ns / \
             run_cnt), new connections for {} ms per contender and round",
            LOAD.as_millis()
        ),
        &names,
    );
    // The ns themselves are details (printed and recorded): BENCHMARKS.md shows each policy
    // against the minimal program (`yardstick`), within its word limit.
    for policy in POLICIES {
        t.row(policy, grid::medians(m, &columns, policy, "ns", Unit::Ns))
            .detail();
        t.row(
            &format!("{policy}: runs counted"),
            grid::medians(m, &columns, policy, "runs", Unit::Count),
        )
        .detail();
        if let Some(cells) = grid::against(m, &columns, policy, "ns") {
            t.row(&format!("{policy}: this build / the other"), cells);
        }
    }
    yardstick(&mut t, m, &columns);
    // Details too: printed and recorded, left out of BENCHMARKS.md (its word limit).
    for (row, _) in WEIGHTED {
        t.row(row, grid::medians(m, &columns, row, "ns", Unit::Ns))
            .detail();
        if let Some(cells) = grid::against(m, &columns, row, "ns") {
            t.row(&format!("{row}: this build / the other"), cells);
        }
    }
    t.note(format!(
        "{}: with a canary at 25 % judged all along (ck reload --canary 25 --canary-by \
         connection), its 4 workers beside the 16: the program picks from a weighted list",
        WEIGHTED.map(|(row, _)| row).join(", ")
    ));
    t.note(
        "runs = selections the kernel counted in the round: the load's new connections plus \
         ck's canary (one a second); the time includes the kernel's own timing of each run",
    );
    t.finish()
}

/// The minimal program's row, and each policy held to it: round-robin by the per-round ratio,
/// the others by the per-round difference (a detail row each), judged on the measured build's
/// columns through the one of them furthest above it in each column (BENCHMARKS.md's word
/// limit: one line for the four).
fn yardstick(t: &mut Layout<'_>, m: &Measured, columns: &[String]) {
    let own: Vec<&str> = columns
        .iter()
        .filter(|c| !c.contains(" @"))
        .map(String::as_str)
        .collect();
    t.row(MINIMAL, grid::medians(m, columns, MINIMAL, "ns", Unit::Ns));
    let to_minimal = |policy: &str, ratio: bool| -> Vec<Cell> {
        columns
            .iter()
            .map(|c| {
                let (over, under) = (grid::contender(c, policy), grid::contender(c, MINIMAL));
                match ratio {
                    true => Unit::Ratio.stat(m.ratio(&over, &under, "ns")),
                    false => Unit::Ns.stat(m.difference(&over, &under, "ns")),
                }
            })
            .collect()
    };
    t.row(
        &format!("round-robin / {MINIMAL}"),
        to_minimal("round-robin", true),
    )
    .goal(Goal::at_most(MOST_OVER_MINIMAL, Unit::Ratio).of(&own));
    let others: Vec<(&str, Vec<Cell>)> = POLICIES
        .iter()
        .filter(|p| **p != "round-robin")
        .map(|p| (*p, to_minimal(p, false)))
        .collect();
    // Per column, the policy furthest above the minimal program, named beside its figure.
    let most: Vec<Cell> = (0..columns.len())
        .map(|i| {
            let furthest = others
                .iter()
                .filter_map(|(policy, cells)| Some((*policy, &cells[i], cells[i].num?)))
                .max_by(|a, b| a.2.total_cmp(&b.2));
            match furthest {
                Some((policy, cell, num)) => Cell {
                    text: format!("{} {policy}", cell.text),
                    num: Some(num),
                },
                None => Cell::text("-"),
            }
        })
        .collect();
    t.row(&format!("the others - {MINIMAL}, the most"), most)
        .goal(Goal::at_most(MOST_ABOVE_MINIMAL_NS, Unit::Ns).of(&own));
    for (policy, cells) in others {
        t.row(&format!("{policy} - {MINIMAL}"), cells).detail();
    }
}

/// Bars per worker count: one per policy (and build), the median, dots for the rounds.
fn plot(m: &Measured) -> Bars {
    let counts: Vec<String> = WORKERS.iter().map(|w| column(*w)).collect();
    let counts: Vec<&str> = counts.iter().map(String::as_str).collect();
    let columns = grid::columns(m, &counts);
    let rev = columns
        .iter()
        .find_map(|c| c.split_once(" @").map(|(_, r)| r));
    let keys: Vec<String> = POLICIES
        .iter()
        .flat_map(|p| std::iter::once(p.to_string()).chain(rev.map(|r| format!("{p} @{r}"))))
        .collect();
    let groups = columns
        .iter()
        .filter(|c| !c.contains(" @"))
        .map(|c| {
            let labels: Vec<String> = POLICIES
                .iter()
                .flat_map(|p| {
                    std::iter::once(grid::label(c, p))
                        .chain(rev.map(|r| grid::contender(&format!("{c} @{r}"), p)))
                })
                .collect();
            BarGroup {
                label: c.clone(),
                values: labels
                    .iter()
                    .map(|l| m.stat(l, "ns").map_or(f64::NAN, |s| s.median))
                    .collect(),
                runs: labels
                    .iter()
                    .map(|l| m.values(l, "ns").into_iter().flatten().collect())
                    .collect(),
            }
        })
        .collect();
    Bars {
        title: format!(
            "ck_select: ns per selection (kernel accounting), median of {} rounds (dots: each \
             round)",
            m.rounds.len()
        ),
        y_desc: "ns per selection".into(),
        keys,
        groups,
        lines: Vec::new(),
        decimals: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_table_has_a_row_per_policy_and_compares_two_builds_round_by_round() {
        let against = Some(("abc", "/old/ck".as_ref()));
        let plan = Plan::new("bpf-cost", ROUNDS, contenders(), "/ck".as_ref(), against);
        assert_eq!(plan.contenders().len(), 42);
        let ns = |label: &str, r: usize| {
            let base = if label.contains(" @") { 250.0 } else { 200.0 };
            let workers: f64 = label.split(' ').next().unwrap().parse().unwrap();
            // least-queue 20 ns above the other policies.
            let queue = if label.contains("least-queue") {
                20.0
            } else {
                0.0
            };
            match label.contains(MINIMAL) {
                true => 140.0 + r as f64,
                false => base + workers + queue + r as f64,
            }
        };
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let f = BTreeMap::from([
                        ("ns".to_string(), ns(&c.label, r)),
                        ("runs".to_string(), 3001.0),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 15.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let t = table(&m).unwrap();
        assert_eq!(
            t.columns,
            [
                "2 workers",
                "2 workers @abc",
                "16 workers",
                "16 workers @abc",
                "64 workers",
                "64 workers @abc"
            ]
        );
        let row = |name: &str| t.rows.iter().find(|r| r.metric == name).unwrap();
        assert_eq!(row("hash").cells[0].text, "209.0 ns (202.0-216.0)");
        assert_eq!(row("hash").cells[5].text, "321.0 ns (314.0-328.0)");
        assert_eq!(
            row("hash: this build / the other").cells[4].text,
            "0.84 (0.84-0.85)"
        );
        assert_eq!(row("hash: this build / the other").cells[5].text, "");
        // The yardstick: round-robin by ratio (2 workers: 209 / 147), the others by difference.
        assert_eq!(row(MINIMAL).cells[0].text, "147.0 ns (140.0-154.0)");
        let rr = row("round-robin / minimal program");
        assert_eq!(rr.cells[0].text, "1.42 (1.40-1.44)");
        let goal = rr.goal.as_ref().unwrap();
        assert_eq!(goal.columns, ["2 workers", "16 workers", "64 workers"]);
        // 64 workers: 271 / 147.
        assert_eq!(goal.met, Some(false));
        let lq = row("least-queue - minimal program");
        assert_eq!(lq.cells[0].text, "82.0 ns");
        assert_eq!(lq.cells[1].text, "132.0 ns");
        assert!(lq.detail);
        // least-queue is the furthest above: 82 ns at 2 workers, 144 at 64.
        let most = row("the others - minimal program, the most");
        assert_eq!(most.cells[0].text, "82.0 ns least-queue");
        assert_eq!(most.cells[4].text, "144.0 ns least-queue");
        assert_eq!(most.goal.as_ref().unwrap().met, Some(false));
        let bars = plot(&m);
        assert_eq!(bars.keys.len(), 10);
        assert_eq!(bars.groups.len(), 3);
        // Round-robin of the other build, 64 workers.
        assert_eq!(bars.groups[2].values[1], 321.0);
        assert_eq!(bars.groups[2].runs[1].len(), ROUNDS);
    }
}
