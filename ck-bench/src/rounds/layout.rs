//! A table laid out from rounds ([`Layout`]): rows of a figure's median (with the lowest and
//! highest round) per column, rows of per-round ratios against a reference column, totals, and
//! free rows; goals ([`Goal`]) judged on the medians of every column they name (by default the
//! columns of ck with its program, on the measured build); with `--against`, each ck column
//! beside its copy on the other build and a row of their per-round ratios; a void run's goals
//! not judged.

use anyhow::Result;

use crate::rounds::stats::Stat;
use crate::rounds::{Measured, check_round_count, round_length_note};
use crate::table::{Cell, Row, Table, Unit, Verdict};

/// What a row's medians should be, and of which columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    /// At most (`true`) or at least (`false`) `bound`.
    at_most: bool,
    /// The bound, in the row's unit.
    bound: f64,
    /// How the goal reads (`<= 0.1 %`).
    wanted: String,
    /// The columns it applies to; `None`: ck's (see [`crate::rounds::Contender::is_ck`]).
    columns: Option<Vec<String>>,
    /// Columns shown beside them, not judged ([`Goal::beside`]).
    beside: Vec<String>,
    /// It bounds a ratio.
    ratio: bool,
}

impl Goal {
    /// Every named column's median at most `bound` (shown as `<= bound`, with `unit`'s name).
    pub fn at_most(bound: f64, unit: Unit) -> Goal {
        Goal::new(true, bound, unit)
    }

    /// Every named column's median at least `bound`.
    pub fn at_least(bound: f64, unit: Unit) -> Goal {
        Goal::new(false, bound, unit)
    }

    fn new(at_most: bool, bound: f64, unit: Unit) -> Goal {
        let sign = if at_most { "<=" } else { ">=" };
        Goal {
            at_most,
            bound,
            wanted: format!("{sign} {}", unit.text(bound)),
            columns: None,
            beside: Vec::new(),
            ratio: unit == Unit::Ratio,
        }
    }

    /// Applied to these columns (their labels) instead of ck's.
    pub fn of(mut self, columns: &[&str]) -> Goal {
        self.columns = Some(columns.iter().map(|c| c.to_string()).collect());
        self
    }

    /// With these columns' medians shown beside the judged ones, not judged (a yardstick's,
    /// in BENCHMARKS.md too).
    pub fn beside(mut self, columns: &[&str]) -> Goal {
        self.beside = columns.iter().map(|c| c.to_string()).collect();
        self
    }

    /// Whether `value` meets it.
    fn meets(&self, value: f64) -> bool {
        if self.at_most {
            value <= self.bound
        } else {
            value >= self.bound
        }
    }

    /// Whether it is a ratio's bound within 5 % of 1 (its scenario needs
    /// [`crate::rounds::ROUNDS_NEAR_ONE`] rounds).
    pub fn near_one(&self) -> bool {
        self.ratio && (self.bound - 1.0).abs() <= 0.05 + 1e-9
    }
}

/// A table being laid out from `measured`.
pub struct Layout<'m> {
    measured: &'m Measured,
    table: Table,
    /// A ratio goal within 5 % of 1 was set.
    near_one: bool,
    /// The rows the last call added: its row, and with `--against` the row comparing the
    /// builds ([`Layout::values`]). A goal is about the first; a detail is all of them.
    last: std::ops::Range<usize>,
}

