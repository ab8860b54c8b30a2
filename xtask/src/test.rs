//! `cargo xtask test`: the whole suite, each part run even after another failed, ending with
//! one line that says how every part went.
//!
//! In order: `cargo fmt --check`, `cargo clippy --all-targets -D warnings`, the debug build,
//! `docs --check` (the generated reference is current), every test binary under cargo-nextest
//! (each test in a process of its own, stopped at its time limit: `.config/nextest.toml`), the
//! doc tests, a few seconds of each fuzz target, and README's promises on the release build.
//! With arguments (`cargo xtask test -- --test NAME`), only the tests they choose run.
use std::ffi::OsString;
use std::fmt::Write as _;
use std::process;
use std::time::Instant;

use anyhow::{Result, anyhow};

use crate::nextest::{self, Profile};
use crate::{Privilege, cmd, docs, fuzz, promises, tally, toolchain, workspace_cargo};

/// How one part of the suite went.
struct Part {
    /// Its name in the closing line (`clippy`, `tests`).
    name: &'static str,
    /// `ok`, or what failed.
    outcome: Result<String>,
    /// How long it took, in whole seconds.
    secs: u64,
}

impl Part {
    /// Runs `part` and keeps how it went and how long it took.
    fn timed(name: &'static str, part: impl FnOnce() -> Result<String>) -> Part {
        let started = Instant::now();
        let outcome = part();
        Part {
            name,
            outcome,
            secs: started.elapsed().as_secs(),
        }
    }
}

/// The closing line: the tests first (`tests: 650 passed, 0 failed in 71 binaries [1205 s]`),
/// then every other part in the order it ran (`; fmt: ok [2 s]; clippy: FAILED (...) [40 s]`),
/// each with its time, so that the suite's time is seen where it goes.
fn closing_line(parts: &[Part]) -> String {
    let mut line = String::new();
    let tests = parts.iter().filter(|p| p.name == "tests");
    for part in tests.chain(parts.iter().filter(|p| p.name != "tests")) {
        if !line.is_empty() {
            line.push_str("; ");
        }
        match &part.outcome {
            Ok(said) => {
                let _ = write!(line, "{}: {said} [{} s]", part.name, part.secs);
            }
            Err(e) => {
                let first = format!("{e:#}");
                let first = first.lines().next().unwrap_or_default();
                let _ = write!(line, "{}: FAILED ({first}) [{} s]", part.name, part.secs);
            }
        }
    }
    line
}

/// Runs the suite (or, with `args`, the tests they choose) and exits: 0 only when every part
/// passed.
pub fn run(args: Vec<OsString>) -> Result<()> {
    // Some tests run ck with --adopt.
    let privilege = crate::privilege(
        true,
        &format!(
            "the integration tests need root ({}) to load ck's BPF programs: run \
             `cargo xtask test` as root, or install sudo",
            crate::bpf_caps(true)
        ),
    )?;
    let started = Instant::now();
    toolchain::ensure(toolchain::Bpffs::Required)?;
    crate::test_deps::ensure(crate::workspace_root()?)?;
    let whole = args.is_empty();
    let mut parts = Vec::new();
    if whole {
        parts.push(Part {
            name: "setup",
            outcome: Ok("ok".into()),
            secs: started.elapsed().as_secs(),
        });
        parts.push(Part::timed("fmt", || {
            checked(
                workspace_cargo()?.args(["fmt", "--all", "--", "--check"]),
                "run `cargo fmt --all`",
            )
        }));
        parts.push(Part::timed("clippy", || {
            checked(
                workspace_cargo()?.args(["clippy", "--all-targets", "--", "-D", "warnings"]),
                "fix what clippy names above",
            )
        }));
    }
    let built = Instant::now();
    let ck = crate::build(false)?;
    if whole {
        parts.push(Part {
            name: "build",
            outcome: Ok("ok".into()),
            secs: built.elapsed().as_secs(),
        });
        parts.push(Part::timed("docs --check", || {
            let root = crate::workspace_root()?;
            docs::run(&ck, &root.join("docs"), &crate::target_dir()?, true).map(|()| "ok".into())
        }));
    }
    parts.push(Part::timed("tests", || tests(privilege, &args)));
    if whole {
        parts.push(Part::timed("doc tests", doc_tests));
        parts.push(Part::timed("fuzz", || {
            fuzz::smoke(crate::workspace_root()?).map(|()| "ok".into())
        }));
        parts.push(Part::timed("promises", || {
            crate::build(true).and_then(|bin| promises::run(&bin, None))
        }));
    }
    let secs = started.elapsed().as_secs();
    let line = closing_line(&parts);
    let passed = parts.iter().all(|p| p.outcome.is_ok());
    println!("{line}; in all {secs} s");
    process::exit(if passed { 0 } else { 1 })
}

/// Runs `cargo` and says `ok`, or fails with `fix`.
fn checked(cargo: &mut process::Command, fix: &str) -> Result<String> {
    cmd::run(cargo, fix).map(|()| "ok".into())
}

/// Every test binary under nextest (the promise suite excepted), with `args` added: the counts
/// and the binaries that did not pass, as [`nextest::Report::line`] says them.
fn tests(privilege: Privilege, args: &[OsString]) -> Result<String> {
    let target = crate::target_dir()?;
    let mut cargo = nextest::command(Profile::Default);
    cargo
        .current_dir(crate::workspace_root()?)
        .env("CARGO_TARGET_DIR", &target);
    if privilege == Privilege::Sudo {
        // Build as the user and run only the test binaries as root, so target/ stays ours.
        cargo.args(["--config", r#"target.'cfg(all())'.runner = ["sudo", "-E"]"#]);
    }
    cargo.args(args);
    let (status, report) = nextest::run(&mut cargo, &Profile::Default.junit(&target))?;
    match report {
        Some(report) if report.all_passed() && status.success() => Ok(report.line()),
        Some(report) => Err(anyhow!("{}", report.line())),
        None => Err(anyhow!(
            "nextest ran no test (exit {}): see its output above",
            cmd::exit_code(status)
        )),
    }
}

/// The doc tests (nextest does not run them): `cargo test --doc`, counted from its output.
fn doc_tests() -> Result<String> {
    let mut cargo = workspace_cargo()?;
    cargo.args([
        "test",
        "--doc",
        "--workspace",
        "--exclude",
        "ck-ebpf",
        "--exclude",
        "ck-fuzz",
    ]);
    let (status, tally) = tally::run(&mut cargo)?;
    let said = format!("{} passed, {} failed", tally.passed, tally.failed);
    if status.success() {
        Ok(said)
    } else {
        Err(anyhow!("{said}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_line_says_every_part() {
        let parts = [
            Part {
                name: "fmt",
                outcome: Ok("ok".into()),
                secs: 2,
            },
            Part {
                name: "tests",
                outcome: Err(anyhow!(
                    "3 passed, 1 failed in 2 binaries; failed: a::b (c)"
                )),
                secs: 1205,
            },
        ];
        assert_eq!(
            closing_line(&parts),
            "tests: FAILED (3 passed, 1 failed in 2 binaries; failed: a::b (c)) [1205 s]; \
             fmt: ok [2 s]"
        );
    }
}
