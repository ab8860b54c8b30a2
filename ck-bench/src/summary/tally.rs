//! "Met in K of N runs": how one goal fared over every record that is a run of the current
//! program ([`super::history::Current::counts`]). A goal is known across records by its table's
//! label, its row's metric and the goal with its columns; a void run is counted apart (its
//! goals were not judged).

use crate::record::Record;
use crate::table::{Table, Verdict};

use super::history::Current;

/// One goal of one table row, as records name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalKey {
    /// The scenario.
    pub scenario: String,
    /// The table's label (its title up to the first `:`).
    pub table: String,
    /// The row's metric.
    pub metric: String,
    /// The goal with the columns it names (`>= 0.98 (ck)`).
    pub goal: String,
}

impl GoalKey {
    /// The key of `verdict`, the goal of row `metric` of `table` in `scenario`.
    pub fn of(scenario: &str, table: &Table, metric: &str, verdict: &Verdict) -> GoalKey {
        GoalKey {
            scenario: scenario.to_string(),
            table: label(table).to_string(),
            metric: metric.to_string(),
            goal: verdict.goal_text(),
        }
    }
}

/// A table's label: its title up to the first `:`.
pub fn label(table: &Table) -> &str {
    table.title.split(':').next().unwrap_or_default()
}

/// How a goal fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Runs that met it.
    pub met: usize,
    /// Runs that judged it (met or not).
    pub judged: usize,
    /// Void runs (not judged).
    pub void: usize,
}

impl Tally {
    /// `; 3/5 runs met` (`, 1 void` when some were; `; 1 void` when every run was): short,
    /// since every goal line of BENCHMARKS.md carries one and the file has a word limit.
    /// Nothing when no run of the current code judged it (the block's header says **Earlier
    /// code** then).
    pub fn text(&self) -> String {
        let void = match self.void {
            0 => String::new(),
            n => format!(", {n} void"),
        };
        match (self.judged, self.void) {
            (0, 0) => String::new(),
            (0, n) => format!("; {n} void"),
            _ => format!("; {}/{} runs met{void}", self.met, self.judged),
        }
    }
}

/// How the goal `key` fared over the records that count for its scenario.
pub fn tally(key: &GoalKey, records: &[(String, Record)], current: &Current) -> Tally {
    let mut t = Tally::default();
    for (_, record) in records {
        if !current.counts(record, &key.scenario) {
            continue;
        }
        let verdicts = record
            .scenarios
            .iter()
            .filter(|s| s.scenario == key.scenario)
            .flat_map(|s| &s.tables)
            .filter(|table| label(table) == key.table)
            .flat_map(|table| &table.rows)
            .filter(|row| row.metric == key.metric)
            .filter_map(|row| row.goal.as_ref())
            .filter(|v| v.goal_text() == key.goal);
        for v in verdicts {
            match (v.void, v.met) {
                (true, _) => t.void += 1,
                (false, Some(met)) => {
                    t.judged += 1;
                    t.met += usize::from(met);
                }
                (false, None) => t.judged += 1,
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::record::tests::sample;

    /// The sample record (reload, one goal) at `commit`, the goal met or not (or void).
    fn run(commit: &str, met: Option<bool>, void: bool) -> (String, Record) {
        let mut r = sample();
        r.commit = commit.to_string();
        let v = r.scenarios[0].tables[0].rows[0].goal.as_mut().unwrap();
        v.met = met;
        v.void = void;
        (format!("{commit}.json"), r)
    }

    #[test]
    fn only_the_records_of_the_current_program_are_counted() {
        let records = vec![
            run("old", Some(true), false),
            run("new", Some(true), false),
            run("new", Some(false), false),
            run("new", Some(false), false),
            run("new", None, true),
        ];
        let current = Current {
            changed_since: BTreeMap::from([
                (
                    "old".to_string(),
                    Some(vec!["ck-ebpf/src/main.rs".to_string()]),
                ),
                ("new".to_string(), Some(vec!["README.md".to_string()])),
            ]),
        };
        let (_, first) = &records[0];
        let table = &first.scenarios[0].tables[0];
        let row = &table.rows[0];
        let key = GoalKey::of("reload", table, &row.metric, row.goal.as_ref().unwrap());
        let t = tally(&key, &records, &current);
        assert_eq!(
            t,
            Tally {
                met: 1,
                judged: 3,
                void: 1
            }
        );
        assert_eq!(t.text(), "; 1/3 runs met, 1 void");
        // Another scenario's goal of the same name is another goal.
        let other = GoalKey {
            scenario: "stall".into(),
            ..key
        };
        assert_eq!(tally(&other, &records, &current), Tally::default());
        assert_eq!(Tally::default().text(), "");
        let only_void = Tally {
            met: 0,
            judged: 0,
            void: 2,
        };
        assert_eq!(only_void.text(), "; 2 void");
    }
}
