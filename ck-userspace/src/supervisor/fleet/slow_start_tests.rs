//! Slow start's weights on literal fleets: a worker joining a warm fleet is listed fewer times
//! than a warm one, its weight growing to full over the window; nothing is weighted without a
//! warm worker, without the option, or once the window is over; a roll waits for the ramp.
use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use ck_common::ActiveSet;

use super::tests::{map, shape, standby, view};
use super::*;
use crate::supervisor::lifecycle::{Input, Life, Run, State, active_set};

const WINDOW: Duration = Duration::from_secs(10);

/// A ready serving slot whose worker became ready at `at`.
fn ready_at(id: u64, at: Instant) -> Life {
    Life {
        state: State::Ready(Run {
            id,
            started: at,
            ready_at: Some(at),
            adopted: true,
        }),
        socket_open: true,
        ..Life::new(shape(1, 0).restart, false)
    }
}

/// How many times each slot is listed in the ready part of `set`.
fn listed(set: &ActiveSet, slot: u32) -> usize {
    set.slots[..set.ready_len as usize]
        .iter()
        .filter(|s| **s == slot)
        .count()
}

#[test]
fn a_worker_joining_a_warm_fleet_ramps_from_a_tenth_to_its_full_share() {
    let now = Instant::now();
    let lives = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (1, ready_at(2, now)),
    ]);
    let set = active_set(lives.iter().map(|(i, l)| (*i, l)), false, false);
    let w = slow_start::weigh(
        &set,
        &view(&lives),
        &slow_start::Ramps::NONE,
        now,
        Some(WINDOW),
    );
    assert!(w.ramping);
    assert_eq!(w.full(), 16);
    assert_eq!((listed(&w.set, 0), listed(&w.set, 1)), (16, 1));
    assert_eq!(w.weights(), vec![(0, 16), (1, 1)]);
    // Half-way: 10 % + 90 % x 0.5 = 55 % of 16, rounded down.
    let half = slow_start::weigh(
        &set,
        &view(&lives),
        &slow_start::Ramps::NONE,
        now + WINDOW / 2,
        Some(WINDOW),
    );
    assert_eq!(listed(&half.set, 1), 8);
    // Over: each listed once, as without the option.
    let over = slow_start::weigh(
        &set,
        &view(&lives),
        &slow_start::Ramps::NONE,
        now + WINDOW,
        Some(WINDOW),
    );
    assert!(!over.ramping);
    assert_eq!((over.set.ready_len, over.full()), (2, 1));
    // Round-robin over the list visits the slots interleaved: the cold one early in it.
    assert_eq!(&half.set.slots[..4], &[0, 1, 0, 1]);
}

#[test]
fn nothing_ramps_without_a_warm_worker_or_without_the_option() {
    let now = Instant::now();
    let fresh = map(&[(0, ready_at(1, now)), (1, ready_at(2, now))]);
    let set = active_set(fresh.iter().map(|(i, l)| (*i, l)), false, false);
    let w = slow_start::weigh(
        &set,
        &view(&fresh),
        &slow_start::Ramps::NONE,
        now,
        Some(WINDOW),
    );
    assert!(!w.ramping, "a fleet of new workers has nothing to lean on");
    assert_eq!(w.set.ready_len, 2);
    let mixed = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (1, ready_at(2, now)),
    ]);
    let set = active_set(mixed.iter().map(|(i, l)| (*i, l)), false, false);
    let off = slow_start::weigh(&set, &view(&mixed), &slow_start::Ramps::NONE, now, None);
    assert!(!off.ramping);
    assert_eq!(off.weights(), vec![(0, 1), (1, 1)]);
}

#[test]
fn the_fallback_keeps_its_place_after_a_weighted_ready_list() {
    let now = Instant::now();
    let mut unhealthy = ready_at(3, now - Duration::from_secs(60));
    unhealthy.state = State::Unhealthy(unhealthy.state.run().expect("run"));
    let lives = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (1, ready_at(2, now)),
        (2, unhealthy),
    ]);
    let set = active_set(lives.iter().map(|(i, l)| (*i, l)), false, false);
    let w = slow_start::weigh(
        &set,
        &view(&lives),
        &slow_start::Ramps::NONE,
        now,
        Some(WINDOW),
    );
    let ready = w.set.ready_len as usize;
    assert_eq!(w.set.live_len as usize, ready + 1);
    assert_eq!(w.set.slots[ready], 2);
    assert!(ready < ck_common::MAX_SLOTS as usize);
}

