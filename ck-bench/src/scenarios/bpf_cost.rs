//! The `bpf-cost` table (also the first table of `overhead`): what ck's `ck_select` program
//! costs per selection, from the kernel's own accounting (`run_time_ns / run_cnt`, see
//! [`ck_tests::bpf_stats`]), for each policy and for 2, 16 and 64 workers. Wall-clock rates on a
//! shared machine swing by 10 % between runs; the kernel's figure for the program alone does
//! not depend on the load client or the workers.
//!
//! Per worker count, one instance per policy runs side by side (and as many of the `--against`
//! binary, to compare two builds of the program in the same rounds); in each of [`ROUNDS`]
//! rounds (taking turns), [`CONNECTIONS`] new connections go to each, and the program's
//! counters are read before and after. Reported: the median of the rounds' ns per selection,
//! every round under the table, and the runs counted (the load's connections plus ck's canary,
//! one a second).

use std::path::Path;

use anyhow::{Result, bail};
use ck_tests::load::{self, LoadSpec, Mode};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::plot::bars::{self, Bars, Group};
use crate::table::{Cell, Goal, Table, median};
use ck_tests::bpf_stats::{self, StatsOn};

/// The policies, in table order.
const POLICIES: [&str; 5] = ["round-robin", "hash", "least-queue", "sticky", "least-conn"];
/// The worker counts (64 is `--workers`' maximum).
const WORKERS: [u32; 3] = [2, 16, 64];
/// New connections per round and instance.
const CONNECTIONS: u64 = 3_000;
/// Concurrent load connections.
const CLIENTS: usize = 16;
/// Rounds per instance. Many short rounds and their median: a round during which other work
/// on the machine evicted the maps and sockets from the caches is an outlier, not a shift.
const ROUNDS: usize = 15;

/// One policy of one build at one worker count: ns per selection and runs counted, per round.
#[derive(Debug, Default, Clone)]
struct Cost {
    ns: Vec<f64>,
    runs: Vec<u64>,
}

impl Cost {
    /// The median of the rounds.
    fn median_ns(&self) -> f64 {
        median(&self.ns)
    }
}

/// `costs[build][workers][policy]`: build 0 is the measured ck, build 1 the `--against` one.
type Costs = Vec<Vec<Vec<Cost>>>;

/// Measures every policy at every worker count and returns the table (with a bar plot).
pub fn run(bench: &Bench) -> Result<Table> {
    let _stats = StatsOn::enable()?;
    let against = bench.against.as_ref().map(|a| a.bin.as_path());
    let bins: Vec<&Path> = [Some(bench.bin.as_path()), against]
        .into_iter()
        .flatten()
        .collect();
    let mut costs: Costs = bins.iter().map(|_| Vec::new()).collect();
    for workers in WORKERS {
        for (b, cost) in measure(bench, &bins, workers)?.into_iter().enumerate() {
            costs[b].push(cost);
        }
    }
    let labels = ["", ", --against"];
    let mut t = table(&costs, &labels);
    if let Some(against) = &bench.against {
        t.note(format!(
            "--against = {} ({})",
            against.rev,
            against.bin.display()
        ));
    }
    let plot = plot(&costs, &labels);
    t.plot_with(bench.plot_path("bpf-cost"), |path| bars::draw(path, &plot));
    Ok(t)
}

