//! When a retired worker that served (a roll replaced it, a scale-down or a recycle chose it)
//! gets its stop signal, from what the supervisor reads of its slot (`groups::held`):
//!
//! - TCP: once the kernel has counted no open connection on the slot for [`SETTLE`], or the
//!   same number for [`STILL`] (idle keep-alive connections, streams: the signal is their cue
//!   to close);
//! - UDP: once what its sockets held at the flip has been read: their receive queues seen
//!   empty once (`sock_diag`), after every QUIC handshake it was given before the flip is done
//!   (no datagram of it for [`HANDSHAKE_QUIET`]: a handshake's datagrams reach its worker
//!   through `pending` even after the flip), and [`SETTLE`] after that read (the worker
//!   handles what it has just read before its signal comes);
//!
//! both, when the fleet has both. The lifecycle's linger (`--drain-timeout`) caps the wait. A
//! server that dies on its stop signal (Go's bare `ListenAndServe`, nginx on SIGTERM) then
//! fails no request it was given, and one that refuses new flows once told to stop (a QUIC
//! server after GOAWAY) refuses none that reached it before the flip.
//!
//! Also `--udp-linger`'s [`quiet`]: a stopping worker whose slot has received no datagram and
//! held no TCP connection for the linger is killed.
use std::time::{Duration, Instant};

/// No open connection for this long: none is on its way either (a handshake the program sent
/// the slot before it left completes within this on a LAN; later ones wait in the queue and
/// migrate when the socket closes). Also the time a worker gets to handle the datagrams it
/// read last before its signal.
pub const SETTLE: Duration = Duration::from_millis(10);
/// Connections that have not changed for this long stay open on their own (keep-alive pools).
pub const STILL: Duration = Duration::from_millis(100);
/// A QUIC handshake with no datagram for this long is done: its client has the server's
/// connection ID (routed by its cookie from then on) or has given up. A client's first
/// retransmission of an unanswered Initial comes after about 1 s (RFC 9002: three times the
/// initial RTT of 333 ms).
pub const HANDSHAKE_QUIET: Duration = Duration::from_secs(1);

/// What one reading of a leaving slot found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Its TCP connections.
    pub connections: Connections,
    /// Its UDP sockets (None: the fleet has no UDP group).
    pub udp: Option<UdpReading>,
}

/// A leaving slot's open TCP connections, as the kernel counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connections {
    /// The fleet has no TCP group.
    NoTcpGroup,
    /// The kernel does not count them here.
    NotCounted,
    /// This many are open.
    Open(u64),
}

/// What a leaving slot's UDP sockets hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpReading {
    /// Bytes waiting in their receive queues (None: not read: unreadable, or no longer
    /// needed, see [`wanted`]).
    pub queued: Option<u64>,
    /// The QUIC handshakes it was given before its flip, if they were read now (see
    /// [`wanted`]): when the last of them stops being in flight (its last datagram's time +
    /// [`HANDSHAKE_QUIET`]), None when none is.
    pub handshakes: Option<Option<Instant>>,
}

/// What the reader of a leaving slot must read at a tick ([`wanted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// Its UDP sockets' receive queues.
    pub queue: bool,
    /// The QUIC handshakes it was given before its flip.
    pub handshakes: bool,
}

/// What one worker's leave (or stop, for [`quiet`]) has seen so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The worker watched: a watch of an earlier worker of the slot starts over.
    worker: u64,
    /// The count last read (open connections while it leaves, datagrams while it stops) and
    /// since when it has been that count.
    count: Option<(u64, Instant)>,
    /// The handshakes it was given before its flip.
    handshakes: Handshakes,
    /// Whether handshakes were in flight at some reading.
    waited_handshakes: bool,
    /// The reading that found its UDP queues empty (or unreadable) with no handshake in
    /// flight.
    drained: Option<(Instant, bool)>,
}

/// Where a leave stands with the QUIC handshakes given before the flip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handshakes {
    /// Not read yet.
    Unread,
    /// In flight until then (read again then).
    Until(Instant),
    /// None in flight: done for good.
    Done,
}

impl Watch {
    fn new(worker: u64) -> Watch {
        Watch {
            worker,
            count: None,
            handshakes: Handshakes::Unread,
            waited_handshakes: false,
            drained: None,
        }
    }
}

/// `watch` for `worker`: a watch of another worker starts over.
fn of(watch: &mut Option<Watch>, worker: u64) -> &mut Watch {
    if watch.is_none_or(|w| w.worker != worker) {
        *watch = Some(Watch::new(worker));
    }
    watch.as_mut().expect("set above")
}

