//! The runner's order, the control pair, and tables laid out from rounds: medians with their
//! range, ratios round by round, goals on every column they name, void runs, `--against`
//! copies, the rules on the count of rounds.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::table::Unit;

/// A plan of `labels` (the first ck, `ck --no-bpf`, then `no supervisor`, any others ck).
fn plan(labels: &[&str], rounds: usize, against: Option<&str>) -> Plan {
    let contenders = labels
        .iter()
        .map(|l| match *l {
            NO_BPF => Contender::no_bpf(l, &[]),
            BARE => Contender::bare(),
            l => Contender::ck(l, &[]),
        })
        .collect();
    let against = against.map(|rev| (rev, Path::new("/old/ck")));
    Plan::new("test", rounds, contenders, Path::new("/new/ck"), against)
}

/// Rounds of one figure `key`: `rows[round][contender]` in the plan's column order.
fn rounds(plan: &Plan, key: &str, rows: &[&[f64]]) -> Vec<RoundFigures> {
    rows.iter()
        .map(|values| RoundFigures {
            order: plan.contenders().iter().map(|c| c.label.clone()).collect(),
            figures: plan
                .contenders()
                .iter()
                .zip(values.iter())
                .map(|(c, v)| (c.label.clone(), BTreeMap::from([(key.to_string(), *v)])))
                .collect(),
            seconds: 90.0,
        })
        .collect()
}

#[test]
fn the_order_rotates_from_round_to_round_and_turns_around() {
    let p = plan(&["a", "b", "c"], 7, None);
    let orders: Vec<Vec<usize>> = (0..7).map(|r| p.order(r)).collect();
    assert_eq!(
        orders,
        [
            [0, 1, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
            [0, 2, 1],
            [1, 0, 2],
            [0, 1, 2]
        ]
    );
    // Over as many rounds as contenders, each runs once in every position.
    for position in 0..3 {
        let mut seen: Vec<usize> = (0..3).map(|r| p.order(r)[position]).collect();
        seen.sort();
        assert_eq!(seen, [0, 1, 2]);
    }
    // Over twice that, each runs right after each other one.
    let mut follows = std::collections::BTreeSet::new();
    for order in &orders[..6] {
        follows.extend(order.windows(2).map(|w| (w[0], w[1])));
    }
    assert_eq!(follows.len(), 6);
}

#[test]
fn against_adds_a_copy_of_every_contender_that_runs_ck() {
    let p = plan(&["ck", NO_BPF, BARE], 7, Some("abc1234567"));
    let labels: Vec<&str> = p.contenders().iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "ck",
            "ck @abc1234567",
            "ck --no-bpf",
            "ck --no-bpf @abc1234567",
            "no supervisor"
        ]
    );
    assert_eq!(p.contenders()[1].bin, Path::new("/old/ck"));
    assert_eq!(p.contenders()[4].bin, Path::new("/new/ck"));
    assert!(p.contenders()[0].is_ck() && !p.contenders()[1].is_ck());
}

#[test]
fn a_control_pair_outside_its_bounds_voids_the_run_and_its_goals() {
    let keys = [("rps", "req/s")];
    let labels = ["ck", NO_BPF, BARE];
    let steady: &[&[f64]] = &[
        &[100.0, 100.0, 101.0],
        &[99.0, 98.0, 98.0],
        &[97.0, 99.0, 99.0],
    ];
    let p = plan(&labels, 7, None).control(Control::pair(NO_BPF, BARE, &keys));
    let m = Measured::new(p.clone(), rounds(&p, "rps", steady));
    assert_eq!(m.void, None);
    let noisy: &[&[f64]] = &[
        &[100.0, 94.0, 100.0],
        &[99.0, 93.0, 99.0],
        &[97.0, 99.0, 99.0],
    ];
    let m = Measured::new(p.clone(), rounds(&p, "rps", noisy));
    assert_eq!(
        m.void.as_deref(),
        Some(
            "void: control pair 0.94 (ck --no-bpf / no supervisor, req/s), outside 0.97-1.03: \
             the machine was too noisy"
        )
    );
    let mut t = Layout::new(&m, "t");
    t.ratios("ck / no supervisor", "rps", BARE)
        .goal(Goal::at_least(0.98, Unit::Ratio));
    let table = t.finish().unwrap();
    let verdict = table.rows[0].goal.as_ref().unwrap();
    assert!(verdict.void && verdict.met.is_none(), "{verdict:?}");
    assert!(table.render().contains("void: control pair 0.94"));
}

