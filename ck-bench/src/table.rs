//! The result tables of `cargo xtask bench`: one row per metric with the value for ck, for the
//! `--no-bpf` baseline (and, in some scenarios, other supervisors), the ratio of the first two
//! and the goal (with whether ck meets it), rendered as aligned text. A table is also data:
//! `--record` writes it as JSON (`record.rs`) and BENCHMARKS.md's tables are drawn from that
//! (`summary.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ck_tests::load::LoadReport;
use serde::{Deserialize, Serialize};

/// One measured value: its text and, when it is a number, the number (for ratios and goals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// What the table shows.
    pub text: String,
    /// The number behind it, in the unit of its goal.
    pub num: Option<f64>,
}

impl Cell {
    /// A duration, shown and compared in milliseconds.
    pub fn ms(d: Duration) -> Cell {
        let ms = d.as_secs_f64() * 1000.0;
        let text = if ms < 10.0 {
            format!("{ms:.2} ms")
        } else {
            format!("{ms:.1} ms")
        };
        Cell {
            text,
            num: Some(ms),
        }
    }

    /// A duration that may be missing (`what` says why, e.g. `> 3 s`).
    pub fn ms_or(d: Option<Duration>, what: &str) -> Cell {
        d.map_or_else(|| Cell::text(what), Cell::ms)
    }

    /// A count.
    pub fn count(n: u64) -> Cell {
        Cell {
            text: n.to_string(),
            num: Some(n as f64),
        }
    }

    /// A ratio, two decimals.
    pub fn ratio(r: f64) -> Cell {
        Cell {
            text: format!("{r:.2}"),
            num: Some(r),
        }
    }

    /// A rate per second, `unit` naming what is counted (`req/s`).
    pub fn rate(r: f64, unit: &str) -> Cell {
        Cell {
            text: format!("{r:.0} {unit}"),
            num: Some(r),
        }
    }

    /// A size in bytes, shown and compared in MiB.
    pub fn mib(bytes: u64) -> Cell {
        let mib = bytes as f64 / (1024.0 * 1024.0);
        Cell {
            text: format!("{mib:.2} MiB"),
            num: Some(mib),
        }
    }

    /// The failed requests of `report`: the total, then refused/reset/timeout/other.
    pub fn failures(report: &LoadReport) -> Cell {
        Cell {
            text: format!(
                "{} ({}/{}/{}/{})",
                report.failed(),
                report.refused,
                report.reset,
                report.timeout,
                report.other
            ),
            num: Some(report.failed() as f64),
        }
    }

    /// Text without a number.
    pub fn text(text: &str) -> Cell {
        Cell {
            text: text.to_string(),
            num: None,
        }
    }
}