/// Since when `watch` has seen `count` (now, after a change).
fn unchanged_since(watch: &mut Watch, count: u64, now: Instant) -> Instant {
    match watch.count {
        Some((seen, since)) if seen == count => since,
        _ => {
            watch.count = Some((count, now));
            now
        }
    }
}

/// What the reader must read of `worker`'s leaving slot now, given `watch`: the UDP queues until
/// they were seen drained, the handshakes until none is in flight (again only once those read
/// in flight may be done).
pub fn wanted(watch: &Option<Watch>, worker: u64, now: Instant) -> Wanted {
    let watch = watch.filter(|w| w.worker == worker);
    let handshakes = match watch.map_or(Handshakes::Unread, |w| w.handshakes) {
        Handshakes::Unread => true,
        Handshakes::Until(until) => now >= until,
        Handshakes::Done => false,
    };
    Wanted {
        queue: watch.is_none_or(|w| w.drained.is_none()),
        handshakes,
    }
}

/// Whether worker `worker`'s leaving slot is done, given what was read now (`reading`) and what
/// its leave saw so far (`watch`, updated): the reason, once done.
pub fn done(
    watch: &mut Option<Watch>,
    worker: u64,
    reading: Reading,
    now: Instant,
) -> Option<String> {
    let watch = of(watch, worker);
    // Both sides are read at every tick, so each one's wait goes on while the other's does.
    let tcp = tcp_done(watch, reading.connections, now);
    let udp = match reading.udp {
        Some(udp) => udp_done(watch, udp, now).map(Some),
        None => Some(None),
    };
    let (Some(tcp), Some(udp)) = (tcp, udp) else {
        return None;
    };
    Some(match (tcp, udp) {
        (Some(tcp), Some(udp)) => format!("{tcp}; {udp}"),
        (Some(why), None) | (None, Some(why)) => why,
        (None, None) => "it holds nothing".into(),
    })
}

/// The TCP side: Some(reason) once done (Some(None): done, without TCP groups).
fn tcp_done(watch: &mut Watch, connections: Connections, now: Instant) -> Option<Option<String>> {
    let open = match connections {
        Connections::NoTcpGroup => return Some(None),
        Connections::NotCounted => {
            return Some(Some("its connections are not counted here".into()));
        }
        Connections::Open(open) => open,
    };
    let since = unchanged_since(watch, open, now);
    let still = now.saturating_duration_since(since);
    match open {
        0 if still >= SETTLE => Some(Some("its connections are done".into())),
        1.. if still >= STILL => Some(Some(format!(
            "{open} connection(s) stay open (keep-alive, streams): the stop signal is their cue \
             to close"
        ))),
        _ => None,
    }
}

/// The UDP side: the reason once what its sockets held at the flip has been read.
fn udp_done(watch: &mut Watch, udp: UdpReading, now: Instant) -> Option<String> {
    if let Some(until) = udp.handshakes {
        watch.handshakes = match until {
            Some(until) if until > now => {
                watch.waited_handshakes = true;
                Handshakes::Until(until)
            }
            _ => Handshakes::Done,
        };
    }
    let in_flight = match watch.handshakes {
        Handshakes::Unread => true,
        Handshakes::Until(until) => until > now,
        Handshakes::Done => false,
    };
    if watch.drained.is_none() && !in_flight {
        match udp.queued {
            Some(0) => watch.drained = Some((now, true)),
            None => watch.drained = Some((now, false)),
            Some(_) => {}
        }
    }
    let (at, read) = watch.drained?;
    if read && now.saturating_duration_since(at) < SETTLE {
        return None;
    }
    let mut why = match read {
        true => "what its UDP sockets held at the flip has been read".to_string(),
        false => "its UDP sockets' queues cannot be read here".to_string(),
    };
    if watch.waited_handshakes {
        why.push_str(&format!(
            ", after the QUIC handshakes it was given before the flip were done (no datagram \
             for {HANDSHAKE_QUIET:?})"
        ));
    }
    Some(why)
}

/// Whether worker `worker`'s stopping slot has gone quiet: no new datagram (`datagrams`, its
/// count over the slot's UDP groups) and no open TCP connection (`open`) for `linger`, given
/// what it did so far (`watch`, updated): the reason, once quiet.
pub fn quiet(
    watch: &mut Option<Watch>,
    worker: u64,
    datagrams: u64,
    open: u64,
    linger: Duration,
    now: Instant,
) -> Option<String> {
    let watch = of(watch, worker);
    if open > 0 {
        watch.count = None;
        return None;
    }
    let since = unchanged_since(watch, datagrams, now);
    (now.saturating_duration_since(since) >= linger)
        .then(|| format!("no datagram and no connection for --udp-linger {linger:?}"))
}

#[cfg(test)]
mod tests;