#[test]
fn medians_show_their_range_and_ratios_are_taken_round_by_round() {
    let p = plan(&["ck", NO_BPF], 7, None);
    let r: &[&[f64]] = &[&[100.0, 50.0], &[90.0, 60.0], &[120.0, 40.0]];
    let m = Measured::new(p.clone(), rounds(&p, "rps", r));
    let mut t = Layout::new(&m, "t");
    t.values("req/s", "rps", Unit::Rate("req/s"))
        .ratios("/ --no-bpf", "rps", NO_BPF)
        .total("all", "rps", Unit::Count);
    let table = t.finish().unwrap();
    assert_eq!(table.columns, ["ck", "ck --no-bpf"]);
    assert_eq!(table.title, "t; 3 rounds");
    let texts = |row: usize| -> Vec<String> {
        table.rows[row]
            .cells
            .iter()
            .map(|c| c.text.clone())
            .collect()
    };
    assert_eq!(texts(0), ["100 req/s (90-120)", "50 req/s (40-60)"]);
    // Per round: 2.0, 1.5, 3.0.
    assert_eq!(texts(1), ["2.00 (1.50-3.00)", ""]);
    assert_eq!(texts(2), ["310", "150"]);
}

/// The ratio of the medians is not the median of the rounds' ratios: one round's swing on the
/// reference moves the second, not the first.
#[test]
fn a_ratio_of_medians_divides_each_columns_median_by_the_references() {
    let p = plan(&["ck", NO_BPF], 7, None);
    let r: &[&[f64]] = &[&[60.0, 100.0], &[90.0, 60.0], &[100.0, 110.0]];
    let m = Measured::new(p.clone(), rounds(&p, "rps", r));
    let mut t = Layout::new(&m, "t");
    t.median_ratios("medians", "rps", NO_BPF)
        .ratios("rounds", "rps", NO_BPF);
    let table = t.finish().unwrap();
    // Medians 90 and 100; per round 0.60, 1.50, 0.91.
    assert_eq!(table.rows[0].cells[0].text, "0.90");
    assert_eq!(table.rows[0].cells[1].text, "");
    assert_eq!(table.rows[1].cells[0].text, "0.91 (0.60-1.50)");
}

#[test]
fn a_goal_is_met_only_when_every_column_it_names_meets_it() {
    let labels = ["round-robin", "least-queue", NO_BPF];
    let p = plan(&labels, 7, None);
    // Idle CPU %: round-robin's median 0.062, least-queue's 0.112.
    let r: &[&[f64]] = &[
        &[0.06, 0.11, 0.05],
        &[0.062, 0.112, 0.05],
        &[0.07, 0.2, 0.04],
    ];
    let m = Measured::new(p.clone(), rounds(&p, "idle", r));
    let mut t = Layout::new(&m, "t");
    // No columns named: ck's, both policies.
    t.values("idle", "idle", Unit::Percent(3))
        .goal(Goal::at_most(0.1, Unit::Percent(1)));
    t.values("idle", "idle", Unit::Percent(3))
        .goal(Goal::at_most(0.1, Unit::Percent(1)).of(&["round-robin"]));
    t.values("idle", "idle", Unit::Percent(3))
        .goal(Goal::at_most(0.1, Unit::Percent(1)).of(&["round-robin", "nowhere"]));
    let table = t.finish().unwrap();
    let verdict = |row: usize| table.rows[row].goal.clone().unwrap();
    assert_eq!(verdict(0).met, Some(false));
    assert_eq!(verdict(0).columns, ["round-robin", "least-queue"]);
    assert_eq!(
        verdict(0).text(),
        "<= 0.1 % (round-robin, least-queue): NOT met"
    );
    assert_eq!(verdict(1).met, Some(true));
    assert_eq!(verdict(2).met, None, "a named column without a value");
}

