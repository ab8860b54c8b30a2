//! `ck maps`: every slot's record in the pinned maps, decoded (states as words, per-CPU
//! counters summed), with `selected` counts equal to the answers clients got from each worker,
//! as text and as JSON; and clear errors without BPF, without pins, without an instance.

use ck_tests::ck::{ck_output, pins_dir, said};
use ck_tests::{Ck, burst_pinned, local, start_ready};
use serde_json::{Value, json};

/// Connections sent, one after the other, from one CPU (round-robin spreads them evenly).
const N: u32 = 90;

fn maps_json(ck: &Ck) -> Value {
    let out = ck.ctl_ok(&["maps", "--json"]).expect("ck maps");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ck maps --json: {e}\n{out}"))
}

/// The entry of JSON array `list` for slot `slot`.
fn entry(list: &Value, slot: u32) -> &Value {
    list.as_array()
        .and_then(|l| l.iter().find(|e| e["slot"] == slot))
        .unwrap_or_else(|| panic!("no slot {slot} in {list:#}"))
}

/// The fields of the line of `section` that starts with `slot`.
fn row(section: &str, slot: u32) -> Vec<&str> {
    section
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&slot.to_string().as_str()))
        .unwrap_or_else(|| panic!("no line for slot {slot} in:\n{section}"))
}

#[test]
fn maps_decode_every_slot_and_count_what_clients_saw() {
    let (ck, port, _) =
        start_ready("maps", 3, &["--policy", "round-robin"]).expect("start a ready ck");
    let tally = burst_pinned(local(port), N);
    assert_eq!(tally.ok, N, "{tally:?}");
    ck.ctl_ok(&["drain", "2"]).expect("ck drain");
    let status = ck.status().expect("ck status");
    assert_eq!(status.slots.len(), 3, "{status:#?}");

    let maps = maps_json(&ck);
    eprintln!("{maps:#}");
    assert_eq!(maps["instance"], ck.name());
    let group = &maps["groups"][0];
    assert_eq!(group["group"], status.groups[0].as_str());
    assert_eq!(group["config"]["policy"], "round-robin");
    assert_eq!(group["active"]["live"]["ready"], json!([0, 1]));
    assert_eq!(
        group["slots"].as_array().map(Vec::len),
        Some(3),
        "{group:#}"
    );
    let names: Vec<&str> = group["maps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    for map in [
        "sockets", "slots", "active", "config", "stats", "selected", "cursor", "sticky",
    ] {
        assert!(names.contains(&map), "{map} missing: {names:?}");
    }

    let text = ck.ctl_ok(&["maps"]).expect("ck maps");
    eprintln!("{text}");
    let (slots_text, stats_text) = text.split_once("\nstats:").expect("a stats section");
    for s in &status.slots {
        let pid = s.pid.expect("a worker");
        let state = if s.slot == 2 { "draining" } else { "ready" };
        let sent = u64::from(tally.pid(pid));
        assert!(sent > 0, "slot {} got nothing: {tally:?}", s.slot);

        let record = entry(&group["slots"], s.slot);
        assert_eq!(record["state"], state, "{record:#}");
        assert_eq!(record["pid"], pid, "{record:#}");
        assert_eq!(
            entry(&group["stats"], s.slot)["selected"],
            sent,
            "{group:#}"
        );

        let line = row(slots_text, s.slot);
        assert_eq!(&line[1..3], [state, &pid.to_string()], "{line:?}");
        let line = row(stats_text, s.slot);
        assert_eq!(line[1], sent.to_string(), "{line:?}");
    }
}

#[test]
fn maps_say_why_there_are_none() {
    let (ck, _, status) = start_ready("maps-nobpf", 1, &["--no-bpf"]).expect("start a ready ck");
    assert!(status.no_bpf && status.pins.is_none(), "{status:#?}");
    let out = ck.ctl(&["maps"]).expect("ck maps");
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("runs without BPF (--no-bpf)"), "{text}");

    let (ck, _, status) = start_ready("maps-nopins", 1, &[]).expect("start a ready ck");
    let group = pins_dir(ck.name()).join(&status.groups[0]);
    std::fs::remove_dir_all(&group).expect("removing the group's pins");
    let out = ck.ctl(&["maps"]).expect("ck maps");
    let text = said(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(&format!("missing at {}", group.display())),
        "{text}"
    );

    let name = format!("t-maps-none-{}", std::process::id());
    for command in ["maps", "top"] {
        let out = ck_output(&[command, "--name", &name]);
        let text = said(&out);
        assert!(!out.status.success(), "{text}");
        assert!(
            text.contains(&format!("no ck instance named {name:?} is running")),
            "{text}"
        );
    }
}

/// `ck status --json | head -c 1`, `ck maps | head -c 1`: a reader that closes the pipe early
/// ends the output quietly (exit 0), never with a panic and a backtrace.
#[test]
fn a_reader_that_closes_the_pipe_early_gets_no_panic() {
    let (ck, _port, _) = start_ready("closed-pipe", 2, &[]).expect("start a ready ck");
    for args in [
        &["status", "--json"][..],
        &["status"],
        &["maps", "--json"],
        &["maps"],
    ] {
        // A pipe whose read end is already closed: ck's first write meets EPIPE.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = ck_tests::ck::ck_command()
            .args(args)
            .args(["--name", ck.name()])
            .stdout(writer)
            .output()
            .expect("running ck");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !stderr.contains("panicked"),
            "`ck {}` into a closed pipe: {}\n{stderr}",
            args.join(" "),
            out.status
        );
    }
}
