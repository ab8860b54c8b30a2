//! BENCHMARKS.md's tables, drawn from the run records (`record.rs`), never typed: between
//! `<!-- bench:SCENARIO -->` and `<!-- /bench:SCENARIO -->` goes the latest record of that
//! scenario (when and on which commit it ran, the machine's load, how many goals were met, one
//! Markdown table per result table without its detail rows, with its goal notes and plots; the
//! details and the other notes, such as every run's figures, stay in the record it links);
//! everything outside the markers is
//! hand-written and kept as it is. `cargo xtask bench summary` writes the file,
//! `--check` (and a unit test) fails when it is not what the committed records give.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::record::{self, Record, ScenarioRun};
use crate::table::Table;

/// The file the summary lives in, relative to the workspace root.
const SUMMARY: &str = "BENCHMARKS.md";

/// Draws the tables of `<root>/BENCHMARKS.md` from `<root>/docs/bench/runs`; with `check`,
/// compares instead of writing and fails on a difference.
pub fn run(root: &Path, check: bool) -> Result<()> {
    let path = root.join(SUMMARY);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let records = Record::read_all(&root.join(record::RUNS_DIR))?;
    let drawn = regenerate(&text, &records)?;
    if check {
        if drawn != text {
            bail!(
                "{} differs from what the records in {} give (a figure was typed or a record \
                 changed): run `cargo xtask bench summary` and commit the result",
                path.display(),
                record::RUNS_DIR
            );
        }
        println!("{SUMMARY}: every table matches the records");
    } else if drawn != text {
        fs::write(&path, &drawn).with_context(|| format!("writing {}", path.display()))?;
        println!("{SUMMARY}: tables drawn again from {}", record::RUNS_DIR);
    }
    Ok(())
}

/// `text` with every `<!-- bench:NAME -->` ... `<!-- /bench:NAME -->` block filled from the
/// latest of `records` (by file name) that measured NAME.
pub fn regenerate(text: &str, records: &[(String, Record)]) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!-- bench:") {
        let after_open = &rest[start + "<!-- bench:".len()..];
        let Some(close) = after_open.find(" -->") else {
            bail!("{SUMMARY}: a `<!-- bench:` marker is not closed with ` -->`");
        };
        let name = &after_open[..close];
        let open = format!("<!-- bench:{name} -->");
        let end_marker = format!("<!-- /bench:{name} -->");
        let body_start = start + open.len();
        let Some(end) = rest[body_start..].find(&end_marker) else {
            bail!("{SUMMARY}: `{open}` has no `{end_marker}` after it: add it");
        };
        out.push_str(&rest[..body_start]);
        out.push('\n');
        out.push_str(&block(name, records));
        out.push_str(&end_marker);
        rest = &rest[body_start + end + end_marker.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The Markdown between one scenario's markers.
fn block(name: &str, records: &[(String, Record)]) -> String {
    let latest = records.iter().rev().find_map(|(file, r)| {
        r.scenarios
            .iter()
            .find(|s| s.scenario == name)
            .map(|s| (file, r, s))
    });
    let Some((file, record, run)) = latest else {
        return format!(
            "*No recorded run yet: `cargo xtask bench {name} --record` writes one.*\n\n"
        );
    };
    let mut out = header(file, record, run);
    let labelled = run.tables.len() > 1;
    for table in &run.tables {
        out.push_str(&markdown(table, labelled));
    }
    out
}

/// When, where and how loaded the run was, and how many goals it met.
fn header(file: &str, record: &Record, run: &ScenarioRun) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "?".into(), |l| format!("{l:.2}"));
    let verdicts = run
        .tables
        .iter()
        .flat_map(|t| &t.rows)
        .filter_map(|r| r.goal.as_ref());
    let (goals, met) = verdicts.fold((0, 0), |(n, m), v| {
        (n + 1, m + usize::from(v.met == Some(true)))
    });
    let goals = match goals {
        0 => "no goal".to_string(),
        n => format!("goals met {met} of {n}"),
    };
    // Above 2 runnable tasks per CPU, the rates and latencies are the machine's more than ck's.
    let busiest = [run.load_before, run.load_after]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
    let busy = if busiest > 2.0 * record.machine.cpus as f64 {
        " **Busy machine: compare only the ratios.**"
    } else {
        ""
    };
    let dirty = if record.dirty { " + changes" } else { "" };
    format!(
        "*{} · commit `{}`{dirty} · {} CPUs · load {} -> {} · {:.0} s · {goals} · \
         [record](docs/bench/runs/{file})*{busy}\n\n",
        record
            .date
            .get(..16)
            .unwrap_or(&record.date)
            .replace('T', " ")
            + " UTC",
        record.commit,
        record.machine.cpus,
        load(run.load_before),
        load(run.load_after),
        run.seconds,
    )
}

