//! Goals and their verdicts. [`Verdict`] is what a table row records: what was wanted, of
//! which columns, and whether it was met (or not judged: the run was void). [`Goal`] is the
//! goal of a single-run table (the first column's value, or the ratio column), for the
//! scenarios not yet measured in rounds; those in rounds use [`crate::rounds::Goal`].

use serde::{Deserialize, Serialize};

use super::Cell;

/// What a metric of a single-run table should be, and of which column.
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
    pub(super) fn verdict(&self, ck: &Cell, ratio: Option<f64>) -> Option<Verdict> {
        let (wanted, met) = match self {
            Goal::None => return None,
            Goal::AtMost(max, text) => ((*text).to_string(), ck.num.map(|v| v <= *max)),
            Goal::AtLeast(min, text) => ((*text).to_string(), ck.num.map(|v| v >= *min)),
            Goal::RatioAtMost(max) => (format!("ratio <= {max}"), ratio.map(|r| r <= *max)),
            Goal::RatioAtLeast(min) => (format!("ratio >= {min}"), ratio.map(|r| r >= *min)),
        };
        Some(Verdict {
            wanted,
            met,
            columns: Vec::new(),
            beside: Vec::new(),
            void: false,
        })
    }
}

/// A row's goal as measured: what was wanted, of which columns, and whether it was met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The goal, e.g. `<= 500 ms` or `>= 0.98`.
    pub wanted: String,
    /// Whether every column it names met it; `None` when a value was missing or the run was
    /// void.
    pub met: Option<bool>,
    /// The columns it was judged on (their medians); empty in a single-run table, whose goal
    /// is the first column's or the ratio column's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
    /// Columns shown beside the judged ones and not judged: a yardstick's, which says what the
    /// goal asks of any program.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub beside: Vec<String>,
    /// The run was void (its control pair differed): the goal was not judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub void: bool,
}

impl Verdict {
    /// The goal with the columns it names: `>= 0.98 (ck, ck --adopt)`.
    pub fn goal_text(&self) -> String {
        match self.columns.as_slice() {
            [] => self.wanted.clone(),
            columns => format!("{} ({})", self.wanted, columns.join(", ")),
        }
    }

    /// `<= 500 ms: met`, `...: NOT met`, `...: no value` or `...: not judged (void run)`.
    pub fn text(&self) -> String {
        let goal = self.goal_text();
        match (self.void, self.met) {
            (true, _) => format!("{goal}: not judged (void run)"),
            (false, Some(true)) => format!("{goal}: met"),
            (false, Some(false)) => format!("{goal}: NOT met"),
            (false, None) => format!("{goal}: no value"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_says_its_columns_and_whether_it_was_judged() {
        let mut v = Verdict {
            wanted: ">= 0.98".into(),
            met: Some(false),
            columns: vec!["ck".into(), "ck --adopt".into()],
            beside: Vec::new(),
            void: false,
        };
        assert_eq!(v.text(), ">= 0.98 (ck, ck --adopt): NOT met");
        v.void = true;
        v.met = None;
        assert_eq!(v.text(), ">= 0.98 (ck, ck --adopt): not judged (void run)");
        let old: Verdict = serde_json::from_str(r#"{"wanted": "<= 0.1 %", "met": true}"#).unwrap();
        assert_eq!(old.text(), "<= 0.1 %: met");
    }
}
