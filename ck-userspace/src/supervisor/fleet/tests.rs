//! The fleet core's decisions on literal fleets: a death, a roll's batch, flip, abort and end,
//! a scale, boot priority and the quiet wait (the spares' pacing: `spares_tests.rs`).
use std::{collections::VecDeque, time::Instant};

use super::*;
use crate::settings::restart_policy::RestartPolicy;
use crate::supervisor::lifecycle::{Input, Life, Run, State};

pub(super) fn shape(batch: u32, spares: u32) -> Shape {
    Shape {
        reload_batch: batch,
        spares,
        min_workers: 0,
        restart: RestartPolicy::DEFAULT,
        keep_previous: None,
        slow_start: None,
    }
}

pub(super) fn run(id: u64) -> Run {
    Run {
        id,
        started: Instant::now(),
        ready_at: Some(Instant::now()),
        adopted: true,
    }
}

/// A serving slot in `state`, its socket open.
fn serving(state: State) -> Life {
    Life {
        state,
        socket_open: true,
        ..Life::new(RestartPolicy::DEFAULT, false)
    }
}

pub(super) fn ready(id: u64) -> Life {
    serving(State::Ready(run(id)))
}

fn starting(id: u64) -> Life {
    serving(State::Starting(run(id)))
}

pub(super) fn standby(state: State) -> Life {
    Life {
        state,
        socket_open: true,
        ..Life::new(RestartPolicy::DEFAULT, true)
    }
}

pub(super) fn spare(state: State) -> Life {
    Life {
        state,
        socket_open: true,
        ..Life::spare(RestartPolicy::DEFAULT)
    }
}

pub(super) fn map(lives: &[(u32, Life)]) -> std::collections::BTreeMap<u32, Life> {
    lives.iter().cloned().collect()
}

pub(super) fn view(lives: &std::collections::BTreeMap<u32, Life>) -> Lives<'_> {
    super::lives(lives.iter().map(|(i, l)| (*i, l)))
}

#[test]
fn a_ready_spare_takes_the_place_of_a_dead_serving_worker() {
    let lives = map(&[
        (0, ready(1)),
        (1, ready(2)),
        (2, spare(State::Starting(run(3)))),
        (3, spare(State::Ready(run(4)))),
    ]);
    let death = death::decide(
        1,
        true,
        &view(&lives),
        &Core::default(),
        &shape(1, 2),
        false,
    )
    .expect("slot 1 exists");
    assert_eq!(
        death.inputs,
        vec![
            (3, Input::TakeOver { drained: false }),
            (1, Input::Superseded)
        ]
    );
    assert_eq!(death.took_over, Some(3));
    assert!(!death.spare_lost && !death.aborts_roll);
}

#[test]
fn without_a_ready_spare_the_dead_slot_steps_its_own_exit() {
    let lives = map(&[(0, ready(1)), (1, spare(State::Starting(run(2))))]);
    let death = death::decide(
        0,
        false,
        &view(&lives),
        &Core::default(),
        &shape(1, 1),
        false,
    )
    .expect("slot 0 exists");
    assert_eq!(death.inputs, vec![(0, Input::Exited { outside: false })]);
    assert_eq!(death.took_over, None);
    // While stopping, no spare takes over even when one is ready.
    let lives = map(&[(0, ready(1)), (1, spare(State::Ready(run(2))))]);
    let death = death::decide(
        0,
        false,
        &view(&lives),
        &Core::default(),
        &shape(1, 1),
        true,
    )
    .expect("slot 0 exists");
    assert_eq!(death.inputs, vec![(0, Input::Exited { outside: false })]);
}

#[test]
fn a_dead_spare_slows_the_next_and_a_dead_replacement_aborts_the_roll() {
    let lives = map(&[
        (0, ready(1)),
        (1, spare(State::Starting(run(2)))),
        (2, standby(State::Starting(run(3)))),
    ]);
    let core = Core {
        roll: Some(roll::Roll {
            batch: vec![(0, 2)],
            ..roll::begin(VecDeque::new(), true)
        }),
        ..Core::default()
    };
    let spare_death = death::decide(1, false, &view(&lives), &core, &shape(1, 1), false).unwrap();
    assert!(spare_death.spare_lost && !spare_death.aborts_roll);
    let replacement = death::decide(2, false, &view(&lives), &core, &shape(1, 1), false).unwrap();
    assert!(replacement.aborts_roll && !replacement.spare_lost);
    assert!(death::decide(9, false, &view(&lives), &core, &shape(1, 1), false).is_none());
}

