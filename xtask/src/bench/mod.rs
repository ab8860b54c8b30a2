//! `cargo xtask bench <scenario>`: measures ck (with its BPF program) against the plain
//! `SO_REUSEPORT` baseline (`ck run --no-bpf`) with the built-in demo worker, driving load with
//! the in-repo load client (`ck_tests::load`), and prints one table per scenario.
//!
//! Every instance gets its own `--name` and port on 127.0.0.1, its log goes to a file under
//! one directory per invocation, and it is stopped (killed, if need be) before the next one
//! starts. Each scenario is bounded in time; `all` takes about five minutes (`stall` alone
//! about three).

mod chaos;
mod cork;
mod fleet;
mod footprint;
mod instance;
mod overhead;
mod peers;
mod recovery;
mod recovery_node;
mod reload;
mod spread;
mod stall;
mod table;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};

/// What to measure.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// SIGKILL 2 of 3 workers under load: failed requests, time until every slot serves again;
    /// with the demo worker (ck vs baseline), then with the Node hello app (ck, --no-bpf,
    /// node:cluster, pm2).
    Recovery,
    /// `ck reload` under load: p99 latency and failed requests, steady vs during the reload.
    Reload,
    /// Keep-alive requests/s and new connections/s, ck vs baseline, alternating runs.
    Overhead,
    /// Supervisor RSS, start to first answer, idle shutdown time.
    Footprint,
    /// Share of new connections per worker (3 workers), per policy.
    Spread,
    /// Latency with one of 4 workers stalling 200 ms every second, per policy.
    Stall,
    /// A random worker of 4 SIGKILLed every 0.5 s for 60 s: ck, --no-bpf, node:cluster, pm2.
    Chaos,
    /// The SO_REUSEPORT + TCP_CORK article's matrix with its kind of C server under ck.
    Cork,
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
                Scenario::Overhead,
                Scenario::Footprint,
                Scenario::Spread,
                Scenario::Stall,
                Scenario::Chaos,
                Scenario::Cork,
            ],
            one => vec![one],
        }
    }
}

/// What every scenario needs: the ck binary and where instance logs go.
#[derive(Debug, Clone)]
pub struct Bench {
    /// The release `ck` binary.
    pub bin: PathBuf,
    /// Directory of this invocation's ck logs.
    pub log_dir: PathBuf,
}

impl Bench {
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

/// Runs `scenario` with the ck binary `bin` and prints the machine, then each table.
pub fn run(scenario: Scenario, bin: &Path) -> Result<()> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let log_dir = std::env::temp_dir().join(format!("ck-bench-{stamp}"));
    fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    let bench = Bench {
        bin: bin.to_path_buf(),
        log_dir,
    };

    println!("{}", machine());
    println!("ck: {}", bench.bin.display());
    println!("ck logs: {}\n", bench.log_dir.display());
    for one in scenario.expand() {
        eprintln!("bench: running {one:?} ...");
        let load_before = load_average();
        if one == Scenario::Recovery {
            println!("{}", recovery::run(&bench)?.render());
        }
        let mut table = match one {
            Scenario::Recovery => recovery_node::run(&bench)?,
            Scenario::Reload => reload::run(&bench)?,
            Scenario::Overhead => overhead::run(&bench)?,
            Scenario::Footprint => footprint::run(&bench)?,
            Scenario::Spread => spread::run(&bench)?,
            Scenario::Stall => stall::run(&bench)?,
            Scenario::Chaos => chaos::run(&bench)?,
            Scenario::Cork => cork::run(&bench)?,
            Scenario::All => unreachable!("expand() never yields All"),
        };
        table.note(format!(
            "1-min load average before -> after: {load_before} -> {} (other processes on the \
             machine compete for its CPUs)",
            load_average()
        ));
        println!("{}", table.render());
    }
    Ok(())
}

/// The 1-minute load average, from `/proc/loadavg`.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
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
        assert_eq!(Scenario::All.expand().len(), 8);
        assert_eq!(Scenario::Reload.expand(), [Scenario::Reload]);
    }

    #[test]
    fn machine_names_the_kernel() {
        assert!(machine().contains("kernel"));
    }
}
