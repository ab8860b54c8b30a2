//! Tables of the scenarios whose contenders form a grid: one contender per column (a fleet, a
//! worker count, a `--udp-mode`) and row (a policy, a load, what the clients do), labelled
//! `COLUMN, ROW` ([`label`]). A table of 15 contenders side by side would not read; laid out as
//! the grid it does: a column per column of the grid (and with `--against` its copy on the
//! other build, `COLUMN @REV`, [`columns`]), a row per row, each cell the contender's median (or
//! total, or per-round ratio) over the rounds.

use crate::rounds::Measured;
use crate::table::{Cell, Unit};

/// The label of the contender in `column` and `row`.
pub fn label(column: &str, row: &str) -> String {
    format!("{column}, {row}")
}

/// The label of the contender in the table's column `column` (a grid column, or its copy
/// `COLUMN @REV`) and `row`: `COLUMN, ROW` or `COLUMN, ROW @REV` (the copy's label, see
/// [`crate::rounds::Plan::new`]).
pub fn contender(column: &str, row: &str) -> String {
    match column.split_once(" @") {
        Some((column, rev)) => format!("{} @{rev}", label(column, row)),
        None => label(column, row),
    }
}

/// The table's columns: each of `grid`, followed (with `--against`) by its copy on the other
/// build when one of its contenders has one.
pub fn columns(m: &Measured, grid: &[&str]) -> Vec<String> {
    let mut all = Vec::new();
    for column in grid {
        all.push(column.to_string());
        let copy = m.plan.contenders().iter().find_map(|c| {
            let rev = c.build.as_ref()?;
            let prefix = format!("{column}, ");
            c.label
                .starts_with(&prefix)
                .then(|| format!("{column} @{rev}"))
        });
        all.extend(copy);
    }
    all
}

/// Per column, the median of `key` of the contender in `row` (`-` where there is none).
pub fn medians(m: &Measured, columns: &[String], row: &str, key: &str, unit: Unit) -> Vec<Cell> {
    columns
        .iter()
        .map(|c| unit.stat(m.stat(&contender(c, row), key)))
        .collect()
}

/// Per column, the sum of `key` over the rounds of the contender in `row`.
pub fn totals(m: &Measured, columns: &[String], row: &str, key: &str, unit: Unit) -> Vec<Cell> {
    columns
        .iter()
        .map(|c| {
            m.total(&contender(c, row), key)
                .map_or_else(|| Cell::text("-"), |t| unit.cell(t))
        })
        .collect()
}

/// Per column, the per-round ratio of `key` of the contender in `row` to the one in the column
/// `reference` (the reference's copy, for a copy's column); empty in the reference's own.
pub fn ratios(
    m: &Measured,
    columns: &[String],
    row: &str,
    key: &str,
    reference: &str,
) -> Vec<Cell> {
    columns
        .iter()
        .map(|c| {
            let (base, rev) = match c.split_once(" @") {
                Some((base, rev)) => (base, Some(rev)),
                None => (c.as_str(), None),
            };
            if base == reference {
                return Cell::text("");
            }
            let under = match rev {
                Some(rev) => format!("{reference} @{rev}"),
                None => reference.to_string(),
            };
            Unit::Ratio.stat(m.ratio(&contender(c, row), &contender(&under, row), key))
        })
        .collect()
}

/// `cells` (one per column) kept in the grid column `column` and its copy on the other build,
/// blank in every other column: a row about one column of the grid.
pub fn only(columns: &[String], column: &str, cells: Vec<Cell>) -> Vec<Cell> {
    columns
        .iter()
        .zip(cells)
        .map(|(c, cell)| {
            let base = c.split_once(" @").map_or(c.as_str(), |(base, _)| base);
            match base == column {
                true => cell,
                false => Cell::text(""),
            }
        })
        .collect()
}

/// With `--against`, per column the per-round ratio of `key` of the contender in `row` on this
/// build to its copy on the other (empty in the copies' columns); `None` without `--against`.
pub fn against(m: &Measured, columns: &[String], row: &str, key: &str) -> Option<Vec<Cell>> {
    let rev = m.plan.contenders().iter().find_map(|c| c.build.clone())?;
    Some(
        columns
            .iter()
            .map(|c| match c.contains(" @") {
                true => Cell::text(""),
                false => Unit::Ratio.stat(m.ratio(
                    &label(c, row),
                    &contender(&format!("{c} @{rev}"), row),
                    key,
                )),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Contender, Plan, RoundFigures};

    #[test]
    fn a_grid_has_a_column_per_column_and_its_copy_and_cells_per_row() {
        let contenders = ["a", "b"]
            .iter()
            .flat_map(|c| ["x", "y"].map(|r| Contender::ck(&label(c, r), &[])))
            .collect();
        let plan = Plan::new(
            "grid",
            3,
            contenders,
            "/ck".as_ref(),
            Some(("abc", "/old/ck".as_ref())),
        );
        let value = |label: &str| match (label.starts_with('a'), label.contains(" @")) {
            (true, false) => 2.0,
            (true, true) => 4.0,
            (false, false) => 6.0,
            (false, true) => 8.0,
        };
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let f = BTreeMap::from([("n".to_string(), value(&c.label))]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 1.0,
        };
        let m = Measured::new(plan.clone(), (0..3).map(round).collect());
        let columns = columns(&m, &["a", "b"]);
        assert_eq!(columns, ["a", "a @abc", "b", "b @abc"]);
        assert_eq!(contender("a @abc", "x"), "a, x @abc");
        let text = |cells: Vec<Cell>| cells.into_iter().map(|c| c.text).collect::<Vec<_>>();
        assert_eq!(
            text(medians(&m, &columns, "y", "n", Unit::Count)),
            ["2", "4", "6", "8"]
        );
        assert_eq!(
            text(totals(&m, &columns, "x", "n", Unit::Count)),
            ["6", "12", "18", "24"]
        );
        assert_eq!(
            text(ratios(&m, &columns, "x", "n", "a")),
            ["", "", "3.00", "2.00"]
        );
        assert_eq!(
            text(against(&m, &columns, "x", "n").unwrap()),
            ["0.50", "", "0.75", ""]
        );
        assert_eq!(text(medians(&m, &columns, "z", "n", Unit::Count))[0], "-");
        let only_b = only(&columns, "b", medians(&m, &columns, "y", "n", Unit::Count));
        assert_eq!(text(only_b), ["", "", "6", "8"]);
    }
}