#[test]
fn a_roll_fills_its_batch_then_waits_and_skips_slots_that_left() {
    let mut leaving = ready(3);
    leaving.state = State::Leaving(run(3));
    let mut drained = ready(2);
    drained.drained = true;
    let lives = map(&[(0, ready(1)), (1, drained), (2, leaving)]);
    let mut r = roll::begin(VecDeque::from([2, 1, 0]), true);
    // Slot 2 is leaving: skipped; slot 1's replacement starts drained, as slot 1 is.
    match roll::next(
        &mut r,
        &view(&lives),
        &slow_start::Ramps::NONE,
        &shape(1, 0),
        Instant::now(),
    ) {
        roll::Next::Start { old, life } => {
            assert_eq!(old, 1);
            assert!(life.drained && life.standby && !life.spare);
        }
        other => panic!("expected a start, got {other:?}"),
    }
    r.batch.push((1, 5));
    assert!(matches!(
        roll::next(
            &mut r,
            &view(&lives),
            &slow_start::Ramps::NONE,
            &shape(1, 0),
            Instant::now()
        ),
        roll::Next::Wait
    ));
    assert_eq!(r.pending, VecDeque::from([0]));
    r.batch.clear();
    assert!(matches!(
        roll::next(
            &mut r,
            &view(&lives),
            &slow_start::Ramps::NONE,
            &shape(1, 0),
            Instant::now()
        ),
        roll::Next::Start { old: 0, .. }
    ));
    assert!(matches!(
        roll::next(
            &mut r,
            &view(&lives),
            &slow_start::Ramps::NONE,
            &shape(1, 0),
            Instant::now()
        ),
        roll::Next::Empty
    ));
}

#[test]
fn a_roll_flips_only_once_its_whole_batch_is_ready() {
    let mut lives = map(&[
        (0, ready(1)),
        (1, ready(2)),
        (2, standby(State::Ready(run(3)))),
        (3, standby(State::Starting(run(4)))),
    ]);
    let mut r = roll::Roll {
        batch: vec![(0, 2), (1, 3)],
        ..roll::begin(VecDeque::new(), true)
    };
    assert_eq!(roll::flip(&mut r, &view(&lives), 2, &shape(1, 0)), None);
    // A slot that is not a replacement of the batch flips nothing.
    assert_eq!(roll::flip(&mut r, &view(&lives), 0, &shape(1, 0)), None);
    lives.insert(3, standby(State::Ready(run(4))));
    let flip = roll::flip(&mut r, &view(&lives), 3, &shape(1, 0)).expect("the batch is ready");
    assert_eq!(
        flip,
        vec![
            (2, Input::FlipIn),
            (3, Input::FlipIn),
            (0, Input::Retire("replaced by a rolling restart".into())),
            (1, Input::Retire("replaced by a rolling restart".into())),
        ]
    );
    assert!(r.batch.is_empty());
    assert_eq!((r.replaced, r.leaving.clone()), (2, vec![0, 1]));
    assert_eq!(roll::progress(&r), (2, 2));
}

/// A canary's replacements that were all ready before the first of their readiness events
/// was handled: the first flips them in, judged; the others' events find nothing to flip and
/// leave the canary's workers as they are.
#[test]
fn a_canarys_batch_flips_in_once_whatever_the_order_of_its_readiness_events() {
    let lives = map(&[
        (0, ready(1)),
        (1, ready(2)),
        (2, standby(State::Ready(run(3)))),
        (3, standby(State::Ready(run(4)))),
    ]);
    let ask = crate::settings::choices::CanaryAsk {
        percent: 50,
        for_ms: 1000,
        by: crate::settings::choices::CanaryBy::Connection,
        limits: Default::default(),
    };
    let mut r = roll::Roll {
        batch: vec![(0, 2), (1, 3)],
        canary: Some(canary::CanaryRoll::new(ask, 2)),
        ..roll::begin(VecDeque::new(), true)
    };
    let flip = roll::flip(&mut r, &view(&lives), 3, &shape(1, 0)).expect("the batch is ready");
    assert_eq!(
        flip,
        vec![(2, Input::FlipInCanary), (3, Input::FlipInCanary)]
    );
    let judged = |r: &roll::Roll| r.canary.as_ref().map(|c| c.pairs.clone());
    assert_eq!(judged(&r), Some(vec![(0, 2), (1, 3)]));
    assert_eq!(roll::flip(&mut r, &view(&lives), 2, &shape(1, 0)), None);
    assert_eq!(judged(&r), Some(vec![(0, 2), (1, 3)]));
    assert!(r.canary.as_ref().is_some_and(|c| c.judging()));
}

#[test]
fn an_aborted_roll_retires_every_replacement_of_its_batch() {
    let mut r = roll::Roll {
        batch: vec![(0, 2), (1, 3)],
        ..roll::begin(VecDeque::from([4]), true)
    };
    let (inputs, old) = roll::abort(&mut r, 3);
    assert_eq!(old, 1);
    assert_eq!(
        inputs,
        vec![
            (2, Input::Retire("rolling restart aborted".into())),
            (3, Input::Retire("rolling restart aborted".into())),
        ]
    );
    assert!(r.batch.is_empty());
}