impl<'m> Layout<'m> {
    /// A table titled `title` with a column per contender, in the plan's order.
    pub fn new(measured: &'m Measured, title: &str) -> Layout<'m> {
        let labels: Vec<&str> = measured
            .plan
            .contenders()
            .iter()
            .map(|c| c.label.as_str())
            .collect();
        Layout::with_columns(measured, title, &labels)
    }

    /// A table titled `title` with these columns (contenders' labels, or anything a scenario
    /// fills with [`Layout::row`]); each ck column is followed by its `--against` copy.
    pub fn with_columns(measured: &'m Measured, title: &str, columns: &[&str]) -> Layout<'m> {
        let rounds = measured.rounds.len();
        let title = format!("{title}; {rounds} rounds");
        let mut layout = Layout::of_samples(measured, &title, columns);
        for (what, stat) in &measured.control {
            let text = Unit::Ratio.stat(*stat).text;
            layout.note(format!(
                "control pair {what}: {text} (within {}-{} or the run is void)",
                super::CONTROL_WITHIN.0,
                super::CONTROL_WITHIN.1
            ));
        }
        layout
    }

    /// A table of the same scenario whose rows are not rounds ([`Layout::samples`]: repeated
    /// measurements of one thing), titled `title` as it is.
    pub fn of_samples(measured: &'m Measured, title: &str, columns: &[&str]) -> Layout<'m> {
        let mut all = Vec::new();
        for c in columns {
            all.push(c.to_string());
            if let Some(copy) = measured.against_of(c)
                && !columns.contains(&copy.as_str())
            {
                all.push(copy);
            }
        }
        let table = Table {
            title: title.to_string(),
            columns: all,
            ratio_of: None,
            void: measured.void.clone(),
            rows: Vec::new(),
            notes: Vec::new(),
            plots: Vec::new(),
        };
        Layout {
            measured,
            table,
            near_one: false,
            last: 0..0,
        }
    }

    /// The columns.
    pub fn columns(&self) -> &[String] {
        &self.table.columns
    }

    /// The rounds it is laid out from.
    pub fn measured(&self) -> &'m Measured {
        self.measured
    }

    /// A row of `metric` with one cell per column, as given.
    pub fn row(&mut self, metric: &str, cells: Vec<Cell>) -> &mut Layout<'m> {
        let n = self.table.rows.len();
        self.last = n..n + 1;
        self.table.rows.push(Row {
            metric: metric.to_string(),
            cells,
            ratio: None,
            goal: None,
            detail: false,
        });
        self
    }

    /// A row of the figure `key`: each column's median over the rounds, in `unit`; with
    /// `--against`, followed by a row of each ck column over its copy, round by round (a goal
    /// set next is the first row's; a detail is both).
    pub fn values(&mut self, metric: &str, key: &str, unit: Unit) -> &mut Layout<'m> {
        let first = self.table.rows.len();
        let cells = self
            .table
            .columns
            .iter()
            .map(|c| unit.stat(self.measured.stat(c, key)))
            .collect();
        self.row(metric, cells);
        let pairs: Vec<(String, String)> = self
            .table
            .columns
            .iter()
            .filter_map(|c| Some((c.clone(), self.measured.against_of(c)?)))
            .collect();
        if let Some((_, copy)) = pairs.first() {
            let rev = copy.rsplit_once(" @").map_or("", |(_, r)| r);
            let cells = self
                .table
                .columns
                .iter()
                .map(|c| match pairs.iter().find(|(label, _)| label == c) {
                    Some((label, copy)) => Unit::Ratio.stat(self.measured.ratio(label, copy, key)),
                    None => Cell::text(""),
                })
                .collect();
            self.row(&format!("{metric}: this build / @{rev}"), cells);
        }
        self.last = first..self.table.rows.len();
        self
    }

