//! Unit tests of `--adopt`'s slots: a worker ready only once its socket is adopted, a held
//! socket replaced, member slots, and a socket given up when the worker unlistens.
use std::time::Instant;

use super::tests::*;
use super::*;

fn adopt_settings() -> Settings {
    Settings {
        adopt: true,
        ready_grace: None,
        ..settings()
    }
}

#[test]
fn with_adopt_a_worker_is_ready_only_once_adopted_and_a_held_socket_is_replaced() {
    let t0 = Instant::now();
    let s = adopt_settings();
    let mut life = Life::new(P, false);
    step(&mut life, Input::Start, &context(t0, 0), &s);
    step(&mut life, Input::Spawned { id: 1 }, &context(t0, 0), &s);
    assert!(!life.socket_open, "the worker opens its own socket");
    let ready = || Input::Ready {
        why: "READY=1".into(),
        healthy: true,
    };
    assert_eq!(step(&mut life, ready(), &context(t0, 0), &s), vec![]);
    assert!(matches!(life.state, State::Starting(_)));
    let effects = ranks(&step(&mut life, Input::Adopted, &context(t0, 0), &s));
    assert_eq!(
        effects,
        vec![Effect::Install, Effect::Publish],
        "nothing to replace: {effects:?}"
    );
    step(&mut life, ready(), &context(t0, 0), &s);
    assert_eq!(tier(&life), Tier::Ready);

    // The only worker dies: its socket is held; the replacement's socket replaces it.
    step(
        &mut life,
        Input::Exited { outside: true },
        &context(t0, 0),
        &s,
    );
    assert_eq!(life.state, State::Held);
    step(&mut life, Input::Spawned { id: 2 }, &context(t0, 0), &s);
    assert!(
        life.socket_open,
        "the held socket stays until the new one is adopted"
    );
    let effects = ranks(&step(&mut life, Input::Adopted, &context(t0, 0), &s));
    assert_eq!(
        effects,
        vec![Effect::Install, Effect::Publish, Effect::CloseReplaced]
    );
}

#[test]
fn a_member_is_selected_never_serving_and_removed_when_its_process_exits() {
    let t0 = Instant::now();
    let s = adopt_settings();
    let mut member = Life::member(P, 0);
    step(&mut member, Input::Spawned { id: 9 }, &context(t0, 1), &s);
    step(&mut member, Input::Adopted, &context(t0, 1), &s);
    let ready = Input::Ready {
        why: "a listener of slot 0's tree".into(),
        healthy: true,
    };
    step(&mut member, ready, &context(t0, 1), &s);
    assert_eq!(tier(&member), Tier::Ready);
    assert!(!member.serving() && !member.trying());
    let effects = ranks(&step(
        &mut member,
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
fn unadopted_gives_the_socket_up_unless_it_is_the_groups_last() {
    let t0 = Instant::now();
    let s = adopt_settings();
    let mut life = Life::new(P, false);
    step(&mut life, Input::Start, &context(t0, 1), &s);
    step(&mut life, Input::Spawned { id: 1 }, &context(t0, 1), &s);
    step(&mut life, Input::Adopted, &context(t0, 1), &s);
    let mut alone = life.clone();
    let effects = ranks(&step(&mut life, Input::Unadopted, &context(t0, 1), &s));
    assert_eq!(effects, vec![Effect::Publish, Effect::CloseSockets]);
    assert!(matches!(
        life.state,
        State::Starting(Run { adopted: false, .. })
    ));
    let effects = ranks(&step(&mut alone, Input::Unadopted, &context(t0, 0), &s));
    assert_eq!(
        effects,
        vec![Effect::Publish],
        "the last socket stays: {effects:?}"
    );
    assert!(alone.socket_open);
}
