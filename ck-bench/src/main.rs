//! `ck-bench`: runs one of ck's benchmark scenarios (or all of them), prints its tables, and with
//! `--record` keeps the run in `docs/bench/runs/` and draws BENCHMARKS.md again. `cargo xtask
//! bench ARGS...` builds what the benchmarks run (the release `ck`, its examples, this
//! program) and runs `ck-bench ARGS...` as root.

use std::path::PathBuf;
use std::process;

use anyhow::{Result, bail};
use ck_bench::{Options, Scenario};
use clap::Parser;

/// ck's benchmarks.
#[derive(Parser, Debug)]
#[command(
    name = "ck-bench",
    about = "ck's benchmarks: measure, record, summarise"
)]
struct Cli {
    /// What to measure.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Also copy the plots into DIR (relative to the workspace root), e.g. `docs/bench`,
    /// the folder BENCHMARKS.md shows.
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// Measure this ck binary (relative to the workspace root) instead of the release build.
    #[arg(long, value_name = "PATH")]
    ck: Option<PathBuf>,
    /// Also measure the release `ck` of revision REV (a commit, branch or tag; built in a git
    /// worktree under target/against/, or reused): every contender that runs ck, on both
    /// builds in the same rounds, with the ratio of each pair.
    #[arg(long, value_name = "REV")]
    against: Option<String>,
    /// Run this many rounds of each scenario measured in rounds, instead of its own count (to
    /// try a scenario out; not recorded).
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// Shorter rounds: every load and window a quarter as long (to try a scenario out; not
    /// recorded).
    #[arg(long)]
    quick: bool,
    /// Write the run to docs/bench/runs/DATE-TIME-COMMIT.json, its plots to docs/bench, and
    /// draw BENCHMARKS.md's tables again from the records.
    #[arg(long)]
    record: bool,
    /// With `summary`: fail if BENCHMARKS.md differs from what the records give, instead of
    /// writing it.
    #[arg(long)]
    check: bool,
}

fn main() {
    let cli = Cli::parse();
    if let Err(err) = dispatch(cli) {
        // `{:#}` prints the context chain on one line, without a backtrace.
        eprintln!("error: {err:#}");
        process::exit(1);
    }
}

/// Runs what `cli` asks for.
fn dispatch(cli: Cli) -> Result<()> {
    if cli.scenario == Scenario::Summary {
        return ck_bench::summary(cli.check);
    }
    if cli.check {
        bail!("--check goes with `summary` only: `ck-bench summary --check`");
    }
    let root = ck_bench::workspace_root()?;
    let bin = match cli.ck {
        Some(bin) => root.join(bin),
        None => ck_bench::target_dir()?.join("release/ck"),
    };
    if !bin.is_file() {
        bail!(
            "{} is missing: `cargo xtask bench` builds it (or pass --ck PATH)",
            bin.display()
        );
    }
    let output = Options {
        results: ck_bench::target_dir()?.join("bench"),
        save: cli.save.map(|dir| root.join(dir)),
        against: cli.against,
        rounds: cli.rounds,
        quick: cli.quick,
        record: cli.record,
    };
    ck_bench::run(cli.scenario, &bin, &output)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_scenario_is_required() {
        let cli = Cli::try_parse_from(["ck-bench", "summary", "--check"]).unwrap();
        assert_eq!((cli.scenario, cli.check), (Scenario::Summary, true));
        assert!(Cli::try_parse_from(["ck-bench"]).is_err());
        assert!(Cli::try_parse_from(["ck-bench", "nope"]).is_err());
        let cli = Cli::try_parse_from([
            "ck-bench",
            "stall",
            "--rounds",
            "2",
            "--quick",
            "--against",
            "main",
        ])
        .unwrap();
        assert_eq!(
            (cli.rounds, cli.quick, cli.against.as_deref()),
            (Some(2), true, Some("main"))
        );
    }
}
