//! Unit tests of the transition function, one input at a time (no root needed); its helpers
//! serve `crash_tests`, `leaving_tests` and `adopt_tests` too.
use std::time::{Duration, Instant};

use ck_common::SlotState;

use super::*;
use crate::settings::restart_policy::RestartPolicy;

pub(super) const P: RestartPolicy = RestartPolicy::DEFAULT;

pub(super) fn settings() -> Settings {
    Settings {
        ready_on_spawn: false,
        ready_grace: Some(Duration::from_secs(1)),
        ready_timeout: Duration::from_secs(30),
        stop_timeout: Duration::from_secs(10),
        restart: P,
        min_workers: 1,
        adopt: false,
        linger: None,
    }
}

/// A fleet view at `now` with `others_open` other open serving slots, all trying.
pub(super) fn context(now: Instant, others_open: usize) -> Context {
    Context {
        now,
        random: 0.0,
        stopping: false,
        others_open,
        others_trying: others_open,
        maps_pending: false,
    }
}

/// A slot with worker `id` ready since `t0`.
pub(super) fn ready_slot(t0: Instant, id: u64) -> Life {
    let mut life = Life::new(P, false);
    let s = settings();
    step(&mut life, Input::Start, &context(t0, 1), &s);
    step(&mut life, Input::Spawned { id }, &context(t0, 1), &s);
    let ready = Input::Ready {
        why: "READY=1".into(),
        healthy: true,
    };
    step(&mut life, ready, &context(t0, 1), &s);
    assert!(matches!(life.state, State::Ready(_)), "{life:?}");
    life
}

pub(super) fn ranks(effects: &[Effect]) -> Vec<Effect> {
    let mut tagged: Vec<((), Effect)> = effects.iter().cloned().map(|e| ((), e)).collect();
    schedule(&mut tagged);
    tagged
        .into_iter()
        .map(|(_, e)| e)
        .filter(|e| !matches!(e, Effect::Note(_)))
        .collect()
}

#[test]
fn start_spawns_then_starting_publishes_and_arms_the_ready_timers() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = Life::new(P, false);
    assert_eq!(
        step(&mut life, Input::Start, &context(t0, 0), &s),
        vec![Effect::Spawn]
    );
    let effects = ranks(&step(
        &mut life,
        Input::Spawned { id: 7 },
        &context(t0, 0),
        &s,
    ));
    assert_eq!(
        effects,
        vec![
            Effect::Publish,
            Effect::Arm(Timer::ReadyTimeout, s.ready_timeout, 7),
            Effect::Arm(Timer::ReadyGrace, Duration::from_secs(1), 7),
        ]
    );
    assert!(matches!(life.state, State::Starting(Run { id: 7, .. })));
    assert!(life.socket_open && life.epoch == 7 && life.generation == 1);
    assert_eq!(life.shown(), SlotState::Starting);
}

#[test]
fn a_worker_that_served_and_was_killed_is_replaced_at_once() {
    let t0 = Instant::now();
    let mut life = ready_slot(t0, 1);
    let later = context(t0 + Duration::from_millis(300), 3);
    let effects = ranks(&step(
        &mut life,
        Input::Exited { outside: true },
        &later,
        &settings(),
    ));
    assert_eq!(
        effects,
        vec![Effect::Publish, Effect::CloseSockets, Effect::Spawn]
    );
    assert_eq!(life.state, State::Waiting);
    assert!(!life.socket_open);
    assert_eq!(life.restarts, 1);
}

#[test]
fn the_last_socket_of_the_group_is_held_for_the_replacement() {
    let t0 = Instant::now();
    let mut life = ready_slot(t0, 1);
    let alone = context(t0 + Duration::from_secs(5), 0);
    let effects = ranks(&step(
        &mut life,
        Input::Exited { outside: true },
        &alone,
        &settings(),
    ));
    assert_eq!(
        effects,
        vec![Effect::Publish, Effect::Spawn],
        "no close: {effects:?}"
    );
    assert_eq!(life.state, State::Held);
    assert!(life.socket_open);
    assert_eq!(tier(&life), Tier::Held);
    assert_eq!(life.shown(), SlotState::Held);
    // The replacement gets the held socket.
    step(&mut life, Input::Spawned { id: 2 }, &alone, &settings());
    assert!(life.socket_open && matches!(life.state, State::Starting(_)));
}

#[test]
fn every_socket_is_held_while_the_program_steers_by_maps_not_taken_into_use() {
    // After an upgrade, until this image takes the pinned maps over, a fresh socket could not
    // be placed in them: the dead worker's socket stays, for its replacement.
    let t0 = Instant::now();
    let mut life = ready_slot(t0, 1);
    let mut resumed = context(t0 + Duration::from_secs(5), 2);
    resumed.maps_pending = true;
    let effects = ranks(&step(
        &mut life,
        Input::Exited { outside: true },
        &resumed,
        &settings(),
    ));
    assert!(!effects.contains(&Effect::CloseSockets), "{effects:?}");
    assert_eq!(life.state, State::Held);
    assert!(life.socket_open);
}

#[test]
fn retire_signals_after_publishing_and_removes_after_closing() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready_slot(t0, 1);
    let effects = ranks(&step(
        &mut life,
        Input::Retire("scaled down".into()),
        &context(t0, 1),
        &s,
    ));
    assert_eq!(
        effects,
        vec![
            Effect::Publish,
            Effect::Signal(Sig::Term),
            Effect::Arm(Timer::Kill, s.stop_timeout, 1)
        ]
    );
    assert!(!life.serving());
    let effects = ranks(&step(
        &mut life,
        Input::Exited { outside: false },
        &context(t0, 1),
        &s,
    ));
    assert_eq!(
        effects,
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
}

