//! Failed requests over rounds: a round's, by kind ([`Figures::failures`]), a row of their
//! totals over the rounds per column ([`Layout::failures`]: `3 (0/3/0/0)`, refused/reset/
//! timeout/other), and the first errors of each column, kept over the rounds for the notes
//! under a table ([`FailureNotes`]).

use std::collections::BTreeMap;

use ck_tests::load::LoadReport;

use super::{Figures, Layout};
use crate::table::Cell;

/// The kinds of failure, as the figures' keys end (after the total's key and `_`).
const KINDS: [&str; 4] = ["refused", "reset", "timeout", "other"];

impl Figures {
    /// Sets the failed requests of `report` as `key`, and each kind as `key_refused`,
    /// `key_reset`, `key_timeout` and `key_other`.
    pub fn failures(&mut self, key: &str, report: &LoadReport) -> &mut Figures {
        let kinds = [report.refused, report.reset, report.timeout, report.other];
        self.set(key, report.failed() as f64);
        for (kind, n) in KINDS.iter().zip(kinds) {
            self.set(&format!("{key}_{kind}"), n as f64);
        }
        self
    }
}

impl<'m> Layout<'m> {
    /// A row of the failures `key` ([`Figures::failures`]) summed over the rounds, per column:
    /// the total, then by kind (`3 (0/3/0/0)`, refused/reset/timeout/other); `-` for a column
    /// without them. A goal on it is judged on the totals.
    pub fn failures(&mut self, metric: &str, key: &str) -> &mut Layout<'m> {
        let measured = self.measured();
        let cells = self
            .columns()
            .iter()
            .map(|c| {
                let Some(total) = measured.total(c, key) else {
                    return Cell::text("-");
                };
                let kinds: Vec<String> = KINDS
                    .iter()
                    .map(|k| {
                        let n = measured.total(c, &format!("{key}_{k}")).unwrap_or(0.0);
                        format!("{n:.0}")
                    })
                    .collect();
                Cell {
                    text: format!("{total:.0} ({})", kinds.join("/")),
                    num: Some(total),
                }
            })
            .collect();
        self.row(&format!("{metric} (refused/reset/timeout/other)"), cells)
    }
}

/// The first errors of failed requests of each column, kept over the rounds.
#[derive(Debug, Clone, Default)]
pub struct FailureNotes {
    /// How many are kept per column.
    most: usize,
    /// Per column, its first errors.
    errors: BTreeMap<String, Vec<String>>,
}

impl FailureNotes {
    /// Keeps at most `most` errors per column.
    pub fn new(most: usize) -> FailureNotes {
        FailureNotes {
            most,
            errors: BTreeMap::new(),
        }
    }

    /// Keeps the errors of `report` as `label`'s, while it has fewer than the most.
    pub fn keep(&mut self, label: &str, report: &LoadReport) {
        let kept = self.errors.entry(label.to_string()).or_default();
        let room = self.most.saturating_sub(kept.len());
        kept.extend(report.errors.iter().take(room).cloned());
    }

    /// Adds a note under `t` for each error kept, in the order of `t`'s columns.
    pub fn note(&self, t: &mut Layout) {
        let columns: Vec<String> = t.columns().to_vec();
        for column in columns {
            for error in self.errors.get(&column).into_iter().flatten() {
                t.note(format!("{column} failure: {error}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rounds::{Contender, Measured, Plan, RoundFigures};

    #[test]
    fn failures_are_summed_over_the_rounds_by_kind() {
        let plan = Plan::new(
            "test",
            7,
            vec![Contender::ck("ck", &[]), Contender::ck("other", &[])],
            "/ck".as_ref(),
            None,
        );
        let round = |reset: f64| {
            let figures = BTreeMap::from([
                ("failed".to_string(), reset + 1.0),
                ("failed_refused".to_string(), 0.0),
                ("failed_reset".to_string(), reset),
                ("failed_timeout".to_string(), 1.0),
                ("failed_other".to_string(), 0.0),
            ]);
            RoundFigures {
                order: vec!["ck".into()],
                figures: BTreeMap::from([("ck".to_string(), figures)]),
                seconds: 10.0,
            }
        };
        let m = Measured::new(plan, vec![round(2.0), round(3.0)]);
        let mut t = Layout::new(&m, "t");
        t.failures("failed", "failed");
        let table = t.finish().unwrap();
        let row = &table.rows[0];
        assert_eq!(row.metric, "failed (refused/reset/timeout/other)");
        assert_eq!(row.cells[0].text, "7 (0/5/2/0)");
        assert_eq!(row.cells[0].num, Some(7.0));
        assert_eq!(row.cells[1].text, "-");
    }
}