#[test]
fn a_roll_with_slow_start_waits_for_the_last_batchs_ramp() {
    let now = Instant::now();
    let mut s = shape(1, 0);
    s.slow_start = Some(WINDOW);
    let lives = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (2, ready_at(3, now - Duration::from_secs(2))),
        (1, standby(State::Idle)),
    ]);
    let mut r = roll::Roll {
        pending: VecDeque::from([0]),
        flipped: vec![2],
        ..roll::begin(VecDeque::new(), true)
    };
    match roll::next(&mut r, &view(&lives), &slow_start::Ramps::NONE, &s, now) {
        roll::Next::Ramp(left) => assert_eq!(left, Duration::from_secs(8)),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.pending, VecDeque::from([0]), "nothing taken meanwhile");
    // Once the ramp is over the next old slot gets its replacement.
    assert!(matches!(
        roll::next(
            &mut r,
            &view(&lives),
            &slow_start::Ramps::NONE,
            &s,
            now + Duration::from_secs(8)
        ),
        roll::Next::Start { old: 0, .. }
    ));
}

#[test]
fn with_slow_start_the_old_worker_serves_beside_its_replacement_until_the_ramp_is_over() {
    let now = Instant::now();
    let mut s = shape(1, 0);
    s.slow_start = Some(WINDOW);
    let fresh = Run {
        id: 2,
        started: now,
        ready_at: Some(now),
        adopted: true,
    };
    let lives = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (1, standby(State::Ready(fresh))),
    ]);
    let mut r = roll::Roll {
        batch: vec![(0, 1)],
        ..roll::begin(VecDeque::new(), true)
    };
    let flip = roll::flip(&mut r, &view(&lives), 1, &s).expect("the batch is ready");
    assert_eq!(flip, vec![(1, Input::FlipIn)]);
    assert_eq!(r.fading, vec![0]);
    assert!(
        !roll::done(&r, &view(&lives)),
        "the roll waits for the fade"
    );
    let flipped = map(&[
        (0, ready_at(1, now - Duration::from_secs(60))),
        (1, ready_at(2, now)),
    ]);
    assert_eq!(
        roll::faded(
            &mut r,
            &view(&flipped),
            &slow_start::Ramps::NONE,
            &s,
            now + WINDOW / 2
        ),
        None
    );
    let out = roll::faded(
        &mut r,
        &view(&flipped),
        &slow_start::Ramps::NONE,
        &s,
        now + WINDOW,
    )
    .expect("faded");
    let why = Input::Retire("replaced by a rolling restart".into());
    assert_eq!(out, vec![(0, why)]);
    assert!(r.fading.is_empty() && r.leaving == vec![0]);
}

/// A warm slot 0 and slots 1 and 2 ready at `start`.
fn warm_and_two_new(start: Instant) -> BTreeMap<u32, Life> {
    map(&[
        (0, ready_at(1, start - Duration::from_secs(60))),
        (1, ready_at(2, start)),
        (2, ready_at(3, start)),
    ])
}

/// Steps `ramps` every [`slow_start::STEP`] for `span` from `from`, each slot holding what
/// `load` says: each early end, as (when, from `from`; the slot).
fn step_through(
    ramps: &mut slow_start::Ramps,
    lives: &BTreeMap<u32, Life>,
    from: Instant,
    span: Duration,
    load: impl Fn(u32) -> Option<u64>,
) -> Vec<(Duration, u32)> {
    let mut ended = Vec::new();
    let mut t = Duration::ZERO;
    while t < span {
        let now = from + t;
        ended.extend(
            ramps
                .step(&view(lives), now, WINDOW, &load)
                .into_iter()
                .map(|s| (t, s)),
        );
        t += slow_start::STEP;
    }
    ended
}

