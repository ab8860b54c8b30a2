//! Unit tests of the crash rule through the transition function: the backoff, the breaker and
//! its half-open state, a reload's revival, and what counts as a boot crash.
use std::time::{Duration, Instant};

use super::tests::{P, context, ranks, ready_slot, settings};
use super::{crash::Breaker, *};

#[test]
fn a_boot_crash_waits_a_growing_backoff_and_trips_the_breaker() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = Life::new(P, false);
    step(&mut life, Input::Start, &context(t0, 2), &s);
    let mut delays = Vec::new();
    for i in 0..P.crash_limit {
        let now = t0 + Duration::from_millis(u64::from(i) * 10);
        step(
            &mut life,
            Input::Spawned {
                id: u64::from(i) + 1,
            },
            &context(now, 2),
            &s,
        );
        let effects = step(
            &mut life,
            Input::Exited { outside: false },
            &context(now, 2),
            &s,
        );
        delays.extend(effects.iter().filter_map(|e| match e {
            Effect::Arm(Timer::Restart, d, _) => Some(*d),
            _ => None,
        }));
    }
    let n = delays.len();
    assert_eq!(
        &delays[..n - 1],
        &[P.initial, P.initial * 2, P.initial * 4, P.initial * 8]
    );
    assert_eq!(
        delays[n - 1],
        P.cooldown,
        "the last crash opens the breaker"
    );
    assert_eq!(life.state, State::Broken);
    assert_eq!(life.crash.breaker(), Breaker::Open);
    assert!(!life.socket_open);
}

#[test]
fn the_breaker_never_takes_the_group_below_min_workers() {
    let t0 = Instant::now();
    let s = settings();
    let mut life = Life::new(P, false);
    let alone = Context {
        others_trying: 0,
        maps_pending: false,
        ..context(t0, 0)
    };
    step(&mut life, Input::Start, &alone, &s);
    let mut last = Vec::new();
    for i in 0..P.crash_limit + 2 {
        step(
            &mut life,
            Input::Spawned {
                id: u64::from(i) + 1,
            },
            &alone,
            &s,
        );
        last = step(&mut life, Input::Exited { outside: false }, &alone, &s);
    }
    assert!(
        last.contains(&Effect::Arm(Timer::Restart, P.max, life.epoch)),
        "{last:?}"
    );
    assert_eq!(life.crash.breaker(), Breaker::HalfOpen);
    assert_eq!(life.state, State::Held, "the only slot keeps its socket");
    assert!(life.trying());
}

#[test]
fn a_reload_revives_a_crash_looping_slot_at_once_with_its_crashes_forgotten() {
    let t0 = Instant::now();
    let s = settings();
    // Broken while others try; held half-open as the group's only slot.
    for alone in [false, true] {
        let view = match alone {
            true => Context {
                others_trying: 0,
                maps_pending: false,
                ..context(t0, 0)
            },
            false => context(t0, 2),
        };
        let mut life = Life::new(P, false);
        step(&mut life, Input::Start, &view, &s);
        for id in 1..=u64::from(P.crash_limit) {
            step(&mut life, Input::Spawned { id }, &view, &s);
            step(&mut life, Input::Exited { outside: false }, &view, &s);
        }
        let expected = if alone { State::Held } else { State::Broken };
        assert_eq!(life.state, expected);
        let (restarts, cooling) = (life.restarts, life.epoch);
        let effects = step(&mut life, Input::Revive, &view, &s);
        assert_eq!(ranks(&effects), [Effect::Spawn], "no backoff, no cool-down");
        assert_eq!(life.crash.breaker(), Breaker::Closed);
        assert_eq!(life.crash.recent(), 0);
        assert_eq!(life.restarts, restarts + 1);
        assert_eq!(
            life.socket_open, alone,
            "a held socket goes to the fresh worker"
        );
        step(&mut life, Input::Spawned { id: 99 }, &view, &s);
        assert!(matches!(life.state, State::Starting(Run { id: 99, .. })));
        let late = Input::Timer(Timer::Restart, cooling);
        assert!(
            step(&mut life, late, &view, &s).is_empty(),
            "the old timer is stale"
        );
        // Its next boot crash starts the backoff afresh.
        let effects = step(&mut life, Input::Exited { outside: false }, &view, &s);
        assert!(
            effects.contains(&Effect::Arm(Timer::Restart, P.initial, 99)),
            "{effects:?}"
        );
    }
    // A slot with a worker, or a standby without one, is not revived.
    let mut ready = ready_slot(t0, 1);
    assert!(step(&mut ready, Input::Revive, &context(t0, 1), &s).is_empty());
    let mut standby = Life {
        state: State::Waiting,
        ..Life::new(P, true)
    };
    assert!(step(&mut standby, Input::Revive, &context(t0, 1), &s).is_empty());
}

#[test]
fn a_worker_killed_right_after_ready_by_itself_is_a_boot_crash() {
    let t0 = Instant::now();
    let mut life = ready_slot(t0, 1);
    let soon = context(t0 + Duration::from_millis(10), 1);
    let effects = step(
        &mut life,
        Input::Exited { outside: false },
        &soon,
        &settings(),
    );
    assert!(
        effects.contains(&Effect::Arm(Timer::Restart, P.initial, 1)),
        "{effects:?}"
    );
}
