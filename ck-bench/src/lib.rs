//! `ck-bench <scenario>` (run by `cargo xtask bench`): measures ck (with its BPF program) against the plain
//! `SO_REUSEPORT` baseline (`ck run --no-bpf`) with the built-in demo worker, driving load with
//! the in-repo load client (`ck_tests::load`), and prints one table per scenario, with the
//! paths of its SVG plots (written under `target/bench/`, and copied to `--save DIR`).
//!
//! Every instance gets its own `--name` and port on 127.0.0.1, its log goes to a file under
//! one directory per invocation, and it is stopped (killed, if need be) before the next one
//! starts. Each scenario is bounded in time; `all` takes about 18 minutes (`upgrade` about 10 s, `ready-slow` about 1 minute). Long steps print a
//! progress line on stderr ([`Bench::progress`]).
//!
//! With `--record` the run is also written to `docs/bench/runs/` as data (`record.rs`), its
//! plots are copied to `docs/bench/`, and BENCHMARKS.md's tables are drawn again from the
//! latest record of each scenario (`summary.rs`; `cargo xtask bench summary [--check]` does
//! only that).

mod bare;
mod instance;
mod paths;
mod plot;
mod record;
mod scenarios;
mod summary;
mod table;

pub use paths::{target_dir, workspace_root};
use scenarios::{
    bpf_cost, chaos, conn_count, cork, dns, footprint, long_lived, overhead, quic, quic_stacks,
    ready_slow, recovery, recovery_node, reload, spread, stall, sticky, supervisor_cpu, survive,
    udp_cost, udp_rate, upgrade,
};

use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};

use ck_tests::machine::{load_text, machine_line};
use record::{Machine, Record, ScenarioRun, Tree};
use table::Table;

/// What to measure.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// SIGKILL 2 of 3 workers under load: failed requests, time until every slot serves again;
    /// with the demo worker (ck vs baseline), then with the Node hello app (ck, --no-bpf,
    /// node:cluster, pm2).
    Recovery,
    /// `ck reload` under load: p99 latency and failed requests, steady vs during the reload.
    Reload,
    /// `ck upgrade` under load: failed requests, p99 steady vs during upgrades, how long the
    /// control socket is unavailable per upgrade; then `--survive-supervisor`: kill -9 and
    /// take-back under load.
    Upgrade,
    /// Keep-alive requests/s and new connections/s, ck vs baseline, alternating runs; first the
    /// BPF program's cost per selection (the `bpf-cost` table).
    Overhead,
    /// Only the BPF program's cost per selection, from the kernel's own accounting, per policy
    /// and worker count (part of `overhead`).
    BpfCost,
    /// Supervisor RSS, start to first answer, idle shutdown time.
    Footprint,
    /// Open connections counted in the kernel: the counting program's cost per state change
    /// beside the selection program's, and the counts' exactness (held, closed, drift).
    ConnCount,
    /// Share of new connections per worker (3 workers), per policy.
    Spread,
    /// Latency with one of 4 workers stalling 200 ms every second, per policy.
    Stall,
    /// Session affinity: clients (source addresses) that change worker when one of 4 leaves,
    /// and that keep it over 1,000 connections; sticky beside hash and round-robin.
    Sticky,
    /// Long-lived connections over a fleet that grows (2 workers, scale to 4) and churns:
    /// max/mean open connections per worker, least-conn beside round-robin, hash and plain.
    LongLived,
    /// The supervisor's own CPU under ~10 k new connections/s (2 demo workers): round-robin,
    /// least-queue and --no-bpf in one run.
    SupervisorCpu,
    /// A random worker of 4 SIGKILLed every 0.5 s for 60 s: ck, --no-bpf, node:cluster, pm2.
    Chaos,
    /// The SO_REUSEPORT + TCP_CORK article's matrix with its kind of C server under ck.
    Cork,
    /// `ck reload` of a server that boots in 10 s and says nothing (waits in poll): p99 during
    /// the roll vs steady, failed requests, how each worker was taken as ready.
    ReadySlow,
    /// HTTP/3 connections (quinn + h3) held open through 5 rolls and a scale up and down, with
    /// and without client migration, and a worker's kill -9: broken connections under
    /// --udp-mode quic, flow and plain SO_REUSEPORT; ngtcp2's client moving to a new port; an
    /// unmodified ngtcp2 server adopted; and the datagram rate of many small flows, ck beside
    /// plain.
    Quic,
    /// dnsperf at a fixed rate through 10 rolls of 4 DNS servers: queries lost under
    /// --udp-mode stateless, plain SO_REUSEPORT, and an adopted dnsmasq.
    Dns,
    /// ns per datagram of ck's UDP program in each --udp-mode (kernel accounting) beside a
    /// minimal hash % n program on a plain group, under HTTP/3 connections and small flows.
    UdpCost,
    /// Every scenario, in the order above.
    All,
    /// Measures nothing: draws BENCHMARKS.md's tables again from the latest record of each
    /// scenario in docs/bench/runs (`--check`: fails if the file differs instead).
    Summary,
}

