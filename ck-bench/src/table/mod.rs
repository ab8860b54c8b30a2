//! The result tables of `ck-bench`: one row per metric with a value per column (ck, its
//! baselines, other supervisors; measured in rounds, the median with the rounds' range), in a
//! single-run table the ratio of two columns, and the goal with its verdict, rendered as
//! aligned text. A table is also data: `--record` writes it as JSON (`record.rs`) and
//! BENCHMARKS.md's tables are drawn from that (`summary/`). Tables measured in rounds are laid
//! out by [`crate::rounds::Layout`]; [`Table::row_of`] and [`Goal`] serve single-run tables.

mod cell;
mod goal;

/// Medians of single-run tables' repeated measurements.
pub use crate::rounds::stats::{median, median_duration};
pub use cell::{Cell, Unit};
pub use goal::{Goal, Verdict};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ck_tests::load::LoadReport;
use serde::{Deserialize, Serialize};

/// One row of a [`Table`]: a metric, its value per column, in a single-run table the ratio of
/// two of them, the goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// What is measured.
    pub metric: String,
    /// One value per column of the table.
    pub cells: Vec<Cell>,
    /// The ratio of the table's two ratio columns, when both are numbers.
    pub ratio: Option<f64>,
    /// The goal's verdict, if the row has a goal.
    pub goal: Option<Verdict>,
    /// A detail ([`Table::detail`]): printed and recorded, left out of BENCHMARKS.md.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detail: bool,
}

impl Row {
    /// The ratio as the table shows it: two decimals, `-` when there is none.
    pub fn ratio_text(&self) -> String {
        self.ratio
            .map_or_else(|| "-".to_string(), |r| format!("{r:.2}"))
    }

    /// The goal as the table shows it (empty without a goal).
    pub fn goal_text(&self) -> String {
        self.goal.as_ref().map(Verdict::text).unwrap_or_default()
    }
}

/// A scenario's results: rows of metric | a value per column | (ratio |) goal, and notes below.
/// The data of a run's record: what is printed is [`Table::render`] of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// What the table measures, and how.
    pub title: String,
    /// The columns: the contenders, ck first, then its baselines and peers (or what the
    /// scenario compares: worker counts, setups).
    pub columns: Vec<String>,
    /// A single-run table's ratio column: the columns divided, numerator and denominator (the
    /// baseline). Tables measured in rounds have none: their ratios are rows of per-round
    /// ratios.
    pub ratio_of: Option<(usize, usize)>,
    /// Why the run's goals were not judged (its control pair differed), if they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub void: Option<String>,
    /// One row per metric.
    pub rows: Vec<Row>,
    /// Lines printed under the table.
    pub notes: Vec<String>,
    /// SVG plots of the same results (recorded by file name: `docs/bench/` holds them).
    #[serde(serialize_with = "file_names")]
    pub plots: Vec<PathBuf>,
}

/// Serializes `paths` as their file names (a record does not name this machine's directories).
fn file_names<S: serde::Serializer>(paths: &[PathBuf], to: S) -> Result<S::Ok, S::Error> {
    to.collect_seq(
        paths
            .iter()
            .map(|p| p.file_name().unwrap_or_default().to_string_lossy()),
    )
}

impl Table {
    /// An empty table titled `title` with the columns ck and baseline.
    pub fn new(title: &str) -> Table {
        Table::with_columns(title, &["ck", "baseline"])
    }

    /// An empty table with these value columns; the ratio is first / second unless
    /// [`Table::ratio_against`] says otherwise.
    pub fn with_columns(title: &str, columns: &[&str]) -> Table {
        Table {
            title: title.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            ratio_of: Some((0, 1)),
            void: None,
            rows: Vec::new(),
            notes: Vec::new(),
            plots: Vec::new(),
        }
    }

    /// Adds a row; the ratio is ck/baseline when both are numbers and the baseline is not 0.
    pub fn row(&mut self, metric: &str, ck: Cell, baseline: Cell, goal: Goal) {
        self.row_of(metric, vec![ck, baseline], goal);
    }

    /// Makes the ratio column the first column over column `index` (0-based), for rows added
    /// from now on, and says so in a note.
    pub fn ratio_against(&mut self, index: usize) {
        self.ratio_between(0, index);
    }

    /// Makes the ratio column column `over` divided by column `under` (0-based), for rows
    /// added from now on, and says so in a note.
    pub fn ratio_between(&mut self, over: usize, under: usize) {
        self.ratio_of = Some((over, under));
        if let (Some(a), Some(b)) = (self.columns.get(over), self.columns.get(under)) {
            self.notes.push(format!("ratio = {a} / {b}"));
        }
    }

    /// Adds a row with one cell per column; the goal applies to the first, the ratio is the
    /// first over the second (or the columns set with [`Table::ratio_between`]).
    pub fn row_of(&mut self, metric: &str, cells: Vec<Cell>, goal: Goal) {
        let (over, under) = self.ratio_of.unwrap_or((0, 1));
        let ratio = match (
            cells.get(over).and_then(|c| c.num),
            cells.get(under).and_then(|c| c.num),
        ) {
            (Some(a), Some(b)) if b != 0.0 => Some(a / b),
            _ => None,
        };
        let first = cells.first().cloned().unwrap_or_else(|| Cell::text("-"));
        self.rows.push(Row {
            metric: metric.to_string(),
            goal: goal.verdict(&first, ratio),
            ratio,
            cells,
            detail: false,
        });
    }

