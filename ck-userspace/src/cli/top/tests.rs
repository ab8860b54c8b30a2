//! Unit tests of `ck top` without a terminal: rates, states, formatting, the text frame, keys
//! and the selection.
use ck::control::StatusReport;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use serde_json::{Value, json};

use super::{
    keys::{Action, Selection, action_of},
    model::{Frame, fmt_bytes, fmt_cpu, fmt_rate, rate, uptime},
    text,
};

/// A slot of a report: `(slot, pid, state, selected, cpu_ms)`.
fn slot(index: u32, pid: Option<u32>, state: &str, selected: u64, cpu_ms: Option<u64>) -> Value {
    json!({
        "slot": index, "pid": pid, "state": state, "drained": false, "uptime_ms": 5_000,
        "restarts": 1, "generation": 2, "selected": selected, "fallbacks": 0, "migrated": 0,
        "breaker": "closed", "queue_depth": 3, "probe_hits": 0, "memory_bytes": 2 * 1048576,
        "cpu_ms": cpu_ms, "spare": false,
    })
}

/// A report of supervisor `pid` at `uptime_ms` with `slots`.
fn report(pid: u32, uptime_ms: u64, slots: Vec<Value>) -> StatusReport {
    serde_json::from_value(json!({
        "name": "web", "pid": pid, "bpf": true, "steering": [], "policy": "round-robin",
        "groups": ["tcp4-8080"], "listen": ["0.0.0.0:8080"], "probe_port_base": 19800,
        "uptime_ms": uptime_ms, "active": [0, 1], "fallback": [], "degraded": [], "foreign": [],
        "min_workers": 1, "adopt": false, "dropped": 0, "stopping": false, "reloading": false,
        "migration": true, "workers": 2, "slots": slots,
    }))
    .expect("a valid report")
}

#[test]
fn rates_are_counter_differences_over_time_and_survive_a_reset() {
    assert_eq!(rate(100, 300, 2.0), 100.0);
    assert_eq!(rate(300, 300, 1.0), 0.0);
    // The slot was reused meanwhile: its counter started again from zero.
    assert_eq!(rate(300, 40, 1.0), 40.0);
}

#[test]
fn a_frame_needs_two_reports_for_rates() {
    let first = report(7, 10_000, vec![slot(0, Some(11), "ready", 50, Some(100))]);
    let frame = Frame::new(None, &first);
    assert_eq!(frame.interval_s, None);
    assert_eq!(frame.rows[0].conn_rate, None);
    assert_eq!(frame.rows[0].cpu_percent, None);
    assert_eq!(frame.totals.conn_rate, None);
    assert!(text::render(&frame).contains("rates need two reports"));
}

#[test]
fn rates_come_from_the_supervisors_clock() {
    let before = report(
        7,
        10_000,
        vec![
            slot(0, Some(11), "ready", 50, Some(100)),
            slot(1, Some(12), "ready", 70, Some(100)),
        ],
    );
    let after = report(
        7,
        12_000,
        vec![
            slot(0, Some(11), "ready", 250, Some(600)),
            // A new worker on slot 1: its CPU time started again.
            slot(1, Some(13), "starting", 90, Some(10)),
            // A slot that is new since the first report counts from zero.
            slot(2, Some(14), "ready", 8, None),
        ],
    );
    let frame = Frame::new(Some(&before), &after);
    assert_eq!(frame.interval_s, Some(2.0));
    let rates: Vec<_> = frame.rows.iter().map(|r| r.conn_rate).collect();
    assert_eq!(rates, vec![Some(100.0), Some(10.0), Some(4.0)]);
    let cpu: Vec<_> = frame.rows.iter().map(|r| r.cpu_percent).collect();
    assert_eq!(cpu, vec![Some(25.0), None, None]);
    assert_eq!(frame.totals.conn_rate, Some(114.0));
    assert_eq!(frame.totals.cpu_percent, Some(25.0));
    assert_eq!(frame.totals.memory, Some(6 * 1048576));
    assert_eq!((frame.totals.slots, frame.totals.ready), (3, 2));
    assert_eq!(frame.totals.selected, 348);

    // Another supervisor under the same name: nothing to compare with.
    let restarted = report(8, 500, vec![slot(0, Some(21), "ready", 3, Some(1))]);
    assert_eq!(Frame::new(Some(&after), &restarted).interval_s, None);
}