impl Scenario {
    /// The scenarios `self` stands for.
    fn expand(self) -> Vec<Scenario> {
        match self {
            Scenario::All => vec![
                Scenario::Recovery,
                Scenario::Reload,
                Scenario::Upgrade,
                Scenario::Overhead,
                Scenario::Footprint,
                Scenario::ConnCount,
                Scenario::Spread,
                Scenario::Stall,
                Scenario::Sticky,
                Scenario::LongLived,
                Scenario::SupervisorCpu,
                Scenario::Chaos,
                Scenario::Cork,
                Scenario::ReadySlow,
                Scenario::Quic,
                Scenario::UdpCost,
                Scenario::Dns,
            ],
            Scenario::Summary => vec![],
            one => vec![one],
        }
    }

    /// The scenario's name on the command line (`supervisor-cpu`), as records and
    /// BENCHMARKS.md's markers name it.
    fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |v| v.get_name().to_string())
    }
}

/// What every scenario needs: the ck binary, where instance logs and plots go, the clock of
/// the progress lines.
#[derive(Debug, Clone)]
pub struct Bench {
    /// The release `ck` binary.
    pub bin: PathBuf,
    /// Directory of this invocation's ck logs.
    pub log_dir: PathBuf,
    /// Another ck binary whose BPF program `bpf-cost` measures beside `bin`'s (`--against`).
    pub against: Option<PathBuf>,
    /// Directory the plots are written to.
    results: PathBuf,
    /// When the invocation started.
    started: Instant,
}

impl Bench {
    /// Where the plot `name` (e.g. `reload-latency`) goes: `<results>/<name>.svg`.
    pub fn plot_path(&self, name: &str) -> PathBuf {
        self.results.join(format!("{name}.svg"))
    }

    /// Prints one progress line on stderr: the time since the invocation started and `what`
    /// (scenario, contender, run n of m), so that a long bench shows it is alive.
    pub fn progress(&self, what: impl Display) {
        eprintln!("{}", progress_line(self.started.elapsed(), what));
    }

    /// Prints the complaints (WARN/ERROR lines) in an instance's log, if any.
    fn report_log(&self, inst: &instance::Instance) {
        let complaints = inst.complaints();
        if complaints.is_empty() {
            return;
        }
        eprintln!(
            "bench: {} WARN/ERROR line(s) in {}:",
            complaints.len(),
            inst.log().display()
        );
        for line in complaints.iter().take(10) {
            eprintln!("bench:   {line}");
        }
    }
}

/// Where `cargo xtask bench` puts its output, and what else it compares.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory of this run's plots (`target/bench`).
    pub results: PathBuf,
    /// A directory to copy the plots to as well (`--save`), e.g. `docs/bench`.
    pub save: Option<PathBuf>,
    /// Another ck binary for `bpf-cost` to measure side by side (`--against`).
    pub against: Option<PathBuf>,
    /// Write the run to `docs/bench/runs/` and draw BENCHMARKS.md's tables again (`--record`).
    pub record: bool,
}

/// `ck-bench summary [--check]`: draws BENCHMARKS.md's tables from the records
/// (`check`: fails, naming the fix, if the file is not what the records give).
pub fn summary(check: bool) -> Result<()> {
    summary::run(paths::workspace_root()?, check)
}