/// The table: one row per policy (and build), one column per worker count.
fn table(costs: &Costs, labels: &[&str]) -> Table {
    let columns: Vec<String> = WORKERS.iter().map(|w| format!("{w} workers")).collect();
    let mut t = Table::with_columns(
        &format!(
            "bpf-cost: ns per selection of the ck_select program (kernel run_time_ns / run_cnt), \
             {CONNECTIONS} new connections per round, {ROUNDS} rounds, median shown"
        ),
        &columns.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    t.ratio_between(WORKERS.len() - 1, 0);
    for (p, policy) in POLICIES.iter().enumerate() {
        for (b, build) in costs.iter().enumerate() {
            t.row_of(
                &format!("{policy}{}", labels[b]),
                build.iter().map(|w| ns_cell(w[p].median_ns())).collect(),
                Goal::None,
            );
        }
        if let [now, before] = costs.as_slice() {
            // Text only, so that the ratio column stays empty on this row.
            let ratios = now
                .iter()
                .zip(before)
                .map(|(n, b)| Cell::text(&format!("{:.2}", n[p].median_ns() / b[p].median_ns())));
            t.row_of(
                &format!("{policy}: ck / --against"),
                ratios.collect(),
                Goal::None,
            );
        }
    }
    for (b, build) in costs.iter().enumerate() {
        for (w, workers) in WORKERS.iter().enumerate() {
            for (p, policy) in POLICIES.iter().enumerate() {
                let c = &build[w][p];
                let rounds: Vec<String> =
                    c.ns.iter()
                        .zip(&c.runs)
                        .map(|(ns, runs)| format!("{ns:.1} ns ({runs} runs)"))
                        .collect();
                t.note(format!(
                    "{policy}{}, {workers} workers: {}",
                    labels[b],
                    rounds.join(", ")
                ));
            }
        }
    }
    t.note(
        "runs = selections the kernel counted in the round: the load's new connections plus \
         ck's canary (one a second); the time includes the kernel's own timing of each run",
    );
    if costs.len() > 1 {
        t.note("ck / --against = the median of the rounds' ratios (each round measures both)");
    }
    t
}

/// Bars per worker count: one per policy (and build), dots for the rounds.
fn plot(costs: &Costs, labels: &[&str]) -> Bars {
    let keys = POLICIES
        .iter()
        .flat_map(|p| (0..costs.len()).map(move |b| format!("{p}{}", labels[b])))
        .collect();
    let groups = WORKERS
        .iter()
        .enumerate()
        .map(|(w, workers)| {
            let cells = || {
                POLICIES
                    .iter()
                    .enumerate()
                    .flat_map(|(p, _)| costs.iter().map(move |b| &b[w][p]))
            };
            Group {
                label: format!("{workers} workers"),
                values: cells().map(Cost::median_ns).collect(),
                runs: cells().map(|c| c.ns.clone()).collect(),
            }
        })
        .collect();
    Bars {
        title: "ck_select: ns per selection (kernel accounting), median of the rounds (dots: \
                each round)"
            .into(),
        y_desc: "ns per selection".into(),
        keys,
        groups,
        lines: Vec::new(),
        decimals: 0,
    }
}

/// Starts one instance per policy of each of `bins` with `workers` workers and measures them
/// in turn; returns `[bin][policy]`.
fn measure(bench: &Bench, bins: &[&Path], workers: u32) -> Result<Vec<Vec<Cost>>> {
    // Policy by policy, the builds one after the other: a build's round and the other's of the
    // same policy are measured back to back.
    let mut instances = Vec::new();
    for (p, policy) in POLICIES.iter().enumerate() {
        for (b, bin) in bins.iter().enumerate() {
            let inst = Instance::start(
                bin,
                &bench.log_dir,
                &format!("cost{b}-{policy}-{workers}"),
                Variant::Ck,
                workers,
                &["--policy", policy],
            )?;
            instances.push((b, p, inst));
        }
    }
    let mut programs = Vec::new();
    for (_, _, inst) in &mut instances {
        inst.wait_ready(workers as usize)?;
        programs.push(bpf_stats::program_of(inst.name())?);
    }
    let mut costs = vec![vec![Cost::default(); POLICIES.len()]; bins.len()];
    for round in 1..=ROUNDS {
        for ((b, p, inst), program) in instances.iter().zip(&programs) {
            bench.progress(format_args!(
                "bpf-cost: {}{} with {workers} workers, round {round}/{ROUNDS}",
                POLICIES[*p],
                if *b == 0 { "" } else { " (--against)" }
            ));
            let before = bpf_stats::read(*program)?;
            let report = load::run(LoadSpec::for_requests(
                inst.addr(),
                Mode::NewConnection,
                CLIENTS,
                CONNECTIONS,
            ));
            let after = bpf_stats::read(*program)?;
            let (runs, ns) = before.until(after);
            let Some(ns) = ns.filter(|_| runs >= report.ok) else {
                bail!(
                    "the kernel counted {runs} run(s) of {} for {} answered connections: are \
                     BPF run-time statistics working?",
                    bpf_stats::PROGRAM,
                    report.ok
                );
            };
            costs[*b][*p].ns.push(ns);
            costs[*b][*p].runs.push(runs);
        }
    }
    for (_, _, inst) in instances {
        bench.report_log(&inst);
        inst.stop()?;
    }
    Ok(costs)
}

/// A cost in ns.
pub(super) fn ns_cell(ns: f64) -> Cell {
    Cell {
        text: format!("{ns:.1} ns"),
        num: Some(ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(ns: f64) -> Cost {
        Cost {
            ns: vec![ns, ns + 10.0, ns - 10.0],
            runs: vec![10_001; 3],
        }
    }

    #[test]
    fn table_compares_two_builds() {
        let build = |base: f64| {
            WORKERS
                .iter()
                .map(|w| {
                    (0..POLICIES.len())
                        .map(|p| cost(base + f64::from(*w) + p as f64))
                        .collect()
                })
                .collect::<Vec<Vec<Cost>>>()
        };
        let costs = vec![build(200.0), build(250.0)];
        let text = table(&costs, &["", ", --against"]).render();
        for line in [
            "round-robin                 |  202.0 ns |   216.0 ns |   264.0 ns |  1.31 |",
            "round-robin, --against      |  252.0 ns |   266.0 ns |   314.0 ns |  1.25 |",
            "round-robin: ck / --against |      0.80 |       0.81 |       0.84 |     - |",
        ] {
            assert!(text.contains(line), "no {line:?} in {text}");
        }
        assert!(
            text.contains("least-queue, 64 workers: 266.0 ns (10001 runs), 276.0 ns"),
            "{text}"
        );
        let bars = plot(&costs, &["", ", --against"]);
        assert_eq!(bars.keys.len(), 10);
        // Round-robin of the --against build, 64 workers.
        assert_eq!(bars.groups[2].values[1], 314.0);
    }
}
