//! `ck-bench SCENARIO` (run by `cargo xtask bench`): measures ck (with its BPF program) against
//! the plain `SO_REUSEPORT` baseline (`ck run --no-bpf`), the same workers with no supervisor,
//! and other supervisors, driving load with the in-repo load client (`ck_tests::load`), and
//! prints one table per result, with the paths of its SVG plots (written under `target/bench/`,
//! and copied to `--save DIR`).
//!
//! The scenarios are listed in [`scenario`]; those measured in interleaved rounds use
//! [`rounds`] (their contenders, the runner, the tables laid out from the rounds). Every
//! instance gets its own `--name` and port on 127.0.0.1, its log goes to a file under one
//! directory per invocation, and it is stopped (killed, if need be) when its scenario is done.
//! Long steps print a progress line on stderr ([`Bench::progress`]).
//!
//! With `--record` the run is also written to `docs/bench/runs/` as data (`record.rs`: the
//! tables and every round's figures), its plots are copied to `docs/bench/`, and BENCHMARKS.md
//! is drawn again from the records (`summary/`; `ck-bench summary [--check]` does only that).

pub mod against;
mod bare;
pub mod paths;
mod plot;
mod process;
pub mod record;
pub mod rounds;
pub mod scenario;
mod scenarios;
pub mod summary;
pub mod table;

use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use ck_tests::machine::{load_text, machine_line};

pub use against::Against;
pub use paths::{target_dir, workspace_root};
use record::{Machine, Record, ScenarioRun, Tree};
use rounds::{Contender, Plan, RoundFigures};
pub use scenario::Scenario;
use table::Table;

/// A quick run's rounds are this much shorter than a full run's.
const QUICK_DIVISOR: u32 = 4;

/// What every scenario needs: the ck binary, where instance logs and plots go, how many rounds
/// and how long, the clock of the progress lines.
#[derive(Debug, Clone)]
pub struct Bench {
    /// The release `ck` binary.
    pub bin: PathBuf,
    /// Directory of this invocation's ck logs.
    pub log_dir: PathBuf,
    /// Another build of ck measured beside `bin` (`--against`).
    pub against: Option<Against>,
    /// `--rounds`: the rounds of every scenario in rounds, instead of its own count.
    rounds: Option<usize>,
    /// `--quick`: every span of a scenario ([`Bench::span`]) a quarter as long.
    quick: bool,
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

    /// A scenario's span of time (a load's length, an idle window): as given, a quarter of it in
    /// a quick run (`--quick`).
    pub fn span(&self, full: Duration) -> Duration {
        match self.quick {
            true => full / QUICK_DIVISOR,
            false => full,
        }
    }

    /// The plan of `scenario`: `rounds` rounds (or `--rounds`) of `contenders`, each ck one also
    /// on `--against`'s build.
    pub fn plan(&self, scenario: &str, rounds: usize, contenders: Vec<Contender>) -> Plan {
        let against = self
            .against
            .as_ref()
            .map(|a| (a.rev.as_str(), a.bin.as_path()));
        let mut plan = Plan::new(scenario, rounds, contenders, &self.bin, against);
        plan.rounds = self.rounds.unwrap_or(rounds);
        plan.quick = self.quick || self.rounds.is_some();
        plan
    }

    /// Prints the complaints (WARN/ERROR lines) in a ck's log, if any.
    pub fn report_complaints(&self, ck: &ck_tests::ck::Ck) {
        print_complaints(&ck.complaints(), ck.log_path());
    }
}

/// What one scenario gave: its tables and, measured in rounds, every round's figures.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Its result tables.
    pub tables: Vec<Table>,
    /// Every round, as run (empty for a single-run scenario).
    pub rounds: Vec<RoundFigures>,
}

impl From<Vec<Table>> for Outcome {
    fn from(tables: Vec<Table>) -> Outcome {
        Outcome {
            tables,
            rounds: Vec::new(),
        }
    }
}