/// Runs `scenario` with the ck binary `bin` and prints the machine, then each table with the
/// paths of its plots; with `output.record`, writes the run's record and draws BENCHMARKS.md's
/// tables again (also when a scenario fails: the ones done are recorded).
pub fn run(scenario: Scenario, bin: &Path, output: &Options) -> Result<()> {
    let started = Instant::now();
    let now = SystemTime::now();
    let stamp = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let log_dir = std::env::temp_dir().join(format!("ck-bench-{stamp}"));
    let root = paths::workspace_root()?;
    // A recorded run's plots go where BENCHMARKS.md shows them.
    let save = output
        .save
        .clone()
        .or_else(|| output.record.then(|| root.join("docs/bench")));
    for dir in [Some(&log_dir), Some(&output.results), save.as_ref()]
        .into_iter()
        .flatten()
    {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let bench = Bench {
        bin: bin.to_path_buf(),
        log_dir,
        against: output.against.clone(),
        results: output.results.clone(),
        started,
    };

    let tree = Tree::now();
    let mut record = Record {
        date: record::rfc3339(now),
        commit: tree.commit.clone(),
        dirty: tree.dirty(),
        changed: tree.changed,
        machine: Machine::here(),
        load_before: record::load_average(),
        load_after: None,
        scenarios: Vec::new(),
    };
    println!("{}", machine_line());
    println!("ck: {}", bench.bin.display());
    println!("ck logs: {}", bench.log_dir.display());
    println!("plots: {}\n", bench.results.display());
    let mut failed = None;
    for one in scenario.expand() {
        bench.progress(format_args!("{one:?} ..."));
        match run_one(&bench, one) {
            Ok(done) => {
                for table in &done.tables {
                    println!("{}", table.render());
                    if let Some(save) = &save {
                        save_plots(table, save)?;
                    }
                }
                println!(
                    "  1-min load average before -> after: {} -> {} (other processes on the \
                     machine compete for its CPUs)\n",
                    load_text(done.load_before),
                    load_text(done.load_after)
                );
                record.scenarios.push(done);
            }
            Err(e) => {
                failed = Some(e.context(format!("bench {}", one.name())));
                break;
            }
        }
    }
    bench.progress("done");
    record.load_after = record::load_average();
    if output.record && !record.scenarios.is_empty() {
        let path = record.write(&root.join(record::RUNS_DIR))?;
        println!("recorded: {}", path.display());
        summary::run(root, false)?;
    }
    failed.map_or(Ok(()), Err)
}

/// Runs one scenario; its tables with the load average around it.
fn run_one(bench: &Bench, one: Scenario) -> Result<ScenarioRun> {
    let load_before = record::load_average();
    let started = Instant::now();
    let tables = match one {
        Scenario::Recovery => vec![recovery::run(bench)?, recovery_node::run(bench)?],
        Scenario::Reload => vec![reload::run(bench)?],
        Scenario::Upgrade => vec![upgrade::run(bench)?, survive::run(bench)?],
        Scenario::Overhead => vec![bpf_cost::run(bench)?, overhead::run(bench)?],
        Scenario::BpfCost => vec![bpf_cost::run(bench)?],
        Scenario::Footprint => vec![footprint::run(bench)?],
        Scenario::ConnCount => vec![conn_count::run(bench)?],
        Scenario::Spread => vec![spread::run(bench)?],
        Scenario::Stall => vec![stall::run(bench)?],
        Scenario::Sticky => vec![sticky::run(bench)?],
        Scenario::LongLived => vec![long_lived::run(bench)?],
        Scenario::SupervisorCpu => vec![supervisor_cpu::run(bench)?],
        Scenario::Chaos => vec![chaos::run(bench)?],
        Scenario::Cork => vec![cork::run(bench)?],
        Scenario::ReadySlow => vec![ready_slow::run(bench)?],
        Scenario::Quic => vec![
            quic::run(bench)?,
            quic_stacks::run(bench)?,
            udp_rate::run(bench)?,
        ],
        Scenario::UdpCost => vec![udp_cost::run(bench)?],
        Scenario::Dns => vec![dns::run(bench)?],
        Scenario::All | Scenario::Summary => unreachable!("expand() never yields these"),
    };
    Ok(ScenarioRun {
        scenario: one.name(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        load_before,
        load_after: record::load_average(),
        tables,
    })
}

/// Copies the plots of `table` into `dir`.
fn save_plots(table: &Table, dir: &Path) -> Result<()> {
    for plot in table.plots() {
        let to = dir.join(plot.file_name().unwrap_or_default());
        fs::copy(plot, &to)
            .with_context(|| format!("copying {} to {}", plot.display(), to.display()))?;
        eprintln!("bench: saved {}", to.display());
    }
    Ok(())
}

/// `bench [  12.3 s] what`.
fn progress_line(elapsed: Duration, what: impl Display) -> String {
    format!("bench [{:>7.1} s] {what}", elapsed.as_secs_f64())
}

/// The 1-minute load average, from `/proc/loadavg`, as text (`?` when unknown).
fn load_average() -> String {
    load_text(record::load_average())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_to_every_scenario() {
        assert_eq!(Scenario::All.expand().len(), 17);
        assert!(!Scenario::All.expand().contains(&Scenario::BpfCost));
        assert_eq!(Scenario::Reload.expand(), [Scenario::Reload]);
        assert!(Scenario::Summary.expand().is_empty());
        assert_eq!(Scenario::SupervisorCpu.name(), "supervisor-cpu");
    }

    #[test]
    fn progress_lines_show_the_elapsed_time() {
        assert_eq!(
            progress_line(Duration::from_millis(12_345), "overhead: ck run 2/5"),
            "bench [   12.3 s] overhead: ck run 2/5"
        );
    }
}