#[test]
fn a_roll_is_done_once_no_old_worker_it_flipped_out_is_leaving() {
    let mut old = ready(1);
    old.state = State::Leaving(run(1));
    let mut lives = map(&[(0, old), (1, ready(2))]);
    let r = roll::Roll {
        leaving: vec![0],
        replaced: 1,
        ..roll::begin(VecDeque::new(), true)
    };
    assert!(!roll::done(&r, &view(&lives)));
    lives.get_mut(&0).unwrap().state =
        State::Stopping(run(1), crate::supervisor::lifecycle::After::Retire);
    assert!(roll::done(&r, &view(&lives)));
    let pending = roll::begin(VecDeque::from([1]), true);
    assert!(!roll::done(&pending, &view(&lives)));
    assert_eq!(
        roll::refusal(false, true),
        Some("a rolling restart is already in progress; wait for it to end")
    );
    assert_eq!(roll::refusal(true, false), Some("ck is stopping"));
    assert_eq!(roll::refusal(false, false), None);
}

#[test]
fn a_reload_replaces_the_serving_slots_that_run_a_worker() {
    let lives = map(&[
        (0, ready(1)),
        (1, serving(State::Waiting)),
        (2, spare(State::Ready(run(3)))),
        (3, starting(4)),
    ]);
    assert_eq!(roll::reload_targets(&view(&lives)), VecDeque::from([0, 3]));
}

#[test]
fn a_reload_revives_every_serving_slot_without_a_worker_and_waits_for_each() {
    let mut held = serving(State::Held);
    held.crash.half_open();
    let lives = map(&[
        (0, ready(1)),
        (1, serving(State::Waiting)),
        (2, held),
        (
            3,
            Life {
                socket_open: false,
                ..serving(State::Broken)
            },
        ),
        (4, standby(State::Waiting)),
        (5, spare(State::Ready(run(3)))),
    ]);
    let targets = roll::revive_targets(&view(&lives));
    assert_eq!(
        targets,
        [1, 2, 3],
        "never a standby, a spare or a slot with a worker"
    );
    let mut r = roll::begin(roll::reload_targets(&view(&lives)), true);
    assert_eq!(
        roll::revive(&mut r, &targets),
        [(1, Input::Revive), (2, Input::Revive), (3, Input::Revive)]
    );
    r.pending.clear();
    assert!(
        !roll::done(&r, &view(&lives)),
        "waits for the revived slots"
    );
    assert!(roll::revived_ready(&mut r, 1));
    assert!(
        !roll::revived_ready(&mut r, 0),
        "not revived: nothing to wait for"
    );
    assert!(roll::revival_failed(&mut r, 2, "exit 3".into()));
    assert!(
        !roll::revival_failed(&mut r, 1, "exit 3".into()),
        "ready is settled"
    );
    assert!(!roll::done(&r, &view(&lives)));
    assert!(roll::revival_failed(
        &mut r,
        3,
        "could not start: no such file".into()
    ));
    assert!(roll::done(&r, &view(&lives)));
    assert_eq!(
        roll::outcome(&r),
        Err(
            "reloaded 0 worker(s) and restarted 3 crashed slot(s) at once: 2 still fail \
             (slot 2: exit 3; slot 3: could not start: no such file); the workers' output in \
             ck's log says why"
                .into()
        )
    );
    r.revived.retain(|index, _| *index == 1);
    r.replaced = 2;
    assert_eq!(
        roll::outcome(&r),
        Ok("reloaded 2 worker(s) and restarted 1 crashed slot(s) at once: all ready".into())
    );
    r.revived.clear();
    assert_eq!(roll::outcome(&r), Ok("reloaded 2 worker(s)".into()));
}

#[test]
fn a_scale_down_retires_what_keeps_least_open_first() {
    let lives = map(&[
        (0, ready(1)),
        (1, ready(2)),
        (2, serving(State::Waiting)),
        (3, starting(3)),
        (4, standby(State::Starting(run(5)))),
    ]);
    let plan = scale::plan(&view(&lives), 2);
    assert_eq!((plan.from, plan.open), (4, 0));
    // Slot 2 (no worker, socket open: held tier) before slot 3 (starting) before the ready
    // ones; the standby is not the fleet's.
    let retired: Vec<u32> = plan.retire.iter().map(|(i, _)| *i).collect();
    assert_eq!(retired, vec![2, 3]);
    let up = scale::plan(&view(&lives), 6);
    assert_eq!((up.open, up.retire.len()), (2, 0));
    assert!(scale::refusal(0, false, false, &shape(1, 0)).is_some());
    assert!(scale::refusal(3, false, true, &shape(1, 0)).is_some());
    assert!(scale::refusal(3, true, false, &shape(1, 0)).is_some());
    assert_eq!(scale::refusal(3, false, false, &shape(1, 0)), None);
}

#[test]
fn a_slot_opened_while_the_host_is_drained_starts_drained() {
    let mut a = ready(1);
    a.drained = true;
    let lives = map(&[(0, a)]);
    assert!(scale::host_drained(&view(&lives)));
    assert_eq!(
        scale::opening(1, true),
        vec![(1, Input::Drain(true)), (1, Input::Start)]
    );
    let lives = map(&[(0, ready(1))]);
    assert!(!scale::host_drained(&view(&lives)));
    assert_eq!(scale::opening(1, false), vec![(1, Input::Start)]);
    // With no worker at all, the host is not drained (nothing to hold out).
    let lives = map(&[(0, serving(State::Waiting))]);
    assert!(!scale::host_drained(&view(&lives)));
}
