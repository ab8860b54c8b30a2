//! Unit tests of a retired worker's leaving: out of the active set at once, the stop signal once
//! its connections are done or at the linger's end, and the ways it can end early.
use std::time::{Duration, Instant};

use ck_common::SlotState;

use super::*;
use crate::settings::restart_policy::RestartPolicy;

const P: RestartPolicy = RestartPolicy::DEFAULT;
const LINGER: Duration = Duration::from_secs(10);

fn settings() -> Settings {
    Settings {
        ready_on_spawn: false,
        ready_grace: None,
        ready_timeout: Duration::from_secs(30),
        drain_timeout: Duration::from_secs(10),
        restart: P,
        min_workers: 1,
        adopt: false,
        linger: Some(LINGER),
    }
}

fn fleet(now: Instant) -> Fleet {
    Fleet {
        now,
        random: 0.0,
        stopping: false,
        others_open: 1,
        others_trying: 1,
    }
}

/// A slot whose worker `id` is ready.
fn ready(now: Instant, id: u64) -> Life {
    let mut life = Life::new(P, false);
    let s = settings();
    step(&mut life, Input::Start, &fleet(now), &s);
    step(&mut life, Input::Spawned { id }, &fleet(now), &s);
    let ready = Input::Ready {
        why: "READY=1".into(),
        healthy: true,
    };
    step(&mut life, ready, &fleet(now), &s);
    life
}

/// The effects without notes, in the executor's order.
fn ranked(mut effects: Vec<Effect>) -> Vec<Effect> {
    effects.retain(|e| !matches!(e, Effect::Note(_)));
    effects.sort_by_key(Effect::rank);
    effects
}

#[test]
fn a_retired_worker_leaves_the_active_set_and_is_signalled_once_its_connections_are_done() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready(t0, 3);
    let effects = step(
        &mut life,
        Input::Retire("scaled down".into()),
        &fleet(t0),
        &s,
    );
    assert_eq!(
        ranked(effects),
        vec![Effect::Publish, Effect::Arm(Timer::Linger, LINGER, 3)]
    );
    assert!(matches!(life.state, State::Leaving(_)));
    assert!(!life.selectable() && !life.serving() && life.leaving());
    assert_eq!(life.shown(), SlotState::Draining);
    assert_eq!(tier(&life), Tier::Live, "a fallback while it still accepts");
    // A second Retire (the roll and a scale-down) changes nothing.
    assert!(step(&mut life, Input::Retire("again".into()), &fleet(t0), &s).is_empty());
    let effects = step(&mut life, Input::Finished("done".into()), &fleet(t0), &s);
    assert_eq!(
        ranked(effects),
        vec![
            Effect::Publish,
            Effect::Signal(Sig::Term),
            Effect::Arm(Timer::Kill, s.drain_timeout, 3)
        ]
    );
    assert_eq!(
        life.state,
        State::Stopping(life.state.run().unwrap(), After::Retire)
    );
    let effects = step(&mut life, Input::Exited { outside: false }, &fleet(t0), &s);
    assert_eq!(
        ranked(effects),
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
}

#[test]
fn the_linger_ends_a_leave_whose_connections_stay_open() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready(t0, 4);
    step(&mut life, Input::Retire("replaced".into()), &fleet(t0), &s);
    // A linger of an earlier worker is stale.
    assert!(step(&mut life, Input::Timer(Timer::Linger, 1), &fleet(t0), &s).is_empty());
    let effects = step(&mut life, Input::Timer(Timer::Linger, 4), &fleet(t0), &s);
    assert!(ranked(effects).contains(&Effect::Signal(Sig::Term)));
    assert!(matches!(life.state, State::Stopping(_, After::Retire)));
    // Finished comes too late: nothing more.
    assert!(step(&mut life, Input::Finished("late".into()), &fleet(t0), &s).is_empty());
}

#[test]
fn a_leaving_worker_that_exits_on_its_own_is_removed_not_restarted() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready(t0, 5);
    step(
        &mut life,
        Input::Retire("scaled down".into()),
        &fleet(t0),
        &s,
    );
    let effects = step(&mut life, Input::Exited { outside: true }, &fleet(t0), &s);
    assert_eq!(
        ranked(effects),
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
    assert_eq!(life.state, State::Idle);
    assert_eq!(life.restarts, 0);
}

#[test]
fn a_shutdown_stops_a_leaving_worker_at_once() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready(t0, 6);
    step(
        &mut life,
        Input::Retire("scaled down".into()),
        &fleet(t0),
        &s,
    );
    let effects = step(&mut life, Input::Shutdown("SIGTERM".into()), &fleet(t0), &s);
    assert!(ranked(effects).contains(&Effect::Signal(Sig::Term)));
    assert!(matches!(life.state, State::Stopping(..)));
}

#[test]
fn a_worker_that_never_served_or_without_a_linger_is_signalled_at_once() {
    let t0 = Instant::now();
    let s = settings();
    let mut starting = Life::new(P, true);
    step(&mut starting, Input::Start, &fleet(t0), &s);
    step(&mut starting, Input::Spawned { id: 7 }, &fleet(t0), &s);
    let effects = step(
        &mut starting,
        Input::Retire("aborted".into()),
        &fleet(t0),
        &s,
    );
    assert!(ranked(effects).contains(&Effect::Signal(Sig::Term)));
    let plain = Settings {
        linger: None,
        ..settings()
    };
    let mut life = ready(t0, 8);
    let effects = step(
        &mut life,
        Input::Retire("scaled down".into()),
        &fleet(t0),
        &plain,
    );
    assert!(ranked(effects).contains(&Effect::Signal(Sig::Term)));
}