#[test]
fn a_ramp_that_keeps_up_ends_early_from_half_its_window_on() {
    let start = Instant::now();
    let lives = warm_and_two_new(start);
    // The warm slot 0 holds 3 connections; slot 1 one, less per unit of its share (it keeps
    // up); slot 2 as many as the warm one with a smaller share (as busy: slower per request).
    let load = |slot: u32| Some([3, 1, 3][slot as usize]);
    let mut ramps = slow_start::Ramps::default();
    // The first half is never shortened.
    let half = WINDOW / 2;
    assert!(step_through(&mut ramps, &lives, start, half, load).is_empty());
    assert_eq!(ramps.age(&view(&lives), 1, start + half), Some(half));
    let ended = step_through(&mut ramps, &lives, start + half, half, load);
    assert!(
        ended.iter().all(|(_, s)| *s == 1),
        "slot 2 never keeps up: {ended:?}"
    );
    // Said at the step that ends it.
    let ended_at = half + ended.first().expect("slot 1's ramp ended early").0;
    let expected = WINDOW.mul_f64(slow_start::SHORT_END);
    assert!(
        ended_at + slow_start::STEP * 2 >= expected && ended_at <= expected + slow_start::STEP * 2,
        "ended at {ended_at:?}, about {expected:?} expected"
    );
    let set = active_set(lives.iter().map(|(i, l)| (*i, l)), false, false);
    let w = slow_start::weigh(&set, &view(&lives), &ramps, start + ended_at, Some(WINDOW));
    assert_eq!(
        w.weights().iter().find(|(s, _)| *s == 1).map(|(_, w)| *w),
        Some(w.full()),
        "slot 1 has its full share: {:?}",
        w.weights()
    );
    assert!(listed(&w.set, 2) < listed(&w.set, 1), "slot 2 still ramps");
    // Without a warm slot's load to compare with, nothing ramps faster.
    let mut none = slow_start::Ramps::default();
    let half = start + WINDOW / 2;
    assert!(
        none.step(&view(&lives), half, WINDOW, |s| (s != 0).then_some(0))
            .is_empty()
    );
    assert_eq!(none.age(&view(&lives), 1, half), Some(WINDOW / 2));
    // A roll waiting for slot 1 alone goes on: nothing is left of its ramp.
    let mut s = shape(1, 0);
    s.slow_start = Some(WINDOW);
    let mut r = roll::Roll {
        pending: VecDeque::from([0]),
        flipped: vec![1],
        ..roll::begin(VecDeque::new(), true)
    };
    assert!(matches!(
        roll::next(&mut r, &view(&lives), &ramps, &s, start + ended_at),
        roll::Next::Start { old: 0, .. }
    ));
    // A new worker in slot 1 ramps from the start again.
    let again = map(&[
        (0, ready_at(1, start - Duration::from_secs(60))),
        (1, ready_at(4, start + ended_at)),
    ]);
    ramps.step(&view(&again), start + ended_at, WINDOW, |_| Some(0));
    assert_eq!(
        ramps.age(&view(&again), 1, start + ended_at),
        Some(Duration::ZERO)
    );
}

#[test]
fn a_ramp_is_judged_by_its_load_per_unit_of_its_share() {
    let start = Instant::now();
    let lives = warm_and_two_new(start);
    let slots = |ended: Vec<(Duration, u32)>| ended.into_iter().map(|(_, s)| s).collect::<Vec<_>>();
    // Half-way the ramping slots have 55 % of a warm share: the warm slot holds 2, so 1.1 per
    // ramping slot keeps up. Slot 1 holds 1; slot 2 holds 2, as busy as the warm slot.
    let load = |slot: u32| Some([2, 1, 2][slot as usize]);
    let mut ramps = slow_start::Ramps::default();
    assert_eq!(
        slots(step_through(&mut ramps, &lives, start, WINDOW, load)),
        vec![1]
    );
    // An idle fleet: nothing held anywhere keeps up.
    let mut idle = slow_start::Ramps::default();
    let ended = step_through(&mut idle, &lives, start, WINDOW, |_| Some(0));
    assert_eq!(slots(ended), vec![1, 2]);
}