#[test]
fn states_say_what_qualifies_them() {
    let mut drained = slot(0, Some(11), "draining", 0, None);
    drained["drained"] = json!(true);
    let mut sick = slot(1, Some(12), "unhealthy", 0, None);
    sick["unhealthy"] = json!("probe");
    let mut spare = slot(2, Some(13), "standby", 0, None);
    spare["spare"] = json!(true);
    let mut member = slot(3, Some(14), "ready", 0, None);
    member["member_of"] = json!(0);
    let stopping = slot(4, Some(15), "draining", 0, None);
    let mut canary = slot(5, Some(16), "ready", 0, None);
    canary["canary"] = json!(true);
    let frame = Frame::new(
        None,
        &report(7, 1, vec![drained, sick, spare, member, stopping, canary]),
    );
    let states: Vec<&str> = frame.rows.iter().map(|r| r.state.as_str()).collect();
    assert_eq!(
        states,
        vec![
            "drained",
            "unhealthy:probe",
            "standby (spare)",
            "ready (of 0)",
            "draining",
            "ready (canary)"
        ]
    );
}

#[test]
fn numbers_are_formatted_for_people() {
    assert_eq!(fmt_rate(None), "-");
    assert_eq!(fmt_rate(Some(12.345)), "12.3");
    assert_eq!(fmt_rate(Some(1234.5)), "1234");
    assert_eq!(fmt_bytes(Some(812 * 1024)), "812K");
    assert_eq!(fmt_bytes(Some(12 * 1048576 + 300_000)), "12.3M");
    assert_eq!(fmt_bytes(Some(3 * 1073741824 / 2)), "1.50G");
    assert_eq!(fmt_bytes(None), "-");
    assert_eq!(fmt_cpu(Some(3.46)), "3.5%");
    assert_eq!(uptime(42_900), "42s");
    assert_eq!(uptime(725_000), "12m05s");
    assert_eq!(uptime(3 * 3_600_000 + 7 * 60_000), "3h07m");
    assert_eq!(uptime(2 * 86_400_000 + 4 * 3_600_000), "2d04h");
}

/// A UDP group's report of `(slot, datagrams)`.
fn udp(slots: &[(u32, u64)]) -> Value {
    let slots: Vec<Value> = slots
        .iter()
        .map(|(slot, n)| json!({"slot": slot, "datagrams": n, "routes": {}, "flows": 0}))
        .collect();
    json!({"group": "udp4-443", "mode": "flow", "routes": {}, "dropped": 0, "flows": 0,
           "slots": slots})
}

#[test]
fn datagram_rates_sum_every_udp_group_and_need_one() {
    let tcp_only = report(7, 10_000, vec![slot(0, Some(11), "ready", 0, None)]);
    let frame = Frame::new(Some(&tcp_only), &tcp_only);
    assert_eq!(frame.rows[0].dgram_rate, None, "no UDP group");
    let mut before = report(7, 10_000, vec![slot(0, Some(11), "ready", 0, None)]);
    before.udp = serde_json::from_value(json!([udp(&[(0, 100)])])).unwrap();
    let mut after = report(
        7,
        12_000,
        vec![
            slot(0, Some(11), "ready", 0, None),
            slot(1, Some(12), "ready", 0, None),
        ],
    );
    after.udp =
        serde_json::from_value(json!([udp(&[(0, 300), (1, 40)]), udp(&[(0, 100)])])).unwrap();
    let frame = Frame::new(Some(&before), &after);
    // Slot 0: 100 -> 400 over both groups in 2 s; slot 1 is new: from zero.
    assert_eq!(frame.rows[0].dgram_rate, Some(150.0));
    assert_eq!(frame.rows[1].dgram_rate, Some(20.0));
    assert_eq!(frame.totals.dgram_rate, Some(170.0));
    assert_eq!(Frame::new(None, &after).rows[0].dgram_rate, None);
}

