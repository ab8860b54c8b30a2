//! The Markdown of BENCHMARKS.md's generated blocks: a scenario's block ([`scenario_block`]:
//! its latest record — when, where, whether one run, whether busy or void — and each table
//! with its setup, its rows but the details, each goal's verdict with "K/N runs met" over
//! the records of the current program, its control pair, its plots) and the method's block
//! ([`method_block`]: the machine, the rules on rounds and the control pair, how long `all`
//! takes), all drawn from the records and the code, never typed.

use std::fmt::Write as _;

use crate::record::{Record, ScenarioRun};
use crate::rounds::{CONTROL_WITHIN, LONG_ROUND_SECS, ROUNDS_LEAST, ROUNDS_NEAR_ONE};
use crate::scenario::{ALL, Scenario};
use crate::table::{Row, Table, Verdict};

use super::history::Current;
use super::tally::{GoalKey, label, tally};

/// The latest record of `name`, with its file name.
fn latest<'r>(
    name: &str,
    records: &'r [(String, Record)],
) -> Option<(&'r str, &'r Record, &'r ScenarioRun)> {
    records.iter().rev().find_map(|(file, r)| {
        r.scenarios
            .iter()
            .find(|s| s.scenario == name)
            .map(|s| (file.as_str(), r, s))
    })
}

/// The Markdown between one scenario's markers.
pub fn scenario_block(name: &str, records: &[(String, Record)], current: &Current) -> String {
    let Some((file, record, run)) = latest(name, records) else {
        return format!(
            "*No recorded run yet: `cargo xtask bench {name} --record` writes one.*\n\n"
        );
    };
    let mut out = header(file, record, run, current.counts(record, name));
    for table in &run.tables {
        out.push_str(&markdown(name, table, records, current));
    }
    out
}

/// When and on which commit the run was, whether it was one run (a run in rounds says how
/// many in each table's title), whether the machine was busy, and whether it is a run of the
/// current program. (The load averages themselves are in the record.)
fn header(file: &str, record: &Record, run: &ScenarioRun, counts: bool) -> String {
    let rounds = match run.rounds.len() {
        0 => " one run,",
        _ => "",
    };
    // Above 2 runnable tasks per CPU, the rates and latencies are the machine's more than ck's.
    let busiest = [run.load_before, run.load_after]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
    let busy = if busiest > 2.0 * record.machine.cpus as f64 {
        " **Busy machine.**"
    } else {
        ""
    };
    let dirty = if record.dirty { " + changes" } else { "" };
    let older = if counts { "" } else { " **Earlier code.**" };
    format!(
        "*{}, `{}`{dirty},{rounds} [record](docs/bench/runs/{file})*{busy}{older}\n\n",
        record.date.get(..10).unwrap_or(&record.date),
        record.commit,
    )
}

/// One table as Markdown: its title (its label, then the setup), whether void, then its goals,
/// one a line (each with the medians it was judged on, this run's verdict and the count over
/// the runs of the current code), or without goals its rows but the details; its plots. (The
/// control pair's figures and the other notes are in the record.)
fn markdown(
    scenario: &str,
    table: &Table,
    records: &[(String, Record)],
    current: &Current,
) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let title = &table.title;
    let name = label(table);
    let setup = title[name.len()..].trim_start_matches(':').trim();
    let mut out = match setup {
        "" => format!("**{}**\n\n", cell(name)),
        setup => format!("**{}**: {}\n\n", cell(name), cell(setup)),
    };
    if let Some(void) = &table.void {
        let _ = writeln!(out, "**{}**\n", cell(void));
    }
    let goals: Vec<_> = table
        .rows
        .iter()
        .filter_map(|r| Some((r, r.goal.as_ref()?)))
        .collect();
    if goals.is_empty() {
        out.push_str(&rows(table));
    } else {
        for (row, verdict) in goals {
            let key = GoalKey::of(scenario, table, &row.metric, verdict);
            let this = match (verdict.void, verdict.met) {
                (true, _) => "void",
                (false, Some(true)) => "met",
                (false, Some(false)) => "NOT met",
                (false, None) => "no value",
            };
            // Several columns are named with their values already: the goal need not repeat them.
            let goal = match verdict.columns.len() {
                0 | 1 => verdict.goal_text(),
                _ => verdict.wanted.clone(),
            };
            let _ = writeln!(
                out,
                "- {}: {}; {goal}: **{this}**{}{}",
                row.metric,
                judged(table, row, verdict),
                tally(&key, records, current).text(),
                beside(table, row, verdict)
            );
        }
        out.push('\n');
    }
    for plot in &table.plots {
        let name = plot.file_name().unwrap_or_default().to_string_lossy();
        let _ = writeln!(out, "![{name}](docs/bench/{name})\n");
    }
    out
}

