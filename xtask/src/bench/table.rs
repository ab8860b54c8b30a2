//! The result tables of `cargo xtask bench`: one row per metric with the value for ck, for the
//! `--no-bpf` baseline, their ratio and the goal (with whether ck meets it), rendered as
//! aligned text.

use std::fmt::Write as _;
use std::time::Duration;

use ck_tests::load::LoadReport;

/// One measured value: its text and, when it is a number, the number (for ratios and goals).
#[derive(Debug, Clone, PartialEq)]
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
    /// The ratio ck/baseline is at least this.
    RatioAtLeast(f64),
}

impl Goal {
    /// The goal column: what is wanted and whether ck's value (or the ratio) meets it.
    fn render(&self, ck: &Cell, ratio: Option<f64>) -> String {
        let (wanted, met) = match self {
            Goal::None => return String::new(),
            Goal::AtMost(max, text) => ((*text).to_string(), ck.num.map(|v| v <= *max)),
            Goal::RatioAtLeast(min) => (format!("ratio >= {min}"), ratio.map(|r| r >= *min)),
        };
        match met {
            Some(true) => format!("{wanted}: met"),
            Some(false) => format!("{wanted}: NOT met"),
            None => format!("{wanted}: no value"),
        }
    }
}

/// One row of a [`Table`].
#[derive(Debug, Clone)]
struct Row {
    metric: String,
    ck: String,
    baseline: String,
    ratio: String,
    goal: String,
}

/// A scenario's results: rows of metric | ck | baseline | ratio | goal, and notes below.
#[derive(Debug, Clone)]
pub struct Table {
    title: String,
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Table {
    /// An empty table titled `title`.
    pub fn new(title: &str) -> Table {
        Table {
            title: title.to_string(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row; the ratio is ck/baseline when both are numbers and the baseline is not 0.
    pub fn row(&mut self, metric: &str, ck: Cell, baseline: Cell, goal: Goal) {
        let ratio = match (ck.num, baseline.num) {
            (Some(a), Some(b)) if b != 0.0 => Some(a / b),
            _ => None,
        };
        self.rows.push(Row {
            metric: metric.to_string(),
            goal: goal.render(&ck, ratio),
            ratio: ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}")),
            ck: ck.text,
            baseline: baseline.text,
        });
    }

    /// Adds a line printed under the table.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The table as aligned text, title first, notes last.
    pub fn render(&self) -> String {
        let header = Row {
            metric: "metric".into(),
            ck: "ck".into(),
            baseline: "baseline".into(),
            ratio: "ratio".into(),
            goal: "goal".into(),
        };
        let all: Vec<&Row> = std::iter::once(&header).chain(&self.rows).collect();
        let width = |f: fn(&Row) -> &str| all.iter().map(|r| f(r).len()).max().unwrap_or(0);
        let w = [
            width(|r| &r.metric),
            width(|r| &r.ck),
            width(|r| &r.baseline),
            width(|r| &r.ratio),
        ];
        let mut out = format!("{}\n", self.title);
        for (i, r) in all.iter().enumerate() {
            let line = format!(
                "{:<w0$} | {:>w1$} | {:>w2$} | {:>w3$} | {}",
                r.metric,
                r.ck,
                r.baseline,
                r.ratio,
                r.goal,
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
            );
            let _ = writeln!(out, "{}", line.trim_end());
            if i == 0 {
                let rule = w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>();
                let _ = writeln!(out, "{}-|-{}", rule.join("-|-"), "-".repeat(4));
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "  {note}");
        }
        out
    }
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
            Goal::RatioAtLeast(0.98),
        );
        t.row(
            "time",
            Cell::ms(Duration::from_millis(600)),
            Cell::text("n/a"),
            Goal::AtMost(500.0, "<= 500 ms"),
        );
        let text = t.render();
        assert!(text.contains("0.99 | ratio >= 0.98: met"), "{text}");
        assert!(text.contains("- | <= 500 ms: NOT met"), "{text}");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
