//! Runs `cargo test` with its standard output passed through line by line, adds up its
//! `test result:` lines, and prints one closing line for the whole run:
//! `tests: N passed, N failed` (cargo's own last line is the last test binary's, often a doc-test
//! run with 0 tests, which says nothing about the run).
use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, ExitStatus, Stdio},
};

use anyhow::{Context as _, Result};

/// Passed and failed tests over every `test result:` line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
}

impl Tally {
    /// Adds the counts of one line of `cargo test` output, if it is a `test result:` line.
    pub fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split([';', '.']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next())
                && let Ok(n) = n.parse::<u64>()
            {
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    _ => {}
                }
            }
        }
    }
}

/// Runs `cmd`, echoing its stdout, and returns its exit status and the tally.
pub fn run(cmd: &mut Command) -> Result<(ExitStatus, Tally)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .context("starting cargo test")?;
    let stdout = child.stdout.take().context("cargo test's stdout")?;
    let mut tally = Tally::default();
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test's output")?;
        tally.add_line(&line);
        writeln!(out, "{line}")?;
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok((status, tally))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_up_result_lines() {
        let mut t = Tally::default();
        for line in [
            "running 3 tests",
            "test result: ok. 16 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.48s",
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.2s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s",
            "test foo ... ok",
        ] {
            t.add_line(line);
        }
        assert_eq!(
            t,
            Tally {
                passed: 18,
                failed: 1
            }
        );
    }
}
