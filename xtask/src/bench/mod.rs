//! `cargo xtask bench <scenario>`: measures ck (with its BPF program) against the plain
//! `SO_REUSEPORT` baseline (`ck run --no-bpf`) with the built-in demo worker, driving load with
//! the in-repo load client (`ck_tests::load`), and prints one table per scenario, with the
//! paths of its SVG plots (written under `target/bench/`, and copied to `--save DIR`).
//!
//! Every instance gets its own `--name` and port on 127.0.0.1, its log goes to a file under
//! one directory per invocation, and it is stopped (killed, if need be) before the next one
//! starts. Each scenario is bounded in time; `all` takes about 18 minutes (`upgrade` about 10 s, `ready-slow` about 1 minute). Long steps print a
//! progress line on stderr ([`Bench::progress`]).

mod bare;
mod bpf_cost;
mod bpf_stats;
mod chaos;
mod conn_count;
mod cork;
mod fleet;
mod footprint;
mod instance;
mod long_lived;
mod overhead;
mod peers;
mod plot;
mod ready_slow;
mod recovery;
mod recovery_node;
mod reload;
mod spread;
mod stall;
mod sticky;
mod supervisor_cpu;
mod survive;
mod table;
mod three_loads;
mod upgrade;

use std::fmt::Display;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};

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
    /// Every scenario, in the order above.
    All,
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
            ],
            one => vec![one],
        }
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
}

/// Runs `scenario` with the ck binary `bin` and prints the machine, then each table with the
/// paths of its plots.
pub fn run(scenario: Scenario, bin: &Path, output: &Options) -> Result<()> {
    let started = Instant::now();
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let log_dir = std::env::temp_dir().join(format!("ck-bench-{stamp}"));
    for dir in [Some(&log_dir), Some(&output.results), output.save.as_ref()]
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

    println!("{}", machine_line());
    println!("ck: {}", bench.bin.display());
    println!("ck logs: {}", bench.log_dir.display());
    println!("plots: {}\n", bench.results.display());
    for one in scenario.expand() {
        bench.progress(format_args!("{one:?} ..."));
        let load_before = load_average();
        let mut tables = match one {
            Scenario::Recovery => vec![recovery::run(&bench)?, recovery_node::run(&bench)?],
            Scenario::Reload => vec![reload::run(&bench)?],
            Scenario::Upgrade => vec![upgrade::run(&bench)?, survive::run(&bench)?],
            Scenario::Overhead => vec![bpf_cost::run(&bench)?, overhead::run(&bench)?],
            Scenario::BpfCost => vec![bpf_cost::run(&bench)?],
            Scenario::Footprint => vec![footprint::run(&bench)?],
            Scenario::ConnCount => vec![conn_count::run(&bench)?],
            Scenario::Spread => vec![spread::run(&bench)?],
            Scenario::Stall => vec![stall::run(&bench)?],
            Scenario::Sticky => vec![sticky::run(&bench)?],
            Scenario::LongLived => vec![long_lived::run(&bench)?],
            Scenario::SupervisorCpu => vec![supervisor_cpu::run(&bench)?],
            Scenario::Chaos => vec![chaos::run(&bench)?],
            Scenario::Cork => vec![cork::run(&bench)?],
            Scenario::ReadySlow => vec![ready_slow::run(&bench)?],
            Scenario::All => unreachable!("expand() never yields All"),
        };
        if let Some(last) = tables.last_mut() {
            last.note(format!(
                "1-min load average before -> after: {load_before} -> {} (other processes on \
                 the machine compete for its CPUs)",
                load_average()
            ));
        }
        for table in &tables {
            println!("{}", table.render());
            if let Some(save) = &output.save {
                save_plots(table, save)?;
            }
        }
    }
    bench.progress("done");
    Ok(())
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

/// The 1-minute load average, from `/proc/loadavg`.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// One line describing what is measured where: the machine's CPUs, kernel and CPU model, the
/// commit of the tree (`+changes` when it differs from it) and the 1-minute load average.
pub(crate) fn machine_line() -> String {
    format!(
        "{}; commit {}; load average {}",
        machine(),
        commit(),
        load_average()
    )
}

/// The tree's commit, `git describe`'s way: its short hash, `+changes` when files differ.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(crate::workspace_root().ok()?)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let hash = git(&["rev-parse", "--short=10", "HEAD"]).unwrap_or_else(|| "?".into());
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{hash}+changes"),
        _ => hash,
    }
}

/// One line describing the machine: CPUs, kernel, CPU model.
fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
        })
        .unwrap_or_else(|| "?".into());
    format!("machine: nproc={nproc}, kernel {kernel}, CPU {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_to_every_scenario() {
        assert_eq!(Scenario::All.expand().len(), 14);
        assert!(!Scenario::All.expand().contains(&Scenario::BpfCost));
        assert_eq!(Scenario::Reload.expand(), [Scenario::Reload]);
    }

    #[test]
    fn progress_lines_show_the_elapsed_time() {
        assert_eq!(
            progress_line(Duration::from_millis(12_345), "overhead: ck run 2/5"),
            "bench [   12.3 s] overhead: ck run 2/5"
        );
    }

    #[test]
    fn machine_names_the_kernel() {
        assert!(machine().contains("kernel"));
    }
}
