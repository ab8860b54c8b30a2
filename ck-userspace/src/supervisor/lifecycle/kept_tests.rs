//! Unit tests of a kept worker (`--keep-previous`): flipped out by a roll, it stays alive with
//! its socket open and out of the active set; `ck rollback` flips it back in; the window's end
//! retires it through the leaving path; a worker that never became ready is not kept.
use std::time::{Duration, Instant};

use ck_common::SlotState;

use super::tests::{P, context, ranks, ready_slot, settings};
use super::*;

const WINDOW: Duration = Duration::from_secs(600);

/// Slot with worker `id`, ready, then kept by a roll.
fn kept(t0: Instant, id: u64) -> Life {
    let mut life = ready_slot(t0, id);
    let effects = step(&mut life, Input::Keep(WINDOW), &context(t0, 1), &settings());
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::Arm(Timer::KeptUntil, WINDOW, id)]
    );
    life
}

#[test]
fn a_kept_worker_stays_alive_out_of_the_active_set_and_not_serving() {
    let t0 = Instant::now();
    let life = kept(t0, 4);
    assert!(matches!(life.state, State::Ready(_)), "{life:?}");
    assert!(life.socket_open && life.standby && life.kept == Some(t0));
    assert!(!life.selectable() && !life.serving() && !life.spare);
    assert_eq!(life.shown(), SlotState::Kept);
    assert_eq!(tier(&life), Tier::Live);
}

#[test]
fn a_rollback_flips_a_kept_worker_back_in() {
    let t0 = Instant::now();
    let mut life = kept(t0, 4);
    let effects = step(&mut life, Input::FlipIn, &context(t0, 1), &settings());
    assert_eq!(ranks(&effects), vec![Effect::Publish]);
    assert!(life.selectable() && life.serving() && life.kept.is_none());
    assert_eq!(life.shown(), SlotState::Ready);
    // The window's timer, still armed, finds nothing kept: no effect.
    let late = step(
        &mut life,
        Input::Timer(Timer::KeptUntil, 4),
        &context(t0 + WINDOW, 1),
        &settings(),
    );
    assert!(late.is_empty(), "{late:?}");
    assert!(life.selectable());
}

#[test]
fn at_the_windows_end_a_kept_worker_leaves_like_a_retired_one() {
    let t0 = Instant::now();
    let linger = Duration::from_secs(10);
    let s = Settings {
        linger: Some(linger),
        ..settings()
    };
    let mut life = kept(t0, 4);
    let effects = step(
        &mut life,
        Input::Timer(Timer::KeptUntil, 4),
        &context(t0 + WINDOW, 1),
        &s,
    );
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::Arm(Timer::Linger, linger, 4)]
    );
    assert!(matches!(life.state, State::Leaving(_)) && life.kept.is_none());
    // Without a linger (no program counts its connections) it is signalled at once.
    let mut life = kept(t0, 5);
    let effects = step(
        &mut life,
        Input::Timer(Timer::KeptUntil, 5),
        &context(t0 + WINDOW, 1),
        &settings(),
    );
    assert!(effects.contains(&Effect::Signal(Sig::Term)), "{effects:?}");
    assert!(matches!(life.state, State::Stopping(_, After::Retire)));
}

#[test]
fn a_kept_worker_that_dies_is_gone_not_restarted() {
    let t0 = Instant::now();
    let mut life = kept(t0, 4);
    let effects = step(
        &mut life,
        Input::Exited { outside: true },
        &context(t0, 1),
        &settings(),
    );
    assert!(effects.contains(&Effect::Remove), "{effects:?}");
    assert!(
        effects.contains(&Effect::Note(Note::Retired)),
        "{effects:?}"
    );
    assert!(!effects.contains(&Effect::Spawn), "{effects:?}");
}

#[test]
fn a_kept_worker_retired_by_a_newer_reload_is_no_longer_kept() {
    let t0 = Instant::now();
    let mut life = kept(t0, 4);
    step(
        &mut life,
        Input::Retire("a newer reload replaces the kept release".into()),
        &context(t0, 1),
        &settings(),
    );
    assert!(life.kept.is_none() && life.leaving(), "{life:?}");
}

#[test]
fn a_worker_that_never_became_ready_is_retired_not_kept() {
    let t0 = Instant::now();
    let mut life = Life::new(P, false);
    let s = settings();
    step(&mut life, Input::Start, &context(t0, 1), &s);
    step(&mut life, Input::Spawned { id: 9 }, &context(t0, 1), &s);
    let effects = step(&mut life, Input::Keep(WINDOW), &context(t0, 1), &s);
    assert!(effects.contains(&Effect::Signal(Sig::Term)), "{effects:?}");
    assert!(life.kept.is_none() && life.leaving(), "{life:?}");
}
