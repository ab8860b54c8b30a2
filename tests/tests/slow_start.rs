//! `--slow-start DURATION`: a worker that joins a warm fleet (here the replacement of a worker
//! killed with SIGKILL) is listed in the program's ready list fewer times than a warm one (its
//! `weight` in `ck maps`), so it gets a small share of new connections, counted by the
//! program, while it ramps; `ck status` lists each slot once; a fleet that boots has nothing
//! warm and weighs nothing; a roll's old worker serves beside its replacement through the
//! ramp, and the roll waits for it before the next batch; a ramp whose worker keeps up (it
//! holds no more connections per unit of its share than a warm one) ends early, one whose worker falls behind
//! does not.

use std::time::Duration;

use ck_tests::app::script;
use ck_tests::churn::Background;
use ck_tests::ck::ck_bin;
use ck_tests::load::Mode;
use ck_tests::sys::{TempDir, kill_hard};
use ck_tests::{Ck, READY_TIMEOUT, burst, local, start};

/// Each slot's weight in the first group's `slots` map, from `ck maps --json`.
fn weights(ck: &Ck) -> Vec<(u32, u64)> {
    let text = ck.ctl_ok(&["maps", "--json"]).expect("ck maps --json");
    let maps: serde_json::Value = serde_json::from_str(&text).expect("json");
    maps["groups"][0]["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .filter(|s| s["pid"].as_u64().unwrap_or(0) != 0)
        .map(|s| {
            let slot = s["slot"].as_u64().expect("slot") as u32;
            (slot, s["weight"].as_u64().expect("weight"))
        })
        .collect()
}

#[test]
fn a_replacement_joining_a_warm_fleet_gets_a_small_share_while_it_ramps() {
    // The window is long enough that the whole check runs well inside it.
    let window = Duration::from_secs(20);
    let (mut ck, port) = start(
        "slow-start",
        &["-w", "2", "--policy", "round-robin", "--slow-start", "20s"],
    )
    .expect("start ck");
    let booted = ck.wait_ready(2, READY_TIMEOUT).expect("2 ready workers");
    // A fleet that boots has nothing warm: both listed once, an even spread.
    assert_eq!(weights(&ck), vec![(0, 1), (1, 1)]);
    let even = burst(local(port), 40);
    assert!(even.slot(0) >= 12 && even.slot(1) >= 12, "{even:?}");

    // Once the survivor is warm, the replacement of a killed worker ramps.
    std::thread::sleep(window + Duration::from_millis(500));
    kill_hard(booted.worker_pid(1));
    let after = ck
        .wait_status("a replacement ready", READY_TIMEOUT, |s| {
            s.ready_count() == 2 && !s.worker_pids().contains(&booted.worker_pid(1))
        })
        .expect("the replacement");
    let fresh = after
        .ready()
        .find(|s| s.pid != Some(booted.worker_pid(0)))
        .expect("the replacement's slot")
        .slot;
    let listed = weights(&ck);
    let weight_of = |slot: u32| listed.iter().find(|(s, _)| *s == slot).map(|(_, w)| *w);
    assert_eq!(weight_of(0), Some(16), "the warm worker: {listed:?}");
    assert!(
        weight_of(fresh).is_some_and(|w| (1..16).contains(&w)),
        "the ramping worker: {listed:?}"
    );
    // Each slot reads once in `ck status`, however many times the program lists it.
    let status = ck.status().expect("status");
    let mut active = status.active.clone();
    active.dedup();
    assert_eq!(active.len(), 2, "{:?}", status.active);

    let tally = burst(local(port), 100);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let share = tally.slot(fresh);
    assert!(
        share > 0 && share < 30,
        "the ramping worker took {share} of 100: {tally:?}"
    );
}

#[test]
fn a_roll_with_slow_start_waits_for_each_batchs_ramp() {
    let (mut ck, _port) = start(
        "slow-start-roll",
        &["-w", "2", "--slow-start", "1s", "--reload-batch", "1"],
    )
    .expect("start ck");
    ck.wait_ready(2, READY_TIMEOUT).expect("2 ready workers");
    // Warm: ready for longer than the window.
    std::thread::sleep(Duration::from_millis(1500));
    let answer = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(answer.contains("reloaded 2 worker(s)"), "{answer}");
    let log = ck.log();
    let lines: Vec<&str> = log.lines().collect();
    let at = |needle: &str, from: usize| {
        lines
            .iter()
            .skip(from)
            .position(|l| l.contains(needle))
            .map(|i| i + from)
    };
    let first_flip = at("replacement flipped in", 0).expect("a flip");
    let waits = at(
        "rolling restart waits for the last batch's ramp",
        first_flip,
    )
    .unwrap_or_else(|| panic!("no wait after the first flip:\n{log}"));
    let second = at("starting replacement", waits)
        .unwrap_or_else(|| panic!("no second replacement after the wait:\n{log}"));
    assert!(second > waits, "{log}");
    // The old worker served beside its replacement through the ramp: it left after it.
    let left = at("worker leaving", first_flip).expect("an old worker leaves");
    assert!(
        left > waits,
        "an old worker left before the ramp was over:\n{log}"
    );
}

/// The slots whose ramp ck's log says ended early, from line `from` on.
fn ended_early(log: &str, from: usize) -> Vec<u32> {
    (log.lines().skip(from))
        .filter(|l| l.contains("slow start ended early"))
        .filter_map(|l| l.split("slot=").nth(1)?.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn a_ramp_ends_early_when_its_worker_keeps_up_and_not_when_it_falls_behind() {
    let dir = TempDir::new("slow-start-early");
    let slow = dir.path().join("slow-release");
    // The slow release answers each request after 300 ms: under load it holds many more
    // connections than a warm worker of the fast one.
    let body = format!(
        "if [ -e '{slow}' ]; then exec '{ck}' demo-worker --slow-ms 300; fi\n\
         exec '{ck}' demo-worker",
        slow = slow.display(),
        ck = ck_bin().display()
    );
    let app = script(&dir, "app.sh", &body);
    let app = app.to_str().expect("UTF-8 temp path");
    let (mut ck, port) = start(
        "slow-start-early",
        &[
            "-w",
            "2",
            "--slow-start",
            "4s",
            "--reload-batch",
            "1",
            "--",
            app,
        ],
    )
    .expect("start ck");
    ck.wait_ready(2, READY_TIMEOUT).expect("2 ready workers");
    std::thread::sleep(Duration::from_millis(4500));
    // Idle workers keep up: both ramps end early.
    let answer = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(answer.contains("reloaded 2 worker(s)"), "{answer}");
    let log = ck.log();
    let mut early = ended_early(&log, 0);
    early.sort_unstable();
    let replaced: Vec<u32> = ck
        .status()
        .expect("status")
        .ready()
        .map(|s| s.slot)
        .collect();
    assert_eq!(early, replaced, "{log}");
    // The early end lets the roll go on at once: the second replacement starts after it.
    let lines: Vec<&str> = log.lines().collect();
    let first_end = lines
        .iter()
        .position(|l| l.contains("slow start ended early"));
    let second_start = (lines.iter().enumerate())
        .filter(|(_, l)| l.contains("starting replacement"))
        .nth(1)
        .map(|(i, _)| i);
    assert!(
        first_end
            .zip(second_start)
            .is_some_and(|(end, start)| end < start),
        "the second replacement did not wait for the first ramp's early end:\n{log}"
    );

    // The slow release under a steady load: its first replacement holds the connections it
    // is given for 300 ms, the warm fast workers none for long, so its ramp is never cut.
    std::thread::sleep(Duration::from_millis(4500));
    let load = Background::start_with(port, Mode::NewConnection, true, 200.0);
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&slow, b"").expect("the marker");
    let from = ck.log().lines().count();
    let answer = ck.ctl_ok(&["reload"]).expect("ck reload");
    assert!(answer.contains("reloaded 2 worker(s)"), "{answer}");
    let report = load.finish_and_print("slow-start-early");
    assert_eq!(report.failed(), 0, "{report:?}");
    let log = ck.log();
    let first = (log.lines().skip(from))
        .find(|l| l.contains("replacement flipped in"))
        .and_then(|l| {
            l.split("slot=")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no replacement flipped in:\n{log}"));
    assert!(
        !ended_early(&log, from).contains(&first),
        "the slow replacement on slot {first} ended its ramp early:\n{log}"
    );
}
