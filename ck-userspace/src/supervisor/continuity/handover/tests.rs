//! Tests of `handover`.
use std::time::Duration;

use super::*;
use crate::supervisor::lifecycle::{After, Run, State};
use crate::supervisor::slots::boot_mistake::BootMistake;

#[test]
fn a_slot_and_its_timers_come_back_as_they_were() {
    let started = Instant::now() - Duration::from_secs(5);
    let run = Run {
        id: 7,
        started,
        ready_at: Some(started + Duration::from_secs(1)),
        adopted: true,
    };
    let mut life = Life::new(
        crate::settings::restart_policy::RestartPolicy::DEFAULT,
        false,
    );
    life.state = State::Stopping(run, After::Retire);
    life.socket_open = true;
    life.drained = true;
    life.generation = 3;
    life.restarts = 2;
    let slot = SlotHandover {
        index: 4,
        life: life.clone(),
        sockets: vec![12],
        spare: false,
        last_pid: 99,
        last_exit: Some("exit 3".into()),
        boot_mistake: Some(BootMistake::Daemonized {
            pid: 99,
            ran_ms: 40,
            exit: "exit 0".into(),
            left: vec![(100, "python3".into())],
        }),
        probe_failures: 5,
        worker: None,
        member_of: Some(1),
        adopted: vec![AdoptedSocket {
            pid: 42,
            start_ticks: Some(7),
            fd: 5,
            cookie: 9,
        }],
        output_dropped: 0,
    };
    let timer = TimerHandover {
        slot: 4,
        epoch: 7,
        timer: Timer::Kill,
        left_us: 1_500,
    };
    let text = serde_json::to_string(&(slot, timer)).unwrap();
    let (slot, timer): (SlotHandover, TimerHandover) = serde_json::from_str(&text).unwrap();
    let State::Stopping(back, After::Retire) = slot.life.state else {
        panic!("{:?}", slot.life.state);
    };
    assert_eq!(back.id, 7);
    assert!(back.adopted);
    let drift = back.started.max(started) - back.started.min(started);
    assert!(drift < Duration::from_millis(5), "{drift:?}");
    assert_eq!(
        (
            slot.life.drained,
            slot.life.socket_open,
            slot.life.generation,
            slot.life.restarts
        ),
        (true, true, 3, 2)
    );
    assert_eq!(slot.life.crash.breaker(), life.crash.breaker());
    assert_eq!((slot.sockets, slot.probe_failures), (vec![12], 5));
    assert_eq!(slot.member_of, Some(1));
    assert!(
        matches!(&slot.boot_mistake, Some(BootMistake::Daemonized { left, .. }) if left[0].0 == 100),
        "{:?}",
        slot.boot_mistake
    );
    assert_eq!((slot.adopted[0].pid, slot.adopted[0].fd), (42, 5));
    assert_eq!(
        (timer.timer, timer.epoch, timer.left_us),
        (Timer::Kill, 7, 1_500)
    );
}

/// A slot record without `--adopt`'s fields (as a socket-activation fleet's, or one written
/// before them) reads as a root slot with nothing adopted.
#[test]
fn a_slot_without_adopt_fields_reads_as_a_plain_root() {
    let life = Life::new(
        crate::settings::restart_policy::RestartPolicy::DEFAULT,
        false,
    );
    let mut value = serde_json::to_value(SlotHandover {
        index: 0,
        life,
        sockets: vec![3],
        spare: false,
        last_pid: 0,
        last_exit: None,
        boot_mistake: None,
        probe_failures: 0,
        worker: None,
        member_of: Some(2),
        adopted: Vec::new(),
        output_dropped: 0,
    })
    .unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("member_of");
    object.remove("adopted");
    object.remove("boot_mistake");
    let back: SlotHandover = serde_json::from_value(value).unwrap();
    assert_eq!((back.member_of, back.adopted.len()), (None, 0));
    assert_eq!(back.boot_mistake, None);
}

/// A member's root and a spare travel beside the life on the wire (`member: true` only in
/// the life itself, as every ck wrote it): a restored slot has both back in its life.
#[test]
fn a_restored_slot_has_its_spare_mark_and_its_members_root_in_its_life() {
    let policy = crate::settings::restart_policy::RestartPolicy::DEFAULT;
    let saved = |life: Life, spare, member_of| SlotHandover {
        index: 4,
        life,
        sockets: Vec::new(),
        spare,
        last_pid: 77,
        last_exit: Some("exit 1".into()),
        boot_mistake: None,
        probe_failures: 3,
        worker: None,
        member_of,
        adopted: Vec::new(),
        output_dropped: 9,
    };
    let member = saved(Life::member(policy, 1), false, Some(1));
    let value = serde_json::to_value(&member).unwrap();
    assert_eq!(value["life"]["member"], serde_json::json!(true));
    let back: SlotHandover = serde_json::from_value(value).unwrap();
    let slot = crate::supervisor::slots::slot::Slot::restore(&back, Vec::new());
    assert_eq!(slot.life.member_of, Some(1));
    assert_eq!((slot.index, slot.last_pid, slot.probe_failures), (4, 77, 3));
    assert_eq!(slot.last_exit.as_deref(), Some("exit 1"));
    // A handover from a ck that kept the spare mark beside the life only.
    let spare = saved(Life::new(policy, true), true, None);
    let back: SlotHandover = serde_json::from_value(serde_json::to_value(&spare).unwrap()).unwrap();
    let slot = crate::supervisor::slots::slot::Slot::restore(&back, Vec::new());
    assert!(slot.life.spare && slot.life.standby && slot.life.member_of.is_none());
}

#[test]
fn a_binary_with_another_format_or_map_layout_is_refused() {
    let this = Compat::this();
    assert_eq!(this.refuses(&this.clone()), None);
    let newer = Compat {
        ck: "9.9.9".into(),
        ..this.clone()
    };
    assert_eq!(
        this.refuses(&newer),
        None,
        "the version alone does not matter"
    );
    let format = Compat {
        format: FORMAT + 1,
        ..this.clone()
    };
    assert!(this.refuses(&format).unwrap().contains("handover format"));
    let maps = Compat {
        maps: "slots=64".into(),
        ..this.clone()
    };
    assert!(this.refuses(&maps).unwrap().contains("map layout"));
}

/// An image from before least-queue read exact depths (its `config` had no queue offsets:
/// 16 bytes), before it read the oldest connection's wait (28 bytes), or before UDP groups'
/// mode (40 bytes), is refused: the program would read fields that are not there.
#[test]
fn an_image_without_the_queue_offsets_is_refused() {
    let this = Compat::this();
    assert!(this.maps.contains(" config=44B "), "{}", this.maps);
    for older in [" config=16B ", " config=28B ", " config=40B "] {
        let before = Compat {
            maps: this.maps.replace(" config=44B ", older),
            ..this.clone()
        };
        assert!(this.refuses(&before).unwrap().contains("map layout"));
    }
}
