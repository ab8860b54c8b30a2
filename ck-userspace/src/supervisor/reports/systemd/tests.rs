//! Tests of `systemd`.
use super::*;

fn fleet(ready: u32, workers: u32) -> FleetView {
    FleetView {
        workers,
        ready,
        every_group_ready: ready > 0,
        steering: Steering::On,
        ..FleetView::default()
    }
}

#[test]
fn status_text_names_workers_steering_breakers_reload_and_shutdown() {
    assert_eq!(status_text(&fleet(4, 4)), "4/4 workers ready, steering on");
    let degraded = FleetView {
        breakers: vec![(2, "open"), (3, "half-open")],
        ..fleet(2, 4)
    };
    assert_eq!(
        status_text(&degraded),
        "DEGRADED: slot 2 breaker open, slot 3 breaker half-open; 2/4 workers ready, \
         steering on"
    );
    let reloading = FleetView {
        reloading: Some((2, 4)),
        ..fleet(4, 4)
    };
    assert_eq!(
        status_text(&reloading),
        "reloading 2/4; 4/4 workers ready, steering on"
    );
    let starting = FleetView {
        steering: Steering::Unverified,
        ..fleet(0, 2)
    };
    assert_eq!(
        status_text(&starting),
        "0/2 workers ready, steering not verified yet"
    );
    let plain = FleetView {
        steering: Steering::Off,
        ..fleet(1, 1)
    };
    assert_eq!(
        status_text(&plain),
        "1/1 workers ready, steering off (--no-bpf)"
    );
    let lost = FleetView {
        steering: Steering::Lost,
        ..fleet(1, 1)
    };
    assert!(status_text(&lost).contains("steering LOST"));
    let stopping = FleetView {
        stopping: Some(3),
        ..fleet(4, 4)
    };
    assert_eq!(status_text(&stopping), "stopping: 3 worker(s) stopping");
}

/// The kinds of message (`Status` text left out) for each view in turn.
fn told_for(views: &[FleetView]) -> Vec<Vec<Message>> {
    let mut told = Told::default();
    views
        .iter()
        .map(|view| {
            messages(&mut told, view)
                .into_iter()
                .map(|m| match m {
                    Message::Status(_) => Message::Status(String::new()),
                    other => other,
                })
                .collect()
        })
        .collect()
}

#[test]
fn ready_only_once_every_group_has_a_ready_worker() {
    let mut half = fleet(1, 2);
    half.every_group_ready = false;
    let status = Message::Status(String::new());
    assert_eq!(
        told_for(&[fleet(0, 2), half, fleet(1, 2), fleet(2, 2), fleet(2, 2)]),
        vec![
            vec![status.clone()],
            // One group of two has a ready worker: the count says 1/2, no READY yet.
            vec![status.clone()],
            // Both have one now: READY, same text.
            vec![Message::Ready { first: true }],
            vec![status.clone()],
            vec![],
        ]
    );
    // A fleet that loses every ready worker stays READY for systemd; its STATUS says so.
    let mut told = Told::default();
    messages(&mut told, &fleet(2, 2));
    assert_eq!(
        messages(&mut told, &fleet(0, 2)),
        vec![Message::Status("0/2 workers ready, steering on".into())]
    );
}

#[test]
fn a_reload_is_reloading_then_ready_and_stopping_is_told_once() {
    let reloading = |done| FleetView {
        reloading: Some((done, 2)),
        ..fleet(2, 2)
    };
    let stopping = FleetView {
        stopping: Some(2),
        ..fleet(2, 2)
    };
    let status = Message::Status(String::new());
    assert_eq!(
        told_for(&[
            fleet(2, 2),
            reloading(0),
            reloading(1),
            fleet(2, 2),
            stopping.clone(),
            FleetView {
                stopping: Some(1),
                ..stopping
            },
        ]),
        vec![
            vec![Message::Ready { first: true }, status.clone()],
            vec![Message::Reloading, status.clone()],
            vec![status.clone()],
            vec![Message::Ready { first: false }, status.clone()],
            vec![Message::Stopping, status.clone()],
            vec![status],
        ]
    );
}

#[test]
fn the_quiet_wait_is_stopping_once_with_its_own_status() {
    let waiting = FleetView {
        quiet_wait: true,
        ..fleet(2, 2)
    };
    let draining = FleetView {
        stopping: Some(2),
        ..fleet(2, 2)
    };
    let told = told_for(&[fleet(2, 2), waiting.clone(), waiting.clone(), draining]);
    let status = Message::Status(String::new());
    assert_eq!(
        told,
        vec![
            vec![Message::Ready { first: true }, status.clone()],
            vec![Message::Stopping, status.clone()],
            vec![],
            vec![status],
        ]
    );
    assert_eq!(
        status_text(&waiting),
        "stopping: waiting for traffic to stop before stopping the workers (2/2 serving)"
    );
}

#[test]
fn a_reload_before_ready_is_not_told_and_stopping_before_ready_is() {
    let reloading = FleetView {
        reloading: Some((0, 2)),
        ..fleet(0, 2)
    };
    let stopping = FleetView {
        stopping: Some(2),
        ..fleet(0, 2)
    };
    let kinds = told_for(&[reloading, stopping]);
    assert!(!kinds[0].contains(&Message::Reloading), "{kinds:?}");
    assert!(kinds[1].contains(&Message::Stopping), "{kinds:?}");
}

#[test]
fn notify_socket_values() {
    assert!(notify_address("/run/systemd/notify").is_ok());
    let abstract_addr = notify_address("@ck/test").unwrap();
    assert_eq!(abstract_addr.as_abstract_name(), Some(&b"ck/test"[..]));
    let err = notify_address("vsock:2:1234").unwrap_err();
    assert!(err.contains("AF_UNIX"), "{err}");
}