/// Where `ck-bench` puts its output, and how it measures.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Directory of this run's plots (`target/bench`).
    pub results: PathBuf,
    /// A directory to copy the plots to as well (`--save`), e.g. `docs/bench`.
    pub save: Option<PathBuf>,
    /// Another revision to measure beside this one (`--against`).
    pub against: Option<String>,
    /// The rounds of every scenario in rounds (`--rounds`).
    pub rounds: Option<usize>,
    /// Shorter rounds (`--quick`).
    pub quick: bool,
    /// Write the run to `docs/bench/runs/` and draw BENCHMARKS.md again (`--record`).
    pub record: bool,
}

/// `ck-bench summary [--check]`: draws BENCHMARKS.md from the records (`check`: fails, naming
/// the fix, if the file is not what the records give).
pub fn summary(check: bool) -> Result<()> {
    summary::run(paths::workspace_root()?, check)
}

/// Runs `scenario` with the ck binary `bin` and prints the machine, then each table with the
/// paths of its plots; with `output.record`, writes the run's record and draws BENCHMARKS.md
/// again (also when a scenario fails: the ones done are recorded).
pub fn run(scenario: Scenario, bin: &Path, output: &Options) -> Result<()> {
    let scenarios = scenario.expand();
    check_options(output)?;
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
    let against = output
        .against
        .as_deref()
        .map(against::prepare)
        .transpose()?;
    let bench = Bench {
        bin: bin.to_path_buf(),
        log_dir,
        against,
        rounds: output.rounds,
        quick: output.quick,
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
    if let Some(a) = &bench.against {
        println!("against: {} ({})", a.bin.display(), a.rev);
    }
    println!("ck logs: {}", bench.log_dir.display());
    println!("plots: {}\n", bench.results.display());
    let mut failed = None;
    for one in scenarios {
        bench.progress(format_args!("{} ...", one.name()));
        match run_one(&bench, one) {
            Ok(done) => {
                for table in &done.tables {
                    println!("{}", table.render());
                    if let Some(save) = &save {
                        save_plots(table, save)?;
                    }
                }
                println!(
                    "  {:.0} s; 1-min load average before -> after: {} -> {} (other processes on \
                     the machine compete for its CPUs)\n",
                    done.seconds,
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

/// Fails, naming the fix, on options that do not go together: a record of a quick run, or no
/// round at all.
fn check_options(output: &Options) -> Result<()> {
    if output.record && (output.quick || output.rounds.is_some()) {
        bail!(
            "--record keeps full runs only: drop --quick and --rounds (they are for trying a \
             scenario out)"
        );
    }
    if output.rounds == Some(0) {
        bail!("--rounds 0 measures nothing: give at least 1");
    }
    Ok(())
}

/// Runs one scenario; its tables and rounds with the load average around it.
fn run_one(bench: &Bench, one: Scenario) -> Result<ScenarioRun> {
    let load_before = record::load_average();
    let started = Instant::now();
    let Outcome { tables, rounds } = one.run(bench)?;
    Ok(ScenarioRun {
        scenario: one.name(),
        seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        load_before,
        load_after: record::load_average(),
        tables,
        rounds,
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

/// Prints `complaints` (WARN/ERROR lines of the log `log`) on stderr, the first 10 of them.
fn print_complaints(complaints: &[String], log: &Path) {
    if complaints.is_empty() {
        return;
    }
    eprintln!(
        "bench: {} WARN/ERROR line(s) in {}:",
        complaints.len(),
        log.display()
    );
    for line in complaints.iter().take(10) {
        eprintln!("bench:   {line}");
    }
}

/// `bench [  12.3 s] what`.
fn progress_line(elapsed: Duration, what: impl Display) -> String {
    format!("bench [{:>7.1} s] {what}", elapsed.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_show_the_elapsed_time() {
        assert_eq!(
            progress_line(Duration::from_millis(12_345), "overhead: ck run 2/5"),
            "bench [   12.3 s] overhead: ck run 2/5"
        );
    }

    #[test]
    fn options_that_do_not_go_together_are_refused() {
        let quick_record = Options {
            quick: true,
            record: true,
            ..Options::default()
        };
        let err = check_options(&quick_record).unwrap_err();
        assert!(err.to_string().contains("drop --quick"), "{err}");
        let none = Options {
            rounds: Some(0),
            ..Options::default()
        };
        assert!(check_options(&none).is_err());
        assert!(check_options(&Options::default()).is_ok());
    }
}
