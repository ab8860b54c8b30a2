//! The tests run by cargo-nextest, and what its JUnit report says of them.
//!
//! nextest runs every test in a process of its own, carries on after a failure (every test
//! binary runs), and stops a test that runs past its time limit: `.config/nextest.toml` sets
//! the limit (600 s by default, longer for the tests named there) and writes a JUnit report.
//! libtest has no time limit and `cargo test` stops at the first failing binary, so the suite
//! uses nextest rather than a runner of its own. [`Report::read`] turns the JUnit file into a
//! count per test binary, with the tests that failed and those stopped at their limit.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use anyhow::{Context as _, Result};

use crate::cmd;

/// A nextest profile of `.config/nextest.toml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Every test but the promise suite, two at a time.
    Default,
    /// The promise suite alone, one promise at a time, on the release build.
    Promises,
}

impl Profile {
    /// Its name in `.config/nextest.toml`.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Promises => "promises",
        }
    }

    /// Where nextest writes its JUnit report, under the cargo target directory.
    pub fn junit(self, target: &Path) -> PathBuf {
        target.join("nextest").join(self.name()).join("junit.xml")
    }
}

/// `cargo nextest run --profile PROFILE --workspace --exclude ck-ebpf --exclude ck-fuzz`,
/// through `cargo`, in `workspace`; the caller adds arguments and environment.
pub fn command(profile: Profile) -> Command {
    let mut cargo = cmd::cargo();
    cargo
        .args(["nextest", "run", "--profile", profile.name()])
        .args([
            "--workspace",
            "--exclude",
            "ck-ebpf",
            "--exclude",
            "ck-fuzz",
        ]);
    cargo
}

/// Runs `cargo` (a [`command`]), then reads the report it wrote at `junit`. The report of an
/// earlier run is removed first, so a run that wrote none (a build that failed) reads as such.
pub fn run(cargo: &mut Command, junit: &Path) -> Result<(ExitStatus, Option<Report>)> {
    let _ = std::fs::remove_file(junit);
    let status = cargo
        .status()
        .with_context(|| format!("starting `{}`", cmd::describe(cargo)))?;
    let report = match std::fs::read_to_string(junit) {
        Ok(xml) => {
            Some(Report::parse(&xml).with_context(|| format!("reading {}", junit.display()))?)
        }
        Err(_) => None,
    };
    Ok((status, report))
}

/// How one test ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It passed.
    Passed,
    /// It failed: a panic, a non-zero exit, a crash.
    Failed,
    /// nextest stopped it at its time limit.
    TimedOut,
    /// It did not run.
    Skipped,
}

/// One test as the report has it.
#[derive(Clone, Debug, PartialEq)]
pub struct Test {
    /// Its name within its binary.
    pub name: String,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it ran, in seconds.
    pub seconds: f64,
}

/// One test binary's tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Binary {
    /// Its tests, in the report's order.
    pub tests: Vec<Test>,
}

impl Binary {
    /// How many of its tests ended with `outcome`.
    fn count(&self, outcome: Outcome) -> usize {
        self.tests.iter().filter(|t| t.outcome == outcome).count()
    }

    /// The names of its tests that ended with `outcome`.
    fn named(&self, outcome: Outcome) -> Vec<&str> {
        self.tests
            .iter()
            .filter(|t| t.outcome == outcome)
            .map(|t| t.name.as_str())
            .collect()
    }
}

/// A nextest run's results, per test binary (`crate::binary`, as nextest names them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Binary name -> its tests.
    pub binaries: BTreeMap<String, Binary>,
}

impl Report {
    /// Reads nextest's JUnit XML: a `testsuite` per binary, a `testcase` per test, with a
    /// `failure` (type `test timeout` when the limit stopped it) or `error` child when it did
    /// not pass, and `skipped` when it did not run.
    pub fn parse(xml: &str) -> Result<Report> {
        let doc = roxmltree::Document::parse(xml).context("nextest's JUnit report is not XML")?;
        let mut report = Report::default();
        for suite in doc.descendants().filter(|n| n.has_tag_name("testsuite")) {
            let name = suite.attribute("name").unwrap_or("?").to_string();
            let binary = report.binaries.entry(name).or_default();
            for case in suite.children().filter(|n| n.has_tag_name("testcase")) {
                let ended = case.children().find(|n| {
                    ["failure", "error", "skipped"]
                        .iter()
                        .any(|t| n.has_tag_name(*t))
                });
                let outcome = match ended {
                    None => Outcome::Passed,
                    Some(n) if n.has_tag_name("skipped") => Outcome::Skipped,
                    Some(n) if n.attribute("type").is_some_and(|t| t.contains("timeout")) => {
                        Outcome::TimedOut
                    }
                    Some(_) => Outcome::Failed,
                };
                binary.tests.push(Test {
                    name: case.attribute("name").unwrap_or("?").to_string(),
                    outcome,
                    seconds: case
                        .attribute("time")
                        .and_then(|t| t.parse().ok())
                        .unwrap_or(0.0),
                });
            }
        }
        Ok(report)
    }

