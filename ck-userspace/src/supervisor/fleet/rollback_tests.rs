//! The kept release's decisions on literal fleets: a reload's flip keeps the old workers with
//! `--keep-previous` (a recycle's does not), `ck rollback` flips them back in and retires the
//! serving ones in one batch, and refuses with what to run instead.
use std::{collections::VecDeque, time::Duration, time::Instant};

use super::tests::{map, ready, run, shape, standby, view};
use super::*;
use crate::supervisor::lifecycle::{Input, Life, State};

const WINDOW: Duration = Duration::from_secs(60);

/// A kept worker `id` of the previous release.
fn kept(id: u64) -> Life {
    Life {
        kept: Some(Instant::now()),
        ..standby(State::Ready(run(id)))
    }
}

#[test]
fn a_reloads_flip_keeps_the_old_workers_and_does_not_wait_for_them() {
    let lives = map(&[(0, ready(1)), (1, standby(State::Ready(run(2))))]);
    let mut r = roll::Roll {
        batch: vec![(0, 1)],
        ..roll::begin(VecDeque::new(), true)
    };
    let mut keep = shape(1, 0);
    keep.keep_previous = Some(WINDOW);
    let flip = roll::flip(&mut r, &view(&lives), 1, &keep).expect("ready");
    assert_eq!(flip, vec![(1, Input::FlipIn), (0, Input::Keep(WINDOW))]);
    assert!(r.leaving.is_empty(), "a kept worker is not waited for");
    // A recycle (not a reload) retires its old worker even with --keep-previous.
    let mut r = roll::Roll {
        batch: vec![(0, 1)],
        ..roll::begin(VecDeque::new(), false)
    };
    let flip = roll::flip(&mut r, &view(&lives), 1, &keep).expect("ready");
    assert_eq!(
        flip[1],
        (0, Input::Retire("replaced by a rolling restart".into()))
    );
}

#[test]
fn a_rollback_flips_the_kept_release_in_and_retires_the_serving_one_in_one_batch() {
    let lives = map(&[
        (0, kept(1)),
        (1, kept(2)),
        (2, ready(3)),
        (3, ready(4)),
        (4, Life::spare(shape(1, 1).restart)),
    ]);
    let plan = rollback::plan(&view(&lives), None, true).expect("a release is kept");
    assert_eq!((plan.back, plan.leaving.clone()), (vec![0, 1], vec![2, 3]));
    let why = || Input::Retire(rollback::WHY.into());
    assert_eq!(
        plan.inputs,
        vec![
            (0, Input::FlipIn),
            (1, Input::FlipIn),
            (2, why()),
            (3, why()),
        ]
    );
}

#[test]
fn a_rollback_is_refused_with_what_to_run_instead() {
    let lives = map(&[(0, ready(1)), (1, ready(2))]);
    let off = rollback::plan(&view(&lives), None, false).expect_err("nothing kept");
    assert!(
        off.contains("--keep-previous DURATION") && off.contains("ck reload"),
        "{off}"
    );
    let on = rollback::plan(&view(&lives), None, true).expect_err("nothing kept");
    assert!(
        on.contains("window ended") && on.contains("ck reload"),
        "{on}"
    );
    // A roll that has flipped nothing yet has nothing out to put back.
    let r = roll::begin(VecDeque::from([0, 1]), true);
    let early = rollback::plan(&view(&lives), Some(&r), true).expect_err("nothing kept yet");
    assert!(early.contains("has not flipped a batch in yet"), "{early}");
    let off = rollback::plan(&view(&lives), Some(&r), false).expect_err("nothing kept");
    assert!(off.contains("wait for it to end"), "{off}");
}

#[test]
fn a_newer_reload_retires_the_kept_release_first() {
    let lives = map(&[(0, kept(1)), (1, ready(2))]);
    let retire = rollback::retire_kept(&view(&lives));
    assert_eq!(retire.len(), 1);
    assert!(matches!(retire[0], (0, Input::Retire(_))));
}

#[test]
fn with_keep_previous_a_scale_needs_room_for_two_releases() {
    let mut keep = shape(1, 1);
    keep.keep_previous = Some(WINDOW);
    assert_eq!(scale::refusal(62, false, false, &keep), None);
    let why = scale::refusal(63, false, false, &keep).expect("63 x 2 + 2 > 127");
    assert!(why.contains("at most 62 workers"), "{why}");
    assert_eq!(scale::refusal(63, false, false, &shape(1, 1)), None);
}

#[test]
fn mid_roll_a_rollback_takes_out_what_the_reload_brought_in_and_nothing_else() {
    // Slot 0 was replaced by 2 (and kept); slot 1 is old and not reached yet; 3 is the
    // replacement in flight for it.
    let lives = map(&[
        (0, kept(1)),
        (1, ready(2)),
        (2, ready(3)),
        (3, standby(State::Starting(run(4)))),
    ]);
    let r = roll::Roll {
        replacements: vec![2],
        batch: vec![(1, 3)],
        ..roll::begin(VecDeque::new(), true)
    };
    let plan = rollback::plan(&view(&lives), Some(&r), true).expect("mid-roll");
    assert_eq!(plan.back, vec![0]);
    assert_eq!(plan.leaving, vec![2, 3], "the old slot 1 serves on");
}
