//! `ck-bench SCENARIO --record`: one JSON file per run under `docs/bench/runs/`,
//! named `DATE-TIME-COMMIT.json`, written once and never edited: when and on which commit it
//! ran (and whether the tree had uncommitted changes), the machine (CPUs, kernel, CPU model),
//! its 1-minute load average before and after, and each scenario's tables as data
//! ([`Table`]). BENCHMARKS.md's tables are drawn from the latest record of each scenario
//! (`summary.rs`).

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

pub use ck_tests::machine::{Machine, Tree, load_average};

use crate::rounds::RoundFigures;
use crate::table::Table;

/// Where the records go, relative to the workspace root.
pub const RUNS_DIR: &str = "docs/bench/runs";

/// One run of `cargo xtask bench ... --record`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// When the run started, RFC 3339 in UTC (`2026-12-02T11:47:02Z`).
    pub date: String,
    /// The commit of the tree (10 hex digits).
    pub commit: String,
    /// Whether tracked files other than the bench's own output (BENCHMARKS.md, docs/bench/)
    /// differed from the commit.
    pub dirty: bool,
    /// The tracked files that differed (`git status --porcelain`), to tell whether ck's code
    /// was among them.
    pub changed: Vec<String>,
    /// Where it ran.
    pub machine: Machine,
    /// The 1-minute load average when the run started.
    pub load_before: Option<f64>,
    /// The 1-minute load average when it ended.
    pub load_after: Option<f64>,
    /// What was measured, in order.
    pub scenarios: Vec<ScenarioRun>,
}

/// One scenario of a run: its tables and the machine's load around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioRun {
    /// The scenario's name on the command line (`supervisor-cpu`).
    pub scenario: String,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// The 1-minute load average before it.
    pub load_before: Option<f64>,
    /// The 1-minute load average after it.
    pub load_after: Option<f64>,
    /// Its result tables, as printed.
    pub tables: Vec<Table>,
    /// Measured in rounds: every round's figures, as run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<RoundFigures>,
}

/// `time` as RFC 3339 in UTC, to the second.
pub fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Record {
    /// The record's file name: `2026-12-02-114702-4c813f3abc.json` (names sort by time).
    pub fn file_name(&self) -> String {
        let stamp: String = self
            .date
            .chars()
            .filter(|c| c.is_ascii_digit() || *c == 'T')
            .collect();
        // "20261202T114702" -> "2026-12-02-114702"
        let (day, time) = stamp.split_once('T').unwrap_or((&stamp, ""));
        let day = if day.len() == 8 {
            format!("{}-{}-{}", &day[..4], &day[4..6], &day[6..])
        } else {
            day.to_string()
        };
        format!("{day}-{time}-{}.json", self.commit)
    }

    /// Writes the record into `dir` as a new file (never over an existing one); returns its
    /// path.
    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(self.file_name());
        let mut json = serde_json::to_string_pretty(self).context("encoding the run record")?;
        json.push('\n');
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .with_context(|| {
                format!(
                    "creating {} (records are never overwritten: wait a second and run again)",
                    path.display()
                )
            })?;
        file.write_all(json.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// Every record in `dir`, by file name (oldest first), each with its file name.
    pub fn read_all(dir: &Path) -> Result<Vec<(String, Record)>> {
        let mut out = Vec::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        };
        for entry in entries {
            let path = entry
                .with_context(|| format!("reading {}", dir.display()))?
                .path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let text =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            let record: Record = serde_json::from_str(&text).with_context(|| {
                format!(
                    "{} is not a bench record (records are written by `cargo xtask bench \
                     SCENARIO --record` and never edited: restore it from git)",
                    path.display()
                )
            })?;
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            out.push((name, record));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::table::{Cell, Goal};

    /// A small record with one scenario of one table.
    pub(crate) fn sample() -> Record {
        let mut t = Table::new("reload: p99");
        t.row(
            "p99",
            Cell::rate(99.0, "req/s"),
            Cell::rate(100.0, "req/s"),
            Goal::RatioAtMost(1.0),
        );
        Record {
            date: "2026-12-02T11:47:02Z".into(),
            commit: "4c813f3abc".into(),
            dirty: false,
            changed: vec![],
            machine: Machine {
                cpus: 2,
                kernel: "6.18".into(),
                cpu: "x".into(),
            },
            load_before: Some(0.5),
            load_after: Some(1.25),
            scenarios: vec![ScenarioRun {
                scenario: "reload".into(),
                seconds: 90.0,
                load_before: Some(0.5),
                load_after: Some(1.25),
                tables: vec![t],
                rounds: vec![],
            }],
        }
    }

    #[test]
    fn names_sort_by_time_and_carry_the_commit() {
        assert_eq!(sample().file_name(), "2026-12-02-114702-4c813f3abc.json");
    }

    #[test]
    fn a_record_reads_back_as_written_and_is_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("ck-record-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let record = sample();
        record.write(&dir).unwrap();
        assert!(
            record.write(&dir).is_err(),
            "a second write must not replace the first"
        );
        let read = Record::read_all(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read, vec![(record.file_name(), record)]);
    }
}
