//! `--slow-start DURATION`: a worker that joins a warm fleet (here the replacement of a worker
//! killed with SIGKILL) is listed in the program's ready list fewer times than a warm one (its
//! `weight` in `ck maps`), so it gets a small share of new connections, counted by the
//! program, while it ramps; `ck status` lists each slot once; a fleet that boots has nothing
//! warm and weighs nothing; a roll's old worker serves beside its replacement through the
//! ramp, and the roll waits for it before the next batch.

use std::time::Duration;

use ck_tests::sys::kill_hard;
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
