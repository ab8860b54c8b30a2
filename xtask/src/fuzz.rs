//! `cargo xtask fuzz [TARGET] [--secs N]`: runs ck's fuzz targets (`fuzz/`, cargo-fuzz and
//! libFuzzer on the nightly toolchain) and prints, per target, the executions and crashes.
//! `cargo xtask test` runs each for a few seconds ([`smoke`]); a long run is for BENCHMARKS.md.
//!
//! [`ensure`] installs cargo-fuzz (and a C++ compiler, which libFuzzer needs) when missing,
//! printing one `xtask: ...` line per thing it does.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command};

/// The fuzz targets: each a `[[bin]]` of `fuzz/Cargo.toml` (a unit test keeps the two agreeing).
pub const TARGETS: [&str; 4] = [
    "config_file",
    "control_request",
    "notify_message",
    "option_values",
];

/// Seconds per target in `cargo xtask test`.
pub const SMOKE_SECS: u64 = 5;

/// What one target's run gave.
#[derive(Debug)]
pub struct Outcome {
    /// The target.
    pub target: &'static str,
    /// Inputs tried (libFuzzer's `number_of_executed_units`).
    pub executions: u64,
    /// Time it ran.
    pub elapsed: Duration,
    /// Crash inputs it wrote (`fuzz/artifacts/TARGET/crash-*`), empty when none.
    pub crashes: Vec<String>,
}

/// Installs cargo-fuzz and a C++ compiler if missing.
pub fn ensure() -> Result<()> {
    if cmd::find_program("c++", &[]).is_none() {
        if !cmd::is_root() {
            bail!("libFuzzer needs a C++ compiler: install it with `sudo apt-get install -y g++`");
        }
        eprintln!("xtask: installing g++ for libFuzzer (apt-get install)");
        cmd::run(
            command("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "g++"]),
            "run `apt-get update && apt-get install -y g++` by hand",
        )?;
    }
    if cmd::find_program("cargo-fuzz", &[]).is_none() {
        eprintln!("xtask: installing cargo-fuzz (cargo install cargo-fuzz --locked)");
        cmd::run(
            cmd::cargo().args(["install", "cargo-fuzz", "--locked"]),
            "check network access, or run `cargo install cargo-fuzz --locked` by hand",
        )?;
    }
    Ok(())
}

/// Runs `targets` for `secs` seconds each, prints a table, and fails when any crashed.
pub fn run(workspace: &Path, targets: &[&'static str], secs: u64) -> Result<Vec<Outcome>> {
    ensure()?;
    eprintln!("xtask: building the fuzz targets (cargo +nightly fuzz build)");
    let mut build = cargo_fuzz(workspace, "build");
    if let [one] = targets {
        build.arg(one);
    }
    cmd::run(
        &mut build,
        "see the compiler output above; the fuzz targets build with nightly (`cargo xtask build` \
         installs it)",
    )?;
    let mut outcomes = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        eprintln!(
            "xtask: fuzzing {target} for {secs} s ({} of {})",
            i + 1,
            targets.len()
        );
        outcomes.push(run_one(workspace, target, secs)?);
    }
    println!("{}", render(&outcomes));
    let crashed: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.crashes.iter().map(move |c| format!("{}: {c}", o.target)))
        .collect();
    if !crashed.is_empty() {
        bail!(
            "the fuzzers found crashes; reproduce each with `cargo +nightly fuzz run TARGET FILE`, \
             fix it and add the input as a regression test:\n  {}",
            crashed.join("\n  ")
        );
    }
    Ok(outcomes)
}

/// Every target for [`SMOKE_SECS`] (what `cargo xtask test` runs).
pub fn smoke(workspace: &Path) -> Result<()> {
    run(workspace, &TARGETS, SMOKE_SECS).map(drop)
}

/// The target named `name`, or an error listing them.
pub fn target(name: &str) -> Result<&'static str> {
    TARGETS
        .iter()
        .copied()
        .find(|t| *t == name)
        .with_context(|| {
            format!(
                "no fuzz target {name:?}; the targets are: {}",
                TARGETS.join(", ")
            )
        })
}