    /// Tests that ended with `outcome`, over every binary.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.binaries.values().map(|b| b.count(outcome)).sum()
    }

    /// Whether every test that ran passed.
    pub fn all_passed(&self) -> bool {
        self.count(Outcome::Failed) == 0 && self.count(Outcome::TimedOut) == 0
    }

    /// `650 passed, 1 failed, 1 timed out in 71 binaries; failed: ck-tests::upgrade
    /// (kill_during_upgrade); timed out: ck-tests::quic (held_connections)`: every test of every
    /// binary counted, and the binaries that did not pass named with their tests.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{} passed, {} failed",
            self.count(Outcome::Passed),
            self.count(Outcome::Failed)
        );
        for (outcome, what) in [
            (Outcome::TimedOut, "timed out"),
            (Outcome::Skipped, "not run"),
        ] {
            let n = self.count(outcome);
            if n > 0 {
                let _ = write!(line, ", {n} {what}");
            }
        }
        let binaries = self.binaries.len();
        let _ = write!(
            line,
            " in {binaries} {}",
            if binaries == 1 { "binary" } else { "binaries" }
        );
        for (outcome, what) in [
            (Outcome::Failed, "failed"),
            (Outcome::TimedOut, "timed out"),
        ] {
            let named: Vec<String> = self
                .binaries
                .iter()
                .filter(|(_, b)| b.count(outcome) > 0)
                .map(|(name, b)| format!("{name} ({})", b.named(outcome).join(", ")))
                .collect();
            if !named.is_empty() {
                let _ = write!(line, "; {what}: {}", named.join(", "));
            }
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What nextest 0.9 writes for a binary with a failure, one with a test stopped at its
    /// limit and one that passed.
    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="6" skipped="1" failures="2" errors="0">
    <testsuite name="fixture::fails" tests="2" skipped="0" errors="0" failures="1">
        <testcase name="broken" classname="fixture::fails" time="0.156">
            <failure type="test failure with exit code 101"/>
        </testcase>
        <testcase name="fine" classname="fixture::fails" time="0.019"/>
    </testsuite>
    <testsuite name="fixture::hangs" tests="1" skipped="0" errors="0" failures="1">
        <testcase name="forever" classname="fixture::hangs" time="2.010">
            <failure type="test timeout"/>
        </testcase>
    </testsuite>
    <testsuite name="fixture::passes" tests="3" skipped="1" errors="0" failures="0">
        <testcase name="one" classname="fixture::passes" time="0.022"/>
        <testcase name="two" classname="fixture::passes" time="0.019"/>
        <testcase name="three" classname="fixture::passes"><skipped/></testcase>
    </testsuite>
</testsuites>"#;

    #[test]
    fn a_report_counts_every_binary_and_names_what_did_not_pass() {
        let report = Report::parse(REPORT).unwrap();
        let counts = [
            Outcome::Passed,
            Outcome::Failed,
            Outcome::TimedOut,
            Outcome::Skipped,
        ]
        .map(|o| report.count(o));
        assert_eq!(counts, [3, 1, 1, 1]);
        assert_eq!(
            report.line(),
            "3 passed, 1 failed, 1 timed out, 1 not run in 3 binaries; failed: fixture::fails \
             (broken); timed out: fixture::hangs (forever)"
        );
        assert!(!report.all_passed());
    }

    #[test]
    fn a_clean_report_says_only_the_counts() {
        let xml =
            r#"<testsuites><testsuite name="a::b"><testcase name="t"/></testsuite></testsuites>"#;
        let report = Report::parse(xml).unwrap();
        assert_eq!(report.line(), "1 passed, 0 failed in 1 binary");
        assert!(report.all_passed());
    }

    /// A workspace of three test binaries: one with a failing test, one whose test never ends
    /// (stopped at a 2 s limit of its own), one that passes.
    const FIXTURE: [(&str, &str); 6] = [
        (
            "Cargo.toml",
            "[package]\nname = \"fixture\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
        ),
        ("src/lib.rs", ""),
        (
            "tests/fails.rs",
            "#[test] fn fine() {}\n#[test] fn broken() { panic!(\"deliberately\") }\n",
        ),
        (
            "tests/hangs.rs",
            "#[test] fn forever() { std::thread::sleep(std::time::Duration::from_secs(3600)) }\n",
        ),
        (
            "tests/passes.rs",
            "#[test] fn one() {}\n#[test] fn two() {}\n",
        ),
        (
            ".config/nextest.toml",
            "[profile.default]\nfail-fast = false\n\
             slow-timeout = { period = \"60s\", terminate-after = 10 }\n\
             [profile.default.junit]\npath = \"junit.xml\"\n\
             [[profile.default.overrides]]\nfilter = \"binary(hangs)\"\n\
             slow-timeout = { period = \"1s\", terminate-after = 2, grace-period = \"1s\" }\n",
        ),
    ];

    /// A failing test and a hanging one do not stop the other binaries: every test runs, and
    /// the line names the failing and the stopped test with their binaries.
    #[test]
    fn a_failure_and_a_hang_let_every_other_binary_run_and_are_named() {
        let dir = std::env::temp_dir().join(format!("ck-xtask-nextest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in FIXTURE {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let mut cargo = cmd::cargo();
        cargo
            .current_dir(&dir)
            .args(["nextest", "run", "--offline"])
            .env("CARGO_TARGET_DIR", dir.join("target"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // This test may itself run under nextest: the inner run has its own profile.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NEXTEST_") {
                cargo.env_remove(key);
            }
        }
        let junit = dir.join("target/nextest/default/junit.xml");
        let (status, report) = run(&mut cargo, &junit).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!status.success());
        let report = report.expect("nextest wrote its report");
        assert_eq!(
            report.line(),
            "3 passed, 1 failed, 1 timed out in 3 binaries; failed: fixture::fails (broken); \
             timed out: fixture::hangs (forever)"
        );
    }
}