    /// A row of the per-round ratio of each column to the column `reference` on the figure
    /// `key`: the median (lowest-highest) of the rounds' ratios; empty in the reference's own
    /// column.
    pub fn ratios(&mut self, metric: &str, key: &str, reference: &str) -> &mut Layout<'m> {
        let cells = self
            .table
            .columns
            .iter()
            .map(|c| match c.as_str() {
                c if c == reference => Cell::text(""),
                c => Unit::Ratio.stat(self.measured.ratio(c, reference, key)),
            })
            .collect();
        self.row(metric, cells)
    }

    /// A row of each column's median of `key` over the column `reference`'s median (one
    /// figure: how a goal worded "the median at least the reference's median" reads), empty in
    /// the reference's own column.
    pub fn median_ratios(&mut self, metric: &str, key: &str, reference: &str) -> &mut Layout<'m> {
        let median = |c: &str| self.measured.stat(c, key).map(|s| s.median);
        let under = median(reference);
        let cells = self
            .table
            .columns
            .iter()
            .map(|c| match (c == reference, median(c), under) {
                (true, _, _) => Cell::text(""),
                (false, Some(over), Some(under)) if under > 0.0 => Unit::Ratio.cell(over / under),
                _ => Cell::text("-"),
            })
            .collect();
        self.row(metric, cells)
    }

    /// A row of the sum of `key` over the rounds, per column.
    pub fn total(&mut self, metric: &str, key: &str, unit: Unit) -> &mut Layout<'m> {
        let cells = self
            .table
            .columns
            .iter()
            .map(|c| {
                self.measured
                    .total(c, key)
                    .map_or_else(|| Cell::text("-"), |t| unit.cell(t))
            })
            .collect();
        self.row(metric, cells)
    }

    /// A row of the statistics of `samples` (repeated measurements of one thing, not rounds of
    /// contenders) in the column `column`, the others empty.
    pub fn samples(
        &mut self,
        metric: &str,
        column: &str,
        samples: &[f64],
        unit: Unit,
    ) -> &mut Layout<'m> {
        let cells = self
            .table
            .columns
            .iter()
            .map(|c| match c == column {
                true => unit.stat(Stat::of(samples)),
                false => Cell::text(""),
            })
            .collect();
        self.row(metric, cells)
    }

    /// Judges the row added last by `goal` (of [`Layout::values`], its first row, not the
    /// comparison of the builds): met only if every column it names has a median that meets
    /// it; not judged in a void run.
    pub fn goal(&mut self, goal: Goal) -> &mut Layout<'m> {
        let columns: Vec<String> = match &goal.columns {
            Some(named) => named.clone(),
            None => self
                .table
                .columns
                .iter()
                .filter(|c| self.measured.contender(c).is_some_and(|c| c.is_ck()))
                .cloned()
                .collect(),
        };
        self.near_one |= goal.near_one();
        let void = self.measured.void.is_some();
        let Some(row) = self.table.rows.get_mut(self.last.start) else {
            return self;
        };
        let medians: Vec<Option<f64>> = columns
            .iter()
            .map(|name| {
                let i = self.table.columns.iter().position(|c| c == name)?;
                row.cells.get(i)?.num
            })
            .collect();
        let met = match void || columns.is_empty() {
            true => None,
            false => medians
                .iter()
                .try_fold(true, |all, m| m.map(|v| all && goal.meets(v))),
        };
        row.goal = Some(Verdict {
            wanted: goal.wanted,
            met,
            columns,
            beside: goal.beside,
            void,
        });
        self
    }

    /// Marks the rows the last call added a detail: printed and recorded, left out of
    /// BENCHMARKS.md.
    pub fn detail(&mut self) -> &mut Layout<'m> {
        for row in &mut self.table.rows[self.last.clone()] {
            row.detail = true;
        }
        self
    }

    /// Adds a line under the table.
    pub fn note(&mut self, note: impl Into<String>) -> &mut Layout<'m> {
        self.table.notes.push(note.into());
        self
    }

    /// Whether a goal set so far bounds a ratio within 5 % of 1.
    pub fn near_one(&self) -> bool {
        self.near_one
    }

    /// The table, once the scenario's count of rounds is checked against its goals
    /// ([`check_round_count`]) and, in a full run, against the length of its rounds
    /// ([`round_length_note`]).
    pub fn finish(mut self) -> Result<Table> {
        let plan = &self.measured.plan;
        check_round_count(&plan.scenario, plan.planned, self.near_one)?;
        let note = round_length_note(plan.planned, self.measured.round_seconds());
        if let Some(note) = note.filter(|_| !plan.quick) {
            eprintln!("ck-bench: {}: {note}", plan.scenario);
            self.table.notes.push(note);
        }
        Ok(self.table)
    }
}