    /// Marks the row added last as a detail (a max beside a p99, each round beside the
    /// median): printed and recorded, but BENCHMARKS.md's summary shows only the other rows.
    pub fn detail(&mut self) {
        if let Some(row) = self.rows.last_mut() {
            row.detail = true;
        }
    }

    /// Adds a line printed under the table.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The plots listed under the table.
    pub fn plots(&self) -> &[PathBuf] {
        &self.plots
    }

    /// Draws a plot with `draw` into `path` and lists it under the table; a plot that cannot be
    /// drawn is reported on stderr and left out (the table matters more).
    pub fn plot_with(&mut self, path: PathBuf, draw: impl FnOnce(&Path) -> anyhow::Result<()>) {
        match draw(&path) {
            Ok(()) => self.plots.push(path),
            Err(e) => eprintln!("bench: no plot {}: {e:#}", path.display()),
        }
    }

    /// Adds a note for each of the first `max` failed requests of `report`, named by `label`.
    pub fn failure_notes(&mut self, label: &str, report: &LoadReport, max: usize) {
        for error in report.errors.iter().take(max) {
            self.notes.push(format!("{label} failure: {error}"));
        }
    }

    /// The table as aligned text, title first (and why its goals were not judged, if the run
    /// was void), notes last.
    pub fn render(&self) -> String {
        let with_ratio = self.ratio_of.is_some();
        let line = |metric: &str, cells: Vec<String>, ratio: String, goal: String| {
            let mut fields = vec![metric.to_string()];
            fields.extend(cells);
            if with_ratio {
                fields.push(ratio);
            }
            fields.push(goal);
            fields
        };
        let mut lines = vec![line(
            "metric",
            self.columns.clone(),
            "ratio".into(),
            "goal".into(),
        )];
        for r in &self.rows {
            let mut cells: Vec<String> = r.cells.iter().map(|c| c.text.clone()).collect();
            cells.resize(self.columns.len(), String::new());
            lines.push(line(&r.metric, cells, r.ratio_text(), r.goal_text()));
        }
        // Every field but the goal (the last, left as it is) padded to its column's width.
        let aligned = lines[0].len() - 1;
        let widths: Vec<usize> = (0..aligned)
            .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        let mut out = format!("{}\n", self.title);
        if let Some(void) = &self.void {
            let _ = writeln!(out, "{void}");
        }
        for (i, fields) in lines.iter().enumerate() {
            let padded: Vec<String> = fields
                .iter()
                .enumerate()
                .map(|(c, f)| match c {
                    0 => format!("{f:<w$}", w = widths[0]),
                    c if c < aligned => format!("{f:>w$}", w = widths[c]),
                    _ => f.clone(),
                })
                .collect();
            let _ = writeln!(out, "{}", padded.join(" | ").trim_end());
            if i == 0 {
                let rule = widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>();
                let _ = writeln!(out, "{}-|-{}", rule.join("-|-"), "-".repeat(4));
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "  {note}");
        }
        for plot in &self.plots {
            let _ = writeln!(out, "  plot: {}", plot.display());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ratio_and_goals() {
        let mut t = Table::new("t");
        t.row(
            "rate",
            Cell::rate(99.0, "req/s"),
            Cell::rate(100.0, "req/s"),
            Goal::RatioAtMost(1.0),
        );
        t.row(
            "time",
            Cell::ms(Duration::from_millis(600)),
            Cell::text("n/a"),
            Goal::AtMost(500.0, "<= 500 ms"),
        );
        let text = t.render();
        assert!(text.contains("0.99 | ratio <= 1: met"), "{text}");
        assert!(text.contains("- | <= 500 ms: NOT met"), "{text}");
    }

    #[test]
    fn more_columns() {
        let mut t = Table::with_columns("t", &["a", "b", "c"]);
        t.row_of(
            "n",
            vec![Cell::count(2), Cell::count(4), Cell::count(8)],
            Goal::AtMost(3.0, "<= 3"),
        );
        let text = t.render();
        assert!(text.contains("metric | a | b | c | ratio | goal"), "{text}");
        assert!(
            text.contains("n      | 2 | 4 | 8 |  0.50 | <= 3: met"),
            "{text}"
        );
    }

    #[test]
    fn ratio_of_other_columns() {
        let mut t = Table::with_columns("t", &["2", "16", "64"]);
        t.ratio_between(2, 0);
        t.row_of(
            "ns",
            vec![Cell::count(200), Cell::count(250), Cell::count(300)],
            Goal::None,
        );
        let text = t.render();
        assert!(text.contains("| 300 |  1.50 |"), "{text}");
        assert!(text.contains("ratio = 64 / 2"), "{text}");
    }
}