/// `cargo +nightly fuzz SUBCOMMAND` in the workspace, with the flags every build shares (so the
/// build and the runs use the same artifacts):
/// - no sanitizer: the code under test is safe Rust (no `unsafe` in the parsers), so
///   AddressSanitizer would only slow the build and the runs; libFuzzer's coverage and Rust's
///   own checks (bounds, overflow with debug assertions, panics) find what there is to find;
/// - the release profile's LTO (for ck's footprint) would make every fuzz build take minutes:
///   local thin LTO and parallel codegen instead.
fn cargo_fuzz(workspace: &Path, subcommand: &str) -> std::process::Command {
    let mut fuzz = command("cargo");
    fuzz.current_dir(workspace)
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .args(["+nightly", "fuzz", subcommand, "--sanitizer", "none"]);
    fuzz
}

fn run_one(workspace: &Path, target: &'static str, secs: u64) -> Result<Outcome> {
    let artifacts = workspace.join("fuzz/artifacts").join(target);
    let before = crash_files(&artifacts);
    let corpus = workspace.join("fuzz/corpus").join(target);
    std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    // libFuzzer grows the first directory; the second holds the hand-written seeds.
    let seeds = workspace.join("fuzz/seeds").join(target);
    let started = Instant::now();
    let mut fuzz = cargo_fuzz(workspace, "run");
    fuzz.arg(target)
        .arg(&corpus)
        .arg(&seeds)
        .args([
            "--",
            &format!("-max_total_time={secs}"),
            "-print_final_stats=1",
        ])
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped());
    let output = fuzz
        .output()
        .with_context(|| format!("running `{}`", cmd::describe(&fuzz)))?;
    let log = String::from_utf8_lossy(&output.stderr);
    let crashes: Vec<String> = crash_files(&artifacts)
        .into_iter()
        .filter(|c| !before.contains(c))
        .collect();
    let executions = executions(&log);
    if !output.status.success() && crashes.is_empty() {
        eprintln!("{log}");
        bail!(
            "`{}` failed ({}) without a crash input: see its output above",
            cmd::describe(&fuzz),
            output.status
        );
    }
    let Some(executions) = executions else {
        eprintln!("{log}");
        bail!("libFuzzer printed no final stats for {target}: see its output above");
    };
    Ok(Outcome {
        target,
        executions,
        elapsed: started.elapsed(),
        crashes,
    })
}

/// libFuzzer's `stat::number_of_executed_units: N` line.
fn executions(log: &str) -> Option<u64> {
    log.lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|n| n.trim().parse().ok())
}

/// The `crash-*` files in `dir`.
fn crash_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("crash-"))
                .collect()
        })
        .unwrap_or_default()
}

fn render(outcomes: &[Outcome]) -> String {
    let mut out = format!(
        "{:<16} | {:>8} | {:>12} | {:>10} | crashes\n{}\n",
        "fuzz target",
        "seconds",
        "executions",
        "exec/s",
        "-".repeat(62)
    );
    for o in outcomes {
        let secs = o.elapsed.as_secs_f64();
        out.push_str(&format!(
            "{:<16} | {:>8.0} | {:>12} | {:>10.0} | {}\n",
            o.target,
            secs,
            o.executions,
            o.executions as f64 / secs.max(f64::EPSILON),
            o.crashes.len()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_match_the_fuzz_crate() {
        let manifest =
            std::fs::read_to_string(crate::workspace_root().unwrap().join("fuzz/Cargo.toml"))
                .unwrap();
        let mut bins: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|n| *n != "ck-fuzz")
            .collect();
        bins.sort_unstable();
        assert_eq!(bins, TARGETS);
        let root = crate::workspace_root().unwrap();
        for t in TARGETS {
            assert!(root.join(format!("fuzz/fuzz_targets/{t}.rs")).is_file());
            assert!(
                root.join(format!("fuzz/seeds/{t}")).is_dir(),
                "seeds of {t}"
            );
        }
    }

    #[test]
    fn reads_libfuzzer_final_stats() {
        let log =
            "#1234 DONE cov: 10\nstat::number_of_executed_units: 98765\nstat::peak_rss_mb: 40\n";
        assert_eq!(executions(log), Some(98765));
        assert_eq!(executions("nothing"), None);
    }
}
