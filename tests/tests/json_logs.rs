//! `--log-format json`: every line ck writes is one JSON object with a timestamp, a level, a
//! message and the event's fields at the top level; a worker's lifecycle lines carry its slot
//! and pid. The workers' own lines are records too, with their slot, pid, generation and
//! stream.

use std::collections::BTreeSet;

use ck_tests::ck::ck_output;
use ck_tests::sys::free_port;
use ck_tests::{instance_name, start_ready};
use serde_json::Value;

#[test]
fn every_line_of_ck_is_a_json_object_with_level_message_and_fields() {
    let (mut ck, _port, status) =
        start_ready("json-logs", 2, &["--log-format", "json"]).expect("start a ready ck");
    let pids = status.worker_pids();
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    let mut lines = Vec::new();
    for text in log.lines().filter(|l| !l.is_empty()) {
        let line: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {text}\n--- log ---\n{log}"));
        for field in ["timestamp", "level", "message", "target"] {
            assert!(line[field].is_string(), "no {field} in {text}");
        }
        lines.push(line);
    }
    // Each worker's own "listening on" line is a record of its slot, pid and generation.
    for slot in 0..2u64 {
        let said: Vec<&Value> = lines
            .iter()
            .filter(|l| l["target"] == "worker" && l["slot"] == slot)
            .filter(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(" listening on "))
            })
            .collect();
        assert_eq!(said.len(), 1, "slot {slot}: {log}");
        let pid = said[0]["pid"].as_u64().expect("a pid") as u32;
        assert!(pids.contains(&pid), "{}", said[0]);
        assert_eq!(said[0]["generation"], 1, "{}", said[0]);
        assert_eq!(said[0]["stream"], "stderr", "{}", said[0]);
        let message = said[0]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(&format!("demo worker slot={slot} pid={pid} ")),
            "{message}"
        );
    }
    let messages: Vec<&str> = lines.iter().filter_map(|l| l["message"].as_str()).collect();
    assert_eq!(messages.first(), Some(&"ck started"), "{log}");
    assert_eq!(messages.last(), Some(&"ck stopped"), "{log}");
    assert!(
        lines
            .iter()
            .all(|l| l["level"] == "INFO" || l["level"] == "WARN"),
        "{log}"
    );
    // Lifecycle lines carry slot and pid as numbers, the pids of the workers ck reported.
    let started: BTreeSet<u32> = lines
        .iter()
        .filter(|l| l["message"] == "worker started")
        .map(|l| {
            assert!(l["slot"].is_u64(), "{l}");
            l["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {l}")) as u32
        })
        .collect();
    assert_eq!(started, pids, "{log}");
    let exited: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "worker exited")
        .collect();
    assert_eq!(exited.len(), 2, "{log}");
    for line in exited {
        assert!(line["slot"].is_u64() && line["pid"].is_u64(), "{line}");
        assert_eq!(line["reason"], "exit 0", "{line}");
    }
}

#[test]
fn a_failure_after_start_is_a_json_line_too() {
    let port = free_port();
    let _holder = std::net::TcpListener::bind(("0.0.0.0", port)).expect("holding the port");
    let name = instance_name("json-fail", port);
    let port_text = port.to_string();
    let out = ck_output(&[
        "run",
        "--name",
        &name,
        "--port",
        &port_text,
        "--log-format",
        "json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("nothing logged: {err}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert_eq!(last["message"], "ck run failed", "{last}");
    let error = last["error"].as_str().unwrap_or_default();
    assert!(error.contains("already in use"), "{last}");
}