#[test]
fn the_text_frame_has_a_row_per_slot_and_the_totals() {
    let before = report(7, 10_000, vec![slot(0, Some(11), "ready", 0, Some(0))]);
    let mut busy = slot(0, Some(11), "ready", 30, Some(50));
    busy["connections"] = json!(4);
    let after = report(7, 11_000, vec![busy, slot(1, None, "restarting", 0, None)]);
    let out = text::render(&Frame::new(Some(&before), &after));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("ck web (pid 7) up 11s: 2 worker(s), tcp4-8080"));
    let titles = lines.iter().position(|l| l.contains("conn/s")).unwrap();
    let fields = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        fields(lines[titles + 1]),
        [
            "0", "11", "ready", "30.0", "-", "3", "4", "2.0M", "5.0%", "1", "30", "5s"
        ]
    );
    assert_eq!(
        fields(lines[titles + 2]),
        [
            "1",
            "-",
            "restarting",
            "0.0",
            "-",
            "3",
            "-",
            "2.0M",
            "-",
            "1",
            "0",
            "-"
        ]
    );
    assert_eq!(
        fields(lines[titles + 3]),
        [
            "all", "1/2", "ready", "30.0", "-", "6", "4", "4.0M", "5.0%", "2", "30"
        ]
    );
    assert_eq!(lines[titles + 4], "rates over the last 1.00 s");
    // Columns line up: every row is as wide as its cells padded.
    let at = lines[titles].find("conn/s").unwrap() + "conn/s".len();
    assert_eq!(&lines[titles + 1][at - 4..at], "30.0");
}

fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
    KeyEvent::new(code, modifiers)
}

#[test]
fn keys_map_to_actions() {
    let none = KeyModifiers::NONE;
    let cases = [
        (KeyCode::Char('q'), Some(Action::Quit)),
        (KeyCode::Esc, Some(Action::Quit)),
        (KeyCode::Up, Some(Action::Up)),
        (KeyCode::Char('k'), Some(Action::Up)),
        (KeyCode::Down, Some(Action::Down)),
        (KeyCode::Char('j'), Some(Action::Down)),
        (KeyCode::Char('d'), Some(Action::Drain)),
        (KeyCode::Char('u'), Some(Action::Undrain)),
        (KeyCode::Char('r'), Some(Action::Reload)),
        (KeyCode::Char('x'), None),
    ];
    for (code, want) in cases {
        assert_eq!(action_of(key(code, none)), want, "{code:?}");
    }
    let ctrl = KeyModifiers::CONTROL;
    assert_eq!(action_of(key(KeyCode::Char('c'), ctrl)), Some(Action::Quit));
    assert_eq!(action_of(key(KeyCode::Char('d'), ctrl)), None);
    let mut release = key(KeyCode::Char('q'), none);
    release.kind = KeyEventKind::Release;
    assert_eq!(action_of(release), None);
}

#[test]
fn the_selection_follows_its_slot() {
    let mut sel = Selection::default();
    assert_eq!(sel.row(&[]), None);
    assert_eq!(sel.slot(&[0, 1, 2]), Some(0));
    sel.step(&[0, 1, 2], 1);
    assert_eq!(sel.slot(&[0, 1, 2]), Some(1));
    // Slot 0 left: slot 1 is now the first row, and still selected.
    assert_eq!(sel.row(&[1, 2]), Some(0));
    // Slot 1 left too: the next slot is selected.
    assert_eq!(sel.slot(&[2, 5]), Some(2));
    sel.step(&[2, 5], 10);
    assert_eq!(sel.slot(&[2, 5]), Some(5));
    sel.step(&[2, 5], -10);
    assert_eq!(sel.slot(&[2, 5]), Some(2));
    // Every slot above the selected one is gone: the last row.
    sel.step(&[2, 5], 1);
    assert_eq!(sel.slot(&[0, 1]), Some(1));
}

#[test]
fn a_canary_judged_shows_above_the_table() {
    let mut r = report(7, 1, vec![slot(0, Some(11), "ready", 0, None)]);
    r.canary = Some("judged: 1 worker(s), 25 % of new connections by client, for 60 s".into());
    let out = text::render(&Frame::new(None, &r));
    assert!(
        out.lines()
            .any(|l| l == "CANARY judged: 1 worker(s), 25 % of new connections by client, for 60 s"),
        "{out}"
    );
}

#[test]
fn the_booting_slots_show_beside_the_active_set_while_the_fleet_boots() {
    let mut r = report(7, 1, vec![slot(0, Some(11), "ready", 0, None)]);
    let out = text::render(&Frame::new(None, &r));
    assert!(out.contains("active set [0, 1]   fallback []"), "{out}");
    r.active = vec![0];
    r.booting = vec![1];
    let out = text::render(&Frame::new(None, &r));
    assert!(
        out.contains("active set [0]   booting [1]   fallback []"),
        "{out}"
    );
}
