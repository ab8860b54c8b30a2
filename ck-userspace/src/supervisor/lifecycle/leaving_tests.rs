//! Unit tests of a retired worker's leaving: out of the active set at once, the stop signal once
//! its connections are done or at the linger's end, and the ways it can end early.
use std::time::{Duration, Instant};

use ck_common::SlotState;

use super::tests::{P, context, ranks, ready_slot};
use super::*;

const LINGER: Duration = Duration::from_secs(10);

/// The lifecycle tests' settings, with a linger.
fn settings() -> Settings {
    Settings {
        linger: Some(LINGER),
        ..super::tests::settings()
    }
}

/// A slot whose worker `id` served and was retired: leaving.
fn leaving(t0: Instant, id: u64) -> Life {
    let mut life = ready_slot(t0, id);
    step(
        &mut life,
        Input::Retire("retired".into()),
        &context(t0, 1),
        &settings(),
    );
    assert!(matches!(life.state, State::Leaving(_)), "{life:?}");
    life
}

#[test]
fn a_retired_worker_leaves_the_active_set_and_is_signalled_once_its_connections_are_done() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready_slot(t0, 3);
    let effects = step(
        &mut life,
        Input::Retire("scaled down".into()),
        &context(t0, 1),
        &s,
    );
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::Arm(Timer::Linger, LINGER, 3)]
    );
    assert!(matches!(life.state, State::Leaving(_)));
    assert!(!life.selectable() && !life.serving() && life.leaving());
    assert_eq!(life.shown(), SlotState::Draining);
    assert_eq!(tier(&life), Tier::Live, "a fallback while it still accepts");
    // A second Retire (the roll and a scale-down) changes nothing.
    assert!(
        step(
            &mut life,
            Input::Retire("again".into()),
            &context(t0, 1),
            &s
        )
        .is_empty()
    );
    let effects = step(
        &mut life,
        Input::Finished("done".into()),
        &context(t0, 1),
        &s,
    );
    assert_eq!(
        ranks(&effects),
        vec![
            Effect::Publish,
            Effect::Signal(Sig::Term),
            Effect::Arm(Timer::Kill, s.stop_timeout, 3)
        ]
    );
    assert_eq!(
        life.state,
        State::Stopping(life.state.run().unwrap(), After::Retire)
    );
    let effects = step(
        &mut life,
        Input::Exited { outside: false },
        &context(t0, 1),
        &s,
    );
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
}

#[test]
fn the_linger_ends_a_leave_whose_connections_stay_open() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = leaving(t0, 4);
    // A linger of an earlier worker is stale.
    assert!(
        step(
            &mut life,
            Input::Timer(Timer::Linger, 1),
            &context(t0, 1),
            &s
        )
        .is_empty()
    );
    let effects = step(
        &mut life,
        Input::Timer(Timer::Linger, 4),
        &context(t0, 1),
        &s,
    );
    assert!(ranks(&effects).contains(&Effect::Signal(Sig::Term)));
    assert!(matches!(life.state, State::Stopping(_, After::Retire)));
    // Finished comes too late: nothing more.
    assert!(
        step(
            &mut life,
            Input::Finished("late".into()),
            &context(t0, 1),
            &s
        )
        .is_empty()
    );
}

#[test]
fn a_leaving_worker_that_exits_on_its_own_is_removed_not_restarted() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = leaving(t0, 5);
    let effects = step(
        &mut life,
        Input::Exited { outside: true },
        &context(t0, 1),
        &s,
    );
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
    assert_eq!(life.state, State::Idle);
    assert_eq!(life.restarts, 0);
}

#[test]
fn a_shutdown_stops_a_leaving_worker_at_once() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = leaving(t0, 6);
    let effects = step(
        &mut life,
        Input::Shutdown("SIGTERM".into()),
        &context(t0, 1),
        &s,
    );
    assert!(ranks(&effects).contains(&Effect::Signal(Sig::Term)));
    assert!(matches!(life.state, State::Stopping(..)));
}

#[test]
fn a_worker_that_never_served_or_without_a_linger_is_signalled_at_once() {
    let t0 = Instant::now();
    let s = settings();
    let mut starting = Life::new(P, true);
    step(&mut starting, Input::Start, &context(t0, 1), &s);
    step(&mut starting, Input::Spawned { id: 7 }, &context(t0, 1), &s);
    let effects = step(
        &mut starting,
        Input::Retire("aborted".into()),
        &context(t0, 1),
        &s,
    );
    assert!(ranks(&effects).contains(&Effect::Signal(Sig::Term)));
    let plain = Settings {
        linger: None,
        ..settings()
    };
    let mut life = ready_slot(t0, 8);
    let effects = step(
        &mut life,
        Input::Retire("scaled down".into()),
        &context(t0, 1),
        &plain,
    );
    assert!(ranks(&effects).contains(&Effect::Signal(Sig::Term)));
}

#[test]
fn a_stopping_worker_whose_slot_went_quiet_is_killed_and_only_a_stopping_one() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = leaving(t0, 4);
    step(
        &mut life,
        Input::Finished("done".into()),
        &context(t0, 1),
        &s,
    );
    assert!(matches!(life.state, State::Stopping(..)), "{life:?}");
    let effects = step(
        &mut life,
        Input::Quiet("no datagram for 3s".into()),
        &context(t0, 1),
        &s,
    );
    assert_eq!(ranks(&effects), vec![Effect::Signal(Sig::Kill)]);
    assert!(
        matches!(life.state, State::Stopping(..)),
        "stopping until it exits"
    );
    // A serving or leaving worker is never killed for quiet: it is not stopping.
    let mut ready = ready_slot(t0, 5);
    assert!(step(&mut ready, Input::Quiet("q".into()), &context(t0, 1), &s).is_empty());
    let mut leaver = leaving(t0, 6);
    assert!(step(&mut leaver, Input::Quiet("q".into()), &context(t0, 1), &s).is_empty());
}
