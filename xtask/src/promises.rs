//! `cargo xtask promises`: README's headline promises (`ck_tests::promises::promises`, each
//! beside the README section that makes it) checked on a given ck binary, the release build.
//!
//! The checks are the test binary `promises` of `ck-tests` (one test per promise), run by
//! cargo-nextest's `promises` profile: one promise at a time, so that none loads the machine
//! while another measures it (the idle check reads ck's CPU), each in a process of its own and
//! stopped at its time limit. A table at the end gives each promise's README section and
//! verdict. `cargo xtask test` runs them after the tests.
use std::path::Path;

use anyhow::{Result, anyhow, bail};
use ck_tests::promises::promises;

use crate::nextest::{self, Profile, Report};

/// Checks every promise (or those whose name contains `only`) on the ck at `bin`: `13 kept`,
/// or an error naming the broken ones.
pub fn run(bin: &Path, only: Option<&str>) -> Result<String> {
    let all = promises();
    if let Some(only) = only
        && !all.iter().any(|p| p.name.contains(only))
    {
        let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
        bail!(
            "no promise is named like {only:?}: choose among {}",
            names.join(", ")
        );
    }
    println!(
        "promises: checking on {} ({})",
        bin.display(),
        ck_tests::machine::machine_line()
    );
    let target = crate::target_dir()?;
    let mut cargo = nextest::command(Profile::Promises);
    cargo
        .current_dir(crate::workspace_root()?)
        .env("CARGO_TARGET_DIR", &target)
        // The checks find ck (and its examples beside it) through `CK_BIN`.
        .env("CK_BIN", bin);
    if let Some(only) = only {
        cargo.args(["-E", &format!("test(/{}/)", regex_escape(only))]);
    }
    let (status, report) = nextest::run(&mut cargo, &Profile::Promises.junit(&target))?;
    let Some(report) = report else {
        bail!(
            "nextest checked no promise (exit {}): see its output above",
            crate::cmd::exit_code(status)
        );
    };
    print_table(&report);
    let (kept, broken) = verdicts(&report);
    if broken.is_empty() && status.success() {
        Ok(format!("{} kept", kept.len()))
    } else {
        Err(anyhow!(
            "{} kept, {} broken: {}",
            kept.len(),
            broken.len(),
            broken.join(", ")
        ))
    }
}

/// The promises kept and those broken (failed or stopped at their limit), by name.
fn verdicts(report: &Report) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut broken = Vec::new();
    for binary in report.binaries.values() {
        for test in &binary.tests {
            match test.outcome {
                nextest::Outcome::Passed => kept.push(test.name.clone()),
                nextest::Outcome::Skipped => {}
                nextest::Outcome::Failed | nextest::Outcome::TimedOut => {
                    broken.push(test.name.clone())
                }
            }
        }
    }
    (kept, broken)
}

/// One row per promise checked: its name, README section, verdict and time.
fn print_table(report: &Report) {
    let all = promises();
    println!();
    println!("| promise | README section | verdict | time |");
    println!("| --- | --- | --- | --- |");
    for test in report.binaries.values().flat_map(|b| &b.tests) {
        let section = all
            .iter()
            .find(|p| p.name == test.name)
            .map_or("?", |p| p.readme);
        let verdict = match test.outcome {
            nextest::Outcome::Passed => "kept",
            nextest::Outcome::Failed => "BROKEN",
            nextest::Outcome::TimedOut => "BROKEN (stopped at its time limit)",
            nextest::Outcome::Skipped => "not checked",
        };
        println!(
            "| {} | {section} | {verdict} | {:.1} s |",
            test.name, test.seconds
        );
    }
}

/// `text` with the characters a nextest `/regex/` gives a meaning escaped.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_matched_literally() {
        assert_eq!(regex_escape("server-go"), "server-go");
        assert_eq!(regex_escape("a.b/c"), "a\\.b\\/c");
    }
}