/// The values a goal was judged on: each named column's median (with its range); in a
/// single-run table, the ratio column's or the first column's value.
fn judged(table: &Table, row: &Row, verdict: &Verdict) -> String {
    let value = |name: &String| {
        let i = table.columns.iter().position(|c| c == name)?;
        Some(row.cells.get(i)?.text.clone())
    };
    match verdict.columns.as_slice() {
        [] if verdict.wanted.starts_with("ratio") => row.ratio_text(),
        [] => row
            .cells
            .first()
            .map_or_else(String::new, |c| c.text.clone()),
        [one] => value(one).unwrap_or_else(|| "-".into()),
        many => many
            .iter()
            .map(|c| format!("{c}: {}", value(c).unwrap_or_else(|| "-".into())))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The columns shown beside a goal's, with their medians: `; beside it, remembering: 1.79
/// (1.31-1.95)` (nothing without them).
fn beside(table: &Table, row: &Row, verdict: &Verdict) -> String {
    verdict
        .beside
        .iter()
        .filter_map(|name| {
            let i = table.columns.iter().position(|c| c == name)?;
            Some(format!("; beside it, {name}: {}", row.cells.get(i)?.text))
        })
        .collect()
}

/// A table without goals: its rows but the details, and a single-run table's ratio column.
fn rows(table: &Table) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::new();
    let mut head = vec!["metric".to_string()];
    head.extend(table.columns.iter().map(|c| cell(c)));
    let ratio = table.ratio_of.map(|(over, under)| {
        match (table.columns.get(over), table.columns.get(under)) {
            (Some(a), Some(b)) => format!("{} / {}", cell(a), cell(b)),
            _ => "ratio".into(),
        }
    });
    head.extend(ratio.clone());
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let rule: Vec<&str> = std::iter::once("---")
        .chain(table.columns.iter().map(|_| "---:"))
        .chain(ratio.iter().map(|_| "---:"))
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for row in table.rows.iter().filter(|r| !r.detail) {
        let mut fields = vec![cell(&row.metric)];
        fields.extend(
            (0..table.columns.len())
                .map(|i| row.cells.get(i).map_or_else(String::new, |c| cell(&c.text))),
        );
        if ratio.is_some() {
            fields.push(row.ratio_text());
        }
        let _ = writeln!(out, "| {} |", fields.join(" | "));
    }
    out.push('\n');
    out
}

/// The method's figures: the machine of the latest record, the rules on rounds and on the
/// control pair, and how long `all` takes (the latest run of each scenario, added up).
pub fn method_block(records: &[(String, Record)]) -> String {
    let mut out = String::new();
    if let Some((_, r)) = records.last() {
        let m = &r.machine;
        let _ = writeln!(
            out,
            "- **Machine** (the latest record): {} CPUs ({}), kernel {}.",
            m.cpus, m.cpu, m.kernel
        );
    }
    let (low, high) = CONTROL_WITHIN;
    let _ = writeln!(
        out,
        "- **Rounds**: at least {ROUNDS_NEAR_ONE} with a ratio goal within 5 % of 1; at least \
         {ROUNDS_LEAST}, and {ROUNDS_LEAST} only for rounds over {LONG_ROUND_SECS:.0} s. The \
         **control pair**'s median ratio within {low}-{high}, or the run is void."
    );
    let mut seconds = 0.0;
    let mut missing = Vec::new();
    for s in ALL {
        match latest(&s.name(), records) {
            Some((_, _, run)) => seconds += run.seconds,
            None => missing.push(s.name()),
        }
    }
    let missing = match missing.len() {
        0 => String::new(),
        _ => format!(" (no record yet of {})", missing.join(", ")),
    };
    let _ = writeln!(
        out,
        "- **`all`** takes about {:.0} minutes (its {} scenarios' latest runs{missing}).",
        seconds / 60.0,
        ALL.len()
    );
    out.push('\n');
    out
}

/// The Markdown between the markers of `name`: the method's or a scenario's; `None` for a name
/// that is neither.
pub fn block(name: &str, records: &[(String, Record)], current: &Current) -> Option<String> {
    match name {
        "method" => Some(method_block(records)),
        name => Scenario::named(name).map(|_| scenario_block(name, records, current)),
    }
}