#[test]
fn a_dead_standby_is_removed_not_restarted() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = Life::new(P, true);
    step(&mut life, Input::Start, &context(t0, 1), &s);
    step(&mut life, Input::Spawned { id: 3 }, &context(t0, 1), &s);
    assert_eq!(life.shown(), SlotState::Starting);
    let effects = step(
        &mut life,
        Input::Exited { outside: false },
        &context(t0, 1),
        &s,
    );
    assert!(effects.contains(&Effect::Note(Note::StandbyFailed)));
    assert_eq!(
        ranks(&effects),
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
}

#[test]
fn stale_timers_and_late_messages_change_nothing() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready_slot(t0, 5);
    let before = life.clone();
    for input in [
        Input::Timer(Timer::ReadyTimeout, 4),
        Input::Timer(Timer::Restart, 5),
        Input::Timer(Timer::Kill, 5),
        Input::Ready {
            why: "again".into(),
            healthy: true,
        },
        Input::Drain(false),
        Input::FlipIn,
    ] {
        assert_eq!(
            step(&mut life, input.clone(), &context(t0, 1), &s),
            vec![],
            "{input:?}"
        );
    }
    assert_eq!(life.state, before.state);
}

#[test]
fn drain_and_health_move_the_slot_out_of_the_ready_tier_and_back() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready_slot(t0, 1);
    assert_eq!(tier(&life), Tier::Ready);
    step(&mut life, Input::Drain(true), &context(t0, 1), &s);
    assert_eq!(
        (tier(&life), life.shown()),
        (Tier::Live, SlotState::Draining)
    );
    step(&mut life, Input::Drain(false), &context(t0, 1), &s);
    let unhealthy = Input::Health {
        healthy: false,
        why: "probe".into(),
    };
    step(&mut life, unhealthy, &context(t0, 1), &s);
    assert_eq!(
        (tier(&life), life.shown()),
        (Tier::Live, SlotState::Unhealthy)
    );
    let healthy = Input::Health {
        healthy: true,
        why: "probes pass".into(),
    };
    step(&mut life, healthy, &context(t0, 1), &s);
    assert_eq!(tier(&life), Tier::Ready);
}

#[test]
fn the_active_set_puts_held_sockets_last_and_only_without_live_workers() {
    let t0 = Instant::now();
    let s = settings();
    let ready = ready_slot(t0, 1);
    let mut starting = Life::new(P, false);
    step(&mut starting, Input::Start, &context(t0, 1), &s);
    step(&mut starting, Input::Spawned { id: 2 }, &context(t0, 1), &s);
    let mut held = ready_slot(t0, 3);
    step(
        &mut held,
        Input::Exited { outside: true },
        &context(t0, 0),
        &s,
    );
    assert_eq!(held.state, State::Held);

    let set = active_set(
        [(0, &ready), (1, &starting), (2, &held)].into_iter(),
        false,
        false,
    );
    assert_eq!((set.ready_len, set.live_len), (1, 2));
    assert_eq!(&set.slots[..2], &[0, 1]);
    let set = active_set([(2, &held)].into_iter(), false, false);
    assert_eq!((set.ready_len, set.live_len, set.slots[0]), (0, 1, 2));
    let set = active_set([(0, &ready), (2, &held)].into_iter(), true, false);
    assert_eq!(
        (set.ready_len, set.live_len),
        (0, 0),
        "empty while stopping"
    );
}

#[test]
fn a_superseded_slot_leaves_instead_of_restarting() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = ready_slot(t0, 1);
    let effects = ranks(&step(&mut life, Input::Superseded, &context(t0, 1), &s));
    assert_eq!(
        effects,
        vec![Effect::Publish, Effect::CloseSockets, Effect::Remove]
    );
    assert_eq!(life.restarts, 0);
}

#[test]
fn a_spare_taking_over_is_flipped_in_with_the_dead_slots_drain() {
    let t0 = Instant::now();
    let s = settings();
    let mut spare = Life::new(P, true);
    step(&mut spare, Input::Start, &context(t0, 1), &s);
    step(&mut spare, Input::Spawned { id: 4 }, &context(t0, 1), &s);
    let ready = Input::Ready {
        why: "READY=1".into(),
        healthy: true,
    };
    step(&mut spare, ready, &context(t0, 1), &s);
    assert!(!spare.selectable(), "a spare is never selected");
    let mut drained = spare.clone();
    let effects = ranks(&step(
        &mut spare,
        Input::TakeOver { drained: false },
        &context(t0, 1),
        &s,
    ));
    assert_eq!(effects, vec![Effect::Publish]);
    assert!(spare.selectable() && spare.serving());
    step(
        &mut drained,
        Input::TakeOver { drained: true },
        &context(t0, 1),
        &s,
    );
    assert!(drained.drained && !drained.standby && !drained.selectable());
    assert_eq!(
        step(
            &mut spare,
            Input::TakeOver { drained: true },
            &context(t0, 1),
            &s
        ),
        vec![],
        "only a standby takes over"
    );
}

#[test]
fn republish_publishes_in_any_state_and_changes_nothing() {
    let t0 = Instant::now();
    let s = settings();
    for mut life in [Life::new(P, false), ready_slot(t0, 1)] {
        let before = life.clone();
        let effects = step(&mut life, Input::Republish, &context(t0, 1), &s);
        assert_eq!(effects, vec![Effect::Publish]);
        assert_eq!(format!("{life:?}"), format!("{before:?}"));
    }
}
