//! Unit tests of `status_text`.
use super::render;
use ck::control::StatusReport;
use serde_json::json;

/// A report of a two-slot instance `web`, changed by `tweak` (a JSON object merged in).
fn report(tweak: serde_json::Value) -> StatusReport {
    let mut value = json!({
        "name": "web", "pid": 42, "bpf": true, "steering": [], "policy": "round-robin",
        "groups": ["tcp4-8080"], "listen": ["0.0.0.0:8080"], "probe_port_base": 19800,
        "uptime_ms": 9_000, "active": [0], "fallback": [1], "degraded": [], "foreign": [],
        "min_workers": 1, "adopt": false, "dropped": 3, "stopping": false,
        "reloading": false, "migration": true, "workers": 2,
        "slots": [
            {"slot": 0, "pid": 100, "state": "ready", "drained": false, "uptime_ms": 1_500,
             "restarts": 2, "generation": 3, "selected": 17, "fallbacks": 0, "migrated": 0,
             "breaker": "closed", "queue_depth": 0, "probe_hits": 6, "connections": 4,
             "memory_bytes": 3 * 1048576, "cpu_ms": 1_250, "spare": false,
             "status": "serving"},
            {"slot": 1, "pid": null, "state": "restarting", "drained": false,
             "uptime_ms": 0, "restarts": 5, "generation": 6, "selected": 0, "fallbacks": 0,
             "migrated": 0, "breaker": "open", "queue_depth": 0, "probe_hits": 0,
             "spare": false, "last_exit": "signal SIGKILL"},
        ],
    });
    if let (Some(base), Some(extra)) = (value.as_object_mut(), tweak.as_object()) {
        base.extend(extra.clone());
    }
    serde_json::from_value(value).expect("a valid report")
}

#[test]
fn the_header_names_the_instance_policy_and_steering() {
    let text = render(&report(json!({})));
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        "ck web (pid 42): 2 worker(s), 1 group(s) tcp4-8080, policy round-robin, \
         BPF steering on, migration on"
    );
    assert!(text.contains("active set: [0]   fallback: [1]   dropped (no slot): 3"));
    let text = render(&report(
        json!({"bpf": false, "migration": false, "reloading": true}),
    ));
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("BPF steering OFF (plain SO_REUSEPORT), migration off, reloading"),
        "{text}"
    );
}

#[test]
fn a_worker_at_another_priority_than_ck_shows_its_nice_value() {
    let mut r = report(json!({}));
    r.slots[0].nice = Some(0);
    assert!(
        !render(&r).contains("(nice"),
        "ck's own priority is not shown"
    );
    r.slots[0].nice = Some(-5);
    let text = render(&r);
    let row = text.lines().find(|l| l.contains(" 100 ")).unwrap();
    assert!(row.contains("ready (nice -5)"), "{text}");
}

#[test]
fn dropped_worker_output_is_shown_per_slot() {
    assert!(!render(&report(json!({}))).contains("worker output"));
    let mut r = report(json!({}));
    r.slots[1].output_dropped = 12;
    let text = render(&r);
    assert!(
        text.contains(
            "\nworker output: lines dropped because ck's own output could not keep up \
             (slot 1: 12)\n"
        ),
        "{text}"
    );
}

#[test]
fn the_stop_signal_is_shown_with_the_drain_timeout() {
    let text = render(&report(
        json!({"stop_signal": "SIGQUIT", "drain_timeout_ms": 10_000}),
    ));
    assert!(
        text.contains("\nstop: SIGQUIT, SIGKILL after 10s\n"),
        "{text}"
    );
}

#[test]
fn each_slot_is_a_row_of_the_table() {
    let text = render(&report(json!({})));
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("slot"))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    let ready: Vec<&str> = rows[1].split_whitespace().collect();
    assert_eq!(
        ready,
        [
            "0", "100", "ready", "1.5s", "2", "17", "4", "6", "3.0M", "1.25s", "-", "closed",
            "serving"
        ]
    );
    let dead: Vec<&str> = rows[2].split_whitespace().collect();
    assert_eq!(
        dead,
        [
            "1",
            "-",
            "restarting",
            "0.0s",
            "5",
            "0",
            "-",
            "0",
            "-",
            "-",
            "signal",
            "SIGKILL",
            "open"
        ]
    );
}

/// Where each column starts in the header, and that every row's cell of it starts there
/// too (left-aligned) or ends where the header ends (right-aligned).
#[test]
fn long_cells_widen_their_column_and_keep_the_table_aligned() {
    let mut r = report(json!({}));
    r.slots[1].last_exit = Some("exit 1 (never became ready)".into());
    r.slots[0].unhealthy = Some("probe failed: connection refused".into());
    r.slots[0].pid = Some(1234567);
    let text = render(&r);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("slot"))
        .collect();
    assert_eq!(table.len(), 3, "{text}");
    let (header, ready, dead) = (table[0], table[1], table[2]);
    let start = |line: &str, word: &str| {
        line.find(word)
            .unwrap_or_else(|| panic!("no {word:?} in {line:?}"))
    };
    let end = |line: &str, word: &str| start(line, word) + word.len();
    // Left-aligned columns: state, last exit, breaker, status.
    assert_eq!(
        start(ready, "unhealthy:probe failed"),
        start(header, "state")
    );
    assert_eq!(start(dead, "restarting"), start(header, "state"));
    assert_eq!(start(dead, "exit 1 (never"), start(header, "last exit"));
    assert_eq!(start(ready, "closed"), start(header, "breaker"));
    assert_eq!(start(dead, "open"), start(header, "breaker"));
    assert_eq!(start(ready, "serving"), start(header, "status"));
    // Right-aligned columns: pid, selected, cpu.
    assert_eq!(end(ready, "1234567"), end(header, "pid"));
    assert_eq!(end(ready, "17"), end(header, "selected"));
    assert_eq!(end(ready, "1.25s"), end(header, "cpu"));
    assert_eq!(end(dead, "5"), end(header, "restarts"));
    // No row is wider than needed: the widest cell of a column is one gap from the next.
    assert!(dead.contains("exit 1 (never became ready)  open"), "{text}");
    assert!(
        !text.lines().any(|l| l.ends_with(' ')),
        "trailing blanks: {text}"
    );
}

#[test]
fn warnings_come_before_the_table() {
    let text = render(&report(json!({
        "degraded": ["slot 1: breaker open"],
        "metrics": "127.0.0.1:9100",
        "steering": [{"group": "tcp4-8080", "attached": false, "checked_ms_ago": 10}],
        "foreign": [{"group": "tcp4-8080", "addr": "0.0.0.0:8080", "inode": 7, "uid": 0,
                     "pid": null, "command": null}],
        "connection_count": "scan (CK_CONN_COUNT=scan asks for the sock_diag scan)",
    })));
    let table = text.find("\nslot ").expect("the table's header");
    for line in [
        "DEGRADED: slot 1: breaker open",
        "metrics: http://127.0.0.1:9100/metrics (/healthz, /readyz)",
        "steering on tcp4-8080: NOT in effect (being re-attached)",
        "FOREIGN listener on 0.0.0.0:8080 (tcp4-8080): inode 7, uid 0, pid ? : never \
         steered to; stop it",
        "open connections: counted by the sock_diag scan (CK_CONN_COUNT=scan asks for",
    ] {
        let at = text
            .find(line)
            .unwrap_or_else(|| panic!("no {line:?} in {text}"));
        assert!(at < table, "{line:?} after the table: {text}");
    }
}
