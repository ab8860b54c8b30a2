//! What the BPF side shows: the pinned maps that `bpftool` can read, and `--no-bpf`, which runs
//! plain `SO_REUSEPORT` with no program, no pins and one warning.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ck_tests::ck::pins_dir;
use ck_tests::sys::output_within;
use ck_tests::{burst, local, start_ready};

/// Every map ck pins per group.
const MAPS: [&str; 7] = [
    "sockets", "slots", "active", "config", "stats", "selected", "cursor",
];

fn bpftool(args: &[&str]) -> String {
    let mut cmd = Command::new("bpftool");
    cmd.env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    )
    .args(args);
    let out = output_within(&mut cmd, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("bpftool {args:?} timed out"));
    assert!(
        out.status.success(),
        "bpftool {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bpftool_reads_the_pinned_slot_records() {
    let (ck, port, status) = start_ready("bpftool", 2, &[]).expect("start a ready ck");
    let group = format!("tcp4-{port}");
    assert_eq!(status.groups, vec![group.clone()]);
    let dir: PathBuf = pins_dir(ck.name()).join(&group);
    assert_eq!(
        status.pins.as_deref().map(PathBuf::from),
        Some(pins_dir(ck.name()))
    );
    for map in MAPS {
        assert!(
            dir.join(map).exists(),
            "{} is not pinned",
            dir.join(map).display()
        );
    }
    let slots = dir.join("slots");
    let slots = slots.to_str().expect("utf-8 pin path");

    let text = bpftool(&["map", "dump", "pinned", slots]);
    for field in ["\"state\"", "\"pid\"", "\"generation\""] {
        assert!(
            text.contains(field),
            "no {field} in bpftool's dump:\n{text}"
        );
    }

    let json: serde_json::Value =
        serde_json::from_str(&bpftool(&["-j", "map", "dump", "pinned", slots]))
            .expect("bpftool -j prints JSON");
    let entries = json.as_array().expect("a JSON array of entries");
    for slot in &status.slots {
        let pid = slot.pid.expect("a ready slot has a worker");
        assert!(text.contains(&pid.to_string()), "pid {pid} not in:\n{text}");
        let record = entries
            .iter()
            .map(|e| &e["formatted"])
            .find(|f| f["key"] == slot.slot)
            .unwrap_or_else(|| panic!("no entry for slot {} in {json}", slot.slot));
        assert_eq!(record["value"]["pid"], pid, "{record}");
        assert_eq!(record["value"]["state"], 2, "READY is 2: {record}");
        assert_eq!(record["value"]["generation"], 1, "{record}");
    }
    // The slots beyond the fleet are empty.
    let unused = entries
        .iter()
        .map(|e| &e["formatted"])
        .find(|f| f["key"] == 2)
        .expect("slot 2 entry");
    assert_eq!(unused["value"]["pid"], 0, "{unused}");
}

#[test]
fn no_bpf_runs_plain_reuseport() {
    let (mut ck, port, status) = start_ready("nobpf", 2, &["--no-bpf"]).expect("start a ready ck");
    assert!(!status.bpf, "{status:#?}");
    assert_eq!(status.pins, None, "{status:#?}");
    assert!(
        !status.migration,
        "migration needs the program: {status:#?}"
    );
    assert!(!pins_dir(ck.name()).exists(), "pins exist with --no-bpf");

    let tally = burst(local(port), 50);
    eprintln!("--no-bpf: {tally:?}");
    assert_eq!(tally.ok, 50, "{tally:?}");
    assert!(tally.only_from(&status.worker_pids()), "{tally:?}");

    // Draining needs the program: refused with a reason.
    let out = ck.ctl(&["drain", "0"]).expect("ck drain");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "drain without BPF succeeded");
    assert!(err.contains("ck: error:") && err.contains("BPF"), "{err}");

    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    let warnings = log.matches("BPF steering is off").count();
    assert_eq!(warnings, 1, "warning count {warnings} in:\n{log}");
    assert!(!pins_dir(ck.name()).exists());
}

/// `--bpf-log` forwards the program's own log lines: while the only worker is still starting
/// (it says READY=1 after 1.5 s), a connection falls back to it, and the program's warning about
/// that fallback shows up in ck's log; the connection is answered once the worker accepts.
#[test]
fn bpf_log_forwards_the_programs_fallback_lines() {
    let (ck, port, status) = ck_tests::start_one_starting("bpflog", &["--bpf-log"])
        .expect("start ck with a starting worker");
    let answer = ck_tests::get_new_conn(local(port)).expect("the queued connection is answered");
    assert_eq!(Some(answer.pid), status.slots[0].pid);
    let status = ck.status().expect("ck status");
    assert!(status.slots[0].fallbacks >= 1, "{status:?}");
    let found =
        ck_tests::sys::poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
            ck.log().contains("no ready slot; fell back to live slot 0")
        });
    assert!(found, "fallback line not forwarded:\n{}", ck.log());
}
