//! Unit tests of the leave's decisions: TCP's counts, UDP's queues and QUIC handshakes, both
//! together, and `--udp-linger`'s quiet.
use super::*;

const W: u64 = 1;

/// A reading of a TCP-only fleet with `open` connections.
fn tcp(open: u64) -> Reading {
    Reading {
        connections: Connections::Open(open),
        udp: None,
    }
}

/// A reading of a UDP-only fleet: `queued` bytes, and the handshakes as read.
fn udp(queued: Option<u64>, handshakes: Option<Option<Instant>>) -> Reading {
    Reading {
        connections: Connections::NoTcpGroup,
        udp: Some(UdpReading { queued, handshakes }),
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn no_connection_for_the_settle_time_is_done() {
    let t0 = Instant::now();
    let mut watch = None;
    assert_eq!(
        done(&mut watch, W, tcp(0), t0),
        None,
        "one read is not enough"
    );
    assert_eq!(done(&mut watch, W, tcp(0), t0 + SETTLE / 2), None);
    assert_eq!(
        done(&mut watch, W, tcp(0), t0 + SETTLE).as_deref(),
        Some("its connections are done")
    );
    let uncounted = Reading {
        connections: Connections::NotCounted,
        udp: None,
    };
    assert!(
        done(&mut None, W, uncounted, t0).is_some(),
        "not counted: no wait"
    );
}

#[test]
fn changing_connections_are_waited_for_and_still_ones_are_not() {
    let t0 = Instant::now();
    let mut watch = None;
    assert_eq!(done(&mut watch, W, tcp(8), t0), None);
    // Changing: the clock starts again at each change.
    assert_eq!(done(&mut watch, W, tcp(5), t0 + STILL), None);
    assert_eq!(done(&mut watch, W, tcp(5), t0 + STILL + STILL / 2), None);
    assert_eq!(done(&mut watch, W, tcp(3), t0 + 2 * STILL), None);
    // Three stay open for STILL after the last change: keep-alive connections.
    let why = done(&mut watch, W, tcp(3), t0 + 3 * STILL).expect("done");
    assert!(why.starts_with("3 connection(s) stay open"), "{why}");
}

#[test]
fn a_connection_arriving_late_restarts_the_settle() {
    let t0 = Instant::now();
    let mut watch = None;
    assert_eq!(done(&mut watch, W, tcp(0), t0), None);
    // A handshake the program sent before the slot left completes.
    assert_eq!(done(&mut watch, W, tcp(1), t0 + SETTLE / 2), None);
    assert_eq!(done(&mut watch, W, tcp(0), t0 + SETTLE), None);
    assert!(done(&mut watch, W, tcp(0), t0 + 2 * SETTLE).is_some());
}

#[test]
fn a_watch_of_an_earlier_worker_starts_over() {
    let t0 = Instant::now();
    let mut watch = None;
    assert_eq!(done(&mut watch, 1, tcp(0), t0), None);
    assert_eq!(
        done(&mut watch, 2, tcp(0), t0 + SETTLE),
        None,
        "worker 2's first read"
    );
    assert!(done(&mut watch, 2, tcp(0), t0 + 2 * SETTLE).is_some());
    assert_eq!(wanted(&watch, 3, t0), wanted(&None, 3, t0));
}

#[test]
fn a_udp_slot_is_done_a_settle_after_its_queue_was_seen_empty_once() {
    let t0 = Instant::now();
    let mut watch = None;
    let none = Some(None);
    assert_eq!(
        wanted(&watch, W, t0),
        Wanted {
            queue: true,
            handshakes: true
        }
    );
    // Datagrams queued before the flip wait unread.
    assert_eq!(done(&mut watch, W, udp(Some(2048), none), t0), None);
    assert_eq!(done(&mut watch, W, udp(Some(1024), None), t0 + ms(5)), None);
    // Read: seen empty once. The worker gets SETTLE to handle what it read last.
    assert_eq!(done(&mut watch, W, udp(Some(0), None), t0 + ms(10)), None);
    assert_eq!(
        wanted(&watch, W, t0 + ms(15)),
        Wanted {
            queue: false,
            handshakes: false
        },
        "nothing more to read"
    );
    // Datagrams of its flows keep coming: once seen empty is enough.
    assert_eq!(done(&mut watch, W, udp(None, None), t0 + ms(15)), None);
    let why = done(&mut watch, W, udp(None, None), t0 + ms(10) + SETTLE).expect("done");
    assert_eq!(why, "what its UDP sockets held at the flip has been read");
}

#[test]
fn a_queue_read_while_a_handshake_given_before_the_flip_is_in_flight_does_not_count() {
    let t0 = Instant::now();
    let mut watch = None;
    let until = t0 + ms(300);
    // Empty now, but a handshake's next Initial may still come through `pending`.
    assert_eq!(
        done(&mut watch, W, udp(Some(0), Some(Some(until))), t0),
        None
    );
    assert!(
        !wanted(&watch, W, t0 + ms(100)).handshakes,
        "read again at its end"
    );
    assert_eq!(done(&mut watch, W, udp(Some(0), None), t0 + ms(100)), None);
    assert!(wanted(&watch, W, until).handshakes);
    // It came: in flight a while longer, and it queued a datagram.
    let later = until + ms(200);
    assert_eq!(
        done(&mut watch, W, udp(Some(1200), Some(Some(later))), until),
        None
    );
    // Done, but its datagram is still unread.
    assert_eq!(
        done(&mut watch, W, udp(Some(1200), Some(None)), later),
        None
    );
    assert!(!wanted(&watch, W, later).handshakes, "done for good");
    assert_eq!(done(&mut watch, W, udp(Some(0), None), later + ms(5)), None);
    let why = done(&mut watch, W, udp(None, None), later + ms(5) + SETTLE).expect("done");
    assert!(why.contains("QUIC handshakes"), "{why}");
    // A handshake read as ended already is done: no wait.
    let mut watch = None;
    assert_eq!(done(&mut watch, W, udp(Some(0), Some(Some(t0))), t0), None);
    assert!(done(&mut watch, W, udp(None, None), t0 + SETTLE).is_some());
}

#[test]
fn an_unreadable_queue_is_not_waited_for() {
    let t0 = Instant::now();
    let why = done(&mut None, W, udp(None, Some(None)), t0).expect("done at once");
    assert!(why.contains("cannot be read"), "{why}");
}

#[test]
fn a_fleet_with_both_waits_for_both() {
    let t0 = Instant::now();
    let mut watch = None;
    let both = |open: u64, queued: Option<u64>| Reading {
        connections: Connections::Open(open),
        udp: Some(UdpReading {
            queued,
            handshakes: Some(None),
        }),
    };
    assert_eq!(done(&mut watch, W, both(1, Some(0)), t0), None);
    // The UDP side is done at SETTLE, the TCP side only once its connection closed.
    assert_eq!(done(&mut watch, W, both(1, None), t0 + SETTLE), None);
    assert_eq!(done(&mut watch, W, both(0, None), t0 + ms(50)), None);
    let why = done(&mut watch, W, both(0, None), t0 + ms(50) + SETTLE).expect("done");
    assert_eq!(
        why,
        "its connections are done; what its UDP sockets held at the flip has been read"
    );
    // The TCP side done first, the UDP side still unread.
    let mut watch = None;
    assert_eq!(done(&mut watch, W, both(0, Some(9)), t0), None);
    assert_eq!(done(&mut watch, W, both(0, Some(9)), t0 + ms(50)), None);
}

#[test]
fn a_stopping_slot_is_quiet_once_no_datagram_and_no_connection_came_for_the_linger() {
    let t0 = Instant::now();
    let linger = Duration::from_secs(3);
    let mut watch = None;
    let at = |s: u64| t0 + Duration::from_secs(s);
    assert_eq!(quiet(&mut watch, 1, 100, 0, linger, at(0)), None);
    // Datagrams still arrive: the clock starts again.
    assert_eq!(quiet(&mut watch, 1, 140, 0, linger, at(2)), None);
    assert_eq!(quiet(&mut watch, 1, 140, 0, linger, at(4)), None);
    // A TCP connection still open holds the worker whatever the datagrams do.
    assert_eq!(quiet(&mut watch, 1, 140, 1, linger, at(9)), None);
    assert_eq!(quiet(&mut watch, 1, 140, 0, linger, at(10)), None);
    assert_eq!(quiet(&mut watch, 1, 140, 0, linger, at(12)), None);
    let why = quiet(&mut watch, 1, 140, 0, linger, at(13)).expect("quiet for 3 s");
    assert!(why.contains("--udp-linger"), "{why}");
    // Another worker of the slot starts its own watch.
    assert_eq!(quiet(&mut watch, 2, 140, 0, linger, at(20)), None);
}