#[test]
fn against_puts_each_copy_beside_its_column_with_their_ratio() {
    let p = plan(&["ck", BARE], 7, Some("abc"));
    // Columns: ck, ck @abc, no supervisor.
    let r: &[&[f64]] = &[
        &[100.0, 50.0, 10.0],
        &[90.0, 45.0, 10.0],
        &[80.0, 20.0, 10.0],
    ];
    let m = Measured::new(p.clone(), rounds(&p, "rps", r));
    let mut t = Layout::with_columns(&m, "t", &["ck", BARE]);
    t.values("req/s", "rps", Unit::Count)
        .goal(Goal::at_least(85.0, Unit::Count).of(&["ck"]))
        .values("req/s again", "rps", Unit::Count)
        .detail();
    let table = t.finish().unwrap();
    assert_eq!(table.columns, ["ck", "ck @abc", "no supervisor"]);
    assert_eq!(table.rows[1].metric, "req/s: this build / @abc");
    assert_eq!(table.rows[1].cells[0].text, "2.00 (2.00-4.00)");
    // The goal is the figure's, not the comparison's; a detail is both.
    let goal = table.rows[0].goal.as_ref().unwrap();
    assert_eq!(goal.text(), ">= 85 (ck): met");
    assert!(table.rows[1].goal.is_none());
    assert!(!table.rows[0].detail && !table.rows[1].detail);
    assert!(table.rows[2].detail && table.rows[3].detail);
}

#[test]
fn the_count_of_rounds_follows_the_rules() {
    // A ratio goal within 5 % of 1 needs 7 rounds.
    assert!(check_round_count("s", 7, true).is_ok());
    let err = check_round_count("s", 5, true).unwrap_err();
    assert!(err.to_string().contains("at least 7"), "{err}");
    assert!(check_round_count("s", 2, false).is_err());
    assert!(check_round_count("s", 5, false).is_ok());
    // 3 only when a round takes over 60 s.
    assert_eq!(round_length_note(3, 90.0), None);
    assert_eq!(round_length_note(5, 20.0), None);
    let note = round_length_note(3, 45.0).unwrap();
    assert!(
        note.contains("rounds over 60 s, and these took 45 s"),
        "{note}"
    );
    // A layout with such a goal fails on too few planned rounds.
    let p = plan(&["ck", NO_BPF], 5, None);
    let m = Measured::new(p.clone(), rounds(&p, "rps", &[&[1.0, 1.0]]));
    let mut t = Layout::new(&m, "t");
    t.ratios("r", "rps", NO_BPF)
        .goal(Goal::at_least(0.98, Unit::Ratio));
    assert!(t.finish().is_err());
    // A layout of a full run that planned 3 short rounds says so.
    let p = plan(&["ck", NO_BPF], 3, None);
    let m = Measured::new(p.clone(), rounds(&p, "rps", &[&[1.0, 1.0]]));
    let mut t = Layout::new(&m, "t");
    t.values("r", "rps", Unit::Count);
    let mut short = m.clone();
    short.rounds[0].seconds = 30.0;
    assert!(t.finish().unwrap().notes.is_empty(), "90 s rounds");
    let mut t = Layout::new(&short, "t");
    t.values("r", "rps", Unit::Count);
    assert!(
        t.finish()
            .unwrap()
            .notes
            .iter()
            .any(|n| n.contains("took 30 s"))
    );
}