/// One table as Markdown: its title's label (when `labelled`: the scenario has more than one
/// table), columns (contenders, ratio, goal), the notes that state a goal, plots.
fn markdown(table: &Table, labelled: bool) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    // The title's label; what it goes on to say of the setup is the prose's and the record's.
    let label = table.title.split(':').next().unwrap_or_default();
    let mut out = if labelled {
        format!("**{}**\n\n", cell(label))
    } else {
        String::new()
    };
    let mut head = vec!["metric".to_string()];
    head.extend(table.columns.iter().map(|c| cell(c)));
    let (over, under) = table.ratio_of.unwrap_or((0, 1));
    let ratio = match (table.columns.get(over), table.columns.get(under)) {
        (Some(a), Some(b)) => format!("{} / {}", cell(a), cell(b)),
        _ => "ratio".into(),
    };
    head.extend([ratio, "goal".into()]);
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let rule: Vec<&str> = std::iter::once("---")
        .chain(table.columns.iter().map(|_| "---:"))
        .chain(["---:", "---"])
        .collect();
    let _ = writeln!(out, "| {} |", rule.join(" | "));
    for row in table.rows.iter().filter(|r| !r.detail) {
        let mut fields = vec![cell(&row.metric)];
        fields.extend(
            (0..table.columns.len())
                .map(|i| row.cells.get(i).map_or_else(String::new, |c| cell(&c.text))),
        );
        fields.extend([row.ratio_text(), cell(&row.goal_text())]);
        let _ = writeln!(out, "| {} |", fields.join(" | "));
    }
    out.push('\n');
    // The summary stays short: the other notes (every run's figures, failures, how a figure is
    // taken) are in the record.
    let notes: Vec<&String> = table
        .notes
        .iter()
        .filter(|n| n.starts_with("goal"))
        .collect();
    for note in &notes {
        let _ = writeln!(out, "- {}", note.trim());
    }
    if !notes.is_empty() {
        out.push('\n');
    }
    for plot in &table.plots {
        let name = plot.file_name().unwrap_or_default().to_string_lossy();
        let _ = writeln!(out, "![{name}](docs/bench/{name})\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::tests::sample;
    use crate::table::{Cell, Goal};

    #[test]
    fn benchmarks_md_is_what_the_committed_records_give() {
        // No figure in BENCHMARKS.md's tables is typed: they are the records, drawn again.
        let root = crate::paths::workspace_root().unwrap();
        let text = fs::read_to_string(root.join(SUMMARY)).unwrap();
        let records = Record::read_all(&root.join(record::RUNS_DIR)).unwrap();
        let drawn = regenerate(&text, &records).unwrap();
        assert!(
            drawn == text,
            "BENCHMARKS.md differs from the records: run `cargo xtask bench summary`"
        );
    }

    #[test]
    fn only_the_blocks_change_and_the_latest_record_wins() {
        let mut older = sample();
        older.scenarios[0].tables[0].rows[0].cells[0].text = "1 req/s".into();
        let mut newer = sample();
        newer.scenarios[0].tables[0].note("how it was measured");
        newer.scenarios[0].tables[0].note("goal for x: met");
        let table = &mut newer.scenarios[0].tables[0];
        table.row("p99 max", Cell::count(7), Cell::count(8), Goal::None);
        table.detail();
        let records = vec![
            ("2026-12-01-000000-a.json".to_string(), older),
            ("2026-12-02-114702-4c813f3abc.json".to_string(), newer),
        ];
        let text = "# Hand\n\nprose\n<!-- bench:reload -->\ntyped 42\n<!-- /bench:reload -->\n\
                    more prose\n<!-- bench:spread -->\n<!-- /bench:spread -->\n";
        let drawn = regenerate(text, &records).unwrap();
        assert!(drawn.starts_with(
            "# Hand\n\nprose\n<!-- bench:reload -->\n*2026-12-02 11:47 UTC · commit `4c813f3abc` ·"
        ));
        assert!(
            !drawn.contains("typed 42") && !drawn.contains("| 1 req/s"),
            "{drawn}"
        );
        assert!(drawn.contains("| p99 | 99 req/s | 100 req/s | 0.99 | ratio <= 1: met |"));
        assert!(drawn.contains("goals met 1 of 1"), "{drawn}");
        assert!(drawn.contains("\n- goal for x: met\n"), "{drawn}");
        assert!(!drawn.contains("how it was measured"), "{drawn}");
        assert!(
            !drawn.contains("p99 max"),
            "a detail row is left out: {drawn}"
        );
        assert!(drawn.contains("load 0.50 -> 1.25"), "{drawn}");
        assert!(!drawn.contains("Busy machine"), "{drawn}");
        assert!(
            drawn.contains("<!-- /bench:reload -->\nmore prose\n"),
            "{drawn}"
        );
        assert!(drawn.contains("No recorded run yet: `cargo xtask bench spread --record`"));
        // Drawing again changes nothing.
        assert_eq!(regenerate(&drawn, &records).unwrap(), drawn);
    }

    #[test]
    fn a_busy_machine_is_said() {
        let mut busy = sample();
        busy.scenarios[0].load_after = Some(4.5);
        let records = vec![(busy.file_name(), busy)];
        let drawn = regenerate("<!-- bench:reload -->\n<!-- /bench:reload -->\n", &records);
        assert!(drawn.unwrap().contains("Busy machine"));
    }

    #[test]
    fn an_unclosed_block_names_the_missing_marker() {
        let err = regenerate("<!-- bench:reload -->\n", &[]).unwrap_err();
        assert!(err.to_string().contains("<!-- /bench:reload -->"), "{err}");
    }
}
