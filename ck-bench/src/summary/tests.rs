//! BENCHMARKS.md against the committed records, and the blocks drawn from sample records: the
//! latest record shown, every goal's count over the runs of the current program, details and
//! typed text left out, unknown and unclosed blocks refused.

use std::collections::BTreeMap;

use super::*;
use crate::record::tests::sample;
use crate::table::{Cell, Goal};

#[test]
fn benchmarks_md_is_what_the_committed_records_give() {
    // No figure in BENCHMARKS.md is typed: its blocks are the records, drawn again, and its
    // prose has none (the same check as `cargo xtask bench summary --check`).
    let root = crate::paths::workspace_root().unwrap();
    if let Err(e) = run(root, true) {
        panic!("{e:#}");
    }
}

/// Every record's commit counted as the current program's.
fn all_current(records: &[(String, Record)]) -> Current {
    Current {
        changed_since: records
            .iter()
            .map(|(_, r)| (r.commit.clone(), Some(vec![])))
            .collect(),
    }
}

#[test]
fn only_the_blocks_change_and_the_latest_record_is_shown_with_its_counts() {
    let mut older = sample();
    older.commit = "0ld0000000".into();
    older.scenarios[0].tables[0].rows[0].cells[0].text = "1 req/s".into();
    older.scenarios[0].tables[0].rows[0]
        .goal
        .as_mut()
        .unwrap()
        .met = Some(false);
    let mut newer = sample();
    newer.scenarios[0].tables[0].note("how it was measured");
    newer.scenarios[0].tables[0].note("control pair a / b: 1.00");
    let mut no_goal = crate::table::Table::new("cost: per selection");
    no_goal.row("ns", Cell::count(250), Cell::count(300), Goal::None);
    no_goal.row("ns max", Cell::count(7), Cell::count(8), Goal::None);
    no_goal.detail();
    newer.scenarios[0].tables.push(no_goal);
    let records = vec![
        ("2026-12-01-000000-0ld0000000.json".to_string(), older),
        ("2026-12-02-114702-4c813f3abc.json".to_string(), newer),
    ];
    let text = "# Hand\n\nprose\n<!-- bench:reload -->\ntyped 42\n<!-- /bench:reload -->\n\
                more prose\n<!-- bench:spread -->\n<!-- /bench:spread -->\n";
    let current = all_current(&records);
    let drawn = regenerate(text, &records, &current).unwrap();
    assert!(
        drawn.starts_with(
            "# Hand\n\nprose\n<!-- bench:reload -->\n*2026-12-02, `4c813f3abc`, one run, \
             [record](docs/bench/runs/2026-12-02-114702-4c813f3abc.json)*\n"
        ),
        "{drawn}"
    );
    assert!(
        !drawn.contains("typed 42") && !drawn.contains("1 req/s"),
        "{drawn}"
    );
    assert!(drawn.contains("**reload**: p99\n"), "{drawn}");
    assert!(
        drawn.contains("\n- p99: 0.99; ratio <= 1: **met**; 1/2 runs met\n"),
        "{drawn}"
    );
    assert!(
        !drawn.contains("how it was measured") && !drawn.contains("control pair"),
        "{drawn}"
    );
    // A table without goals shows its rows, but not its details.
    assert!(drawn.contains("| ns | 250 | 300 | 0.83 |"), "{drawn}");
    assert!(
        !drawn.contains("ns max"),
        "a detail row is left out: {drawn}"
    );
    assert!(
        !drawn.contains("Busy machine") && !drawn.contains("Earlier code"),
        "{drawn}"
    );
    assert!(
        drawn.contains("<!-- /bench:reload -->\nmore prose\n"),
        "{drawn}"
    );
    assert!(drawn.contains("No recorded run yet: `cargo xtask bench spread --record`"));
    // Drawing again changes nothing.
    assert_eq!(regenerate(&drawn, &records, &current).unwrap(), drawn);
    // When ck changed since the newer run, no run counts, and the block says so.
    let changed = Current {
        changed_since: BTreeMap::from([(
            "4c813f3abc".to_string(),
            Some(vec!["ck-userspace/src/main.rs".to_string()]),
        )]),
    };
    let drawn = regenerate(text, &records, &changed).unwrap();
    assert!(
        !drawn.contains("runs met") && drawn.contains("Earlier code"),
        "{drawn}"
    );
}

#[test]
fn a_yardstick_beside_a_goal_is_shown_after_its_verdict_and_not_judged() {
    let mut record = sample();
    let table = &mut record.scenarios[0].tables[0];
    let (judged, yardstick) = (table.columns[0].clone(), table.columns[1].clone());
    let value = table.rows[0].cells[1].text.clone();
    let verdict = table.rows[0].goal.as_mut().unwrap();
    verdict.columns = vec![judged];
    verdict.beside = vec![yardstick.clone()];
    let records = vec![("2026-12-02-114702-4c813f3abc.json".to_string(), record)];
    let text = "<!-- bench:reload -->\n<!-- /bench:reload -->\n";
    let drawn = regenerate(text, &records, &all_current(&records)).unwrap();
    assert!(
        drawn.contains(&format!(
            "**met**; 1/1 runs met; beside it, {yardstick}: {value}\n"
        )),
        "{drawn}"
    );
}

#[test]
fn a_busy_machine_is_said() {
    let mut busy = sample();
    busy.scenarios[0].load_after = Some(4.5);
    let records = vec![(busy.file_name(), busy)];
    let text = "<!-- bench:reload -->\n<!-- /bench:reload -->\n";
    let drawn = regenerate(text, &records, &all_current(&records)).unwrap();
    assert!(drawn.contains("Busy machine"));
}

#[test]
fn the_method_block_says_the_machine_and_how_long_all_takes() {
    let records = vec![(sample().file_name(), sample())];
    let text = "<!-- bench:method -->\n<!-- /bench:method -->\n";
    let drawn = regenerate(text, &records, &all_current(&records)).unwrap();
    assert!(drawn.contains("2 CPUs (x), kernel 6.18"), "{drawn}");
    // The sample's one scenario, reload, took 90 s.
    assert!(drawn.contains("takes about 2 minutes"), "{drawn}");
    assert!(
        drawn.contains("no record yet of recovery, upgrade"),
        "{drawn}"
    );
}

#[test]
fn unclosed_and_unknown_blocks_are_named() {
    let none = Current::default();
    let err = regenerate("<!-- bench:reload -->\n", &[], &none).unwrap_err();
    assert!(err.to_string().contains("<!-- /bench:reload -->"), "{err}");
    let err = regenerate("<!-- bench:nope -->\n<!-- /bench:nope -->", &[], &none).unwrap_err();
    assert!(err.to_string().contains("names no scenario"), "{err}");
}

#[test]
fn a_long_summary_is_refused() {
    assert!(refuse_long("few words").is_ok());
    let long = "word ".repeat(MAX_WORDS + 1);
    let err = refuse_long(&long).unwrap_err().to_string();
    assert!(err.contains("3001 words"), "{err}");
}