/// What a metric should be, and of which column.
#[derive(Debug, Clone, PartialEq)]
pub enum Goal {
    /// No goal.
    None,
    /// ck's value is at most this (in the cell's unit).
    AtMost(f64, &'static str),
    /// The first column's value is at least this (in the cell's unit).
    AtLeast(f64, &'static str),
    /// The ratio of the first two columns is at most this.
    RatioAtMost(f64),
    /// The ratio of the first two columns is at least this.
    RatioAtLeast(f64),
}

impl Goal {
    /// What is wanted and whether ck's value (or the ratio) meets it; `None` without a goal.
    fn verdict(&self, ck: &Cell, ratio: Option<f64>) -> Option<Verdict> {
        let (wanted, met) = match self {
            Goal::None => return None,
            Goal::AtMost(max, text) => ((*text).to_string(), ck.num.map(|v| v <= *max)),
            Goal::AtLeast(min, text) => ((*text).to_string(), ck.num.map(|v| v >= *min)),
            Goal::RatioAtMost(max) => (format!("ratio <= {max}"), ratio.map(|r| r <= *max)),
            Goal::RatioAtLeast(min) => (format!("ratio >= {min}"), ratio.map(|r| r >= *min)),
        };
        Some(Verdict { wanted, met })
    }
}

/// A row's goal as measured: what was wanted and whether it was met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The goal, e.g. `<= 500 ms` or `ratio <= 1`.
    pub wanted: String,
    /// Whether the value met it; `None` when there was no value to compare.
    pub met: Option<bool>,
}

impl Verdict {
    /// `<= 500 ms: met`, `...: NOT met` or `...: no value`.
    pub fn text(&self) -> String {
        let wanted = &self.wanted;
        match self.met {
            Some(true) => format!("{wanted}: met"),
            Some(false) => format!("{wanted}: NOT met"),
            None => format!("{wanted}: no value"),
        }
    }
}

/// One row of a [`Table`]: a metric, its value per column, the ratio of two of them, the goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// What is measured.
    pub metric: String,
    /// One value per column of the table.
    pub cells: Vec<Cell>,
    /// The ratio of the table's two ratio columns, when both are numbers.
    pub ratio: Option<f64>,
    /// The goal of the first column's value, if it has one.
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

/// A scenario's results: rows of metric | ck | baseline | ratio | goal (or more columns, for
/// scenarios that compare ck with other supervisors), and notes below. The data of a run's
/// record: what is printed is [`Table::render`] of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Table {
    /// What the table measures, and how.
    pub title: String,
    /// The contenders: ck first, then its baseline and peers.
    pub columns: Vec<String>,
    /// The columns divided in the ratio column: numerator, denominator (the baseline).
    pub ratio_of: (usize, usize),
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
            ratio_of: (0, 1),
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
        self.ratio_of = (over, under);
        if let (Some(a), Some(b)) = (self.columns.get(over), self.columns.get(under)) {
            self.notes.push(format!("ratio = {a} / {b}"));
        }
    }

    /// Adds a row with one cell per column; the goal applies to the first, the ratio is the
    /// first over the second (or the columns set with [`Table::ratio_between`]).
    pub fn row_of(&mut self, metric: &str, cells: Vec<Cell>, goal: Goal) {
        let (over, under) = self.ratio_of;
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

    /// The table as aligned text, title first, notes last.
    pub fn render(&self) -> String {
        let header = Line {
            metric: "metric".into(),
            cells: self.columns.clone(),
            ratio: "ratio".into(),
            goal: "goal".into(),
        };
        let lines: Vec<Line> = self
            .rows
            .iter()
            .map(|r| Line {
                metric: r.metric.clone(),
                cells: r.cells.iter().map(|c| c.text.clone()).collect(),
                ratio: r.ratio_text(),
                goal: r.goal_text(),
            })
            .collect();
        let all: Vec<&Line> = std::iter::once(&header).chain(&lines).collect();
        let n = self.columns.len();
        let mut widths = vec![all.iter().map(|r| r.metric.len()).max().unwrap_or(0)];
        for i in 0..n {
            widths.push(
                all.iter()
                    .map(|r| r.cells.get(i).map_or(0, String::len))
                    .max()
                    .unwrap_or(0),
            );
        }
        widths.push(all.iter().map(|r| r.ratio.len()).max().unwrap_or(0));
        let mut out = format!("{}\n", self.title);
        for (i, r) in all.iter().enumerate() {
            let mut fields = vec![format!("{:<w$}", r.metric, w = widths[0])];
            for c in 0..n {
                let cell = r.cells.get(c).map_or("", String::as_str);
                fields.push(format!("{cell:>w$}", w = widths[c + 1]));
            }
            fields.push(format!("{:>w$}", r.ratio, w = widths[n + 1]));
            fields.push(r.goal.clone());
            let _ = writeln!(out, "{}", fields.join(" | ").trim_end());
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

/// A row as text, for [`Table::render`].
struct Line {
    metric: String,
    cells: Vec<String>,
    ratio: String,
    goal: String,
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of `values`.
pub fn median_duration(values: &[Duration]) -> Duration {
    let secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(median(&secs))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
