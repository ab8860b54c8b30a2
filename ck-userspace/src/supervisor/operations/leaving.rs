//! Retired workers that served (a roll replaced them, a scale-down or a recycle chose them)
//! leave once their connections are done: out of the active set at once, socket open, and the
//! stop signal only when the kernel has counted no open connection on the slot for [`SETTLE`],
//! or when those left have stayed as many for [`STILL`] (idle keep-alive connections, streams: the signal is
//! their cue to close), or at the lifecycle's linger (`--drain-timeout`). A server that dies on
//! its stop signal without a graceful shutdown (Go's bare `ListenAndServe`, nginx on SIGTERM)
//! then fails no request it was given; one that closes its keep-alive connections on the signal
//! loses nothing either way.
//!
//! UDP has no connections to count: a stopping worker of a fleet with UDP groups keeps its
//! socket, and so the datagrams of its flows, until it exits, or until its slot has received no
//! datagram (the program's per-slot counters) and held no TCP connection for `--udp-linger`,
//! when it is killed ([`quiet`]); `--drain-timeout` still bounds the whole stop.
//!
//! Counts are read on the sampler's ticks, every [`CHECK_EVERY`] while a slot leaves (every
//! [`LINGER_CHECK_EVERY`] while a UDP slot stops). Where the kernel does not count a slot's
//! connections, it leaves at the next tick.
use std::time::{Duration, Instant};

use crate::supervisor::{groups::Groups, lifecycle::Input, lifecycle::State, slots::SlotTable};

/// How often a leaving slot's connections are counted.
pub(in crate::supervisor) const CHECK_EVERY: Duration = Duration::from_millis(5);
/// How often a stopping UDP slot's datagrams are counted: a linger is seconds long.
pub(in crate::supervisor) const LINGER_CHECK_EVERY: Duration = Duration::from_millis(100);
/// No open connection for this long: none is on its way either (a handshake the program sent
/// the slot before it left completes within this on a LAN; later ones wait in the queue and
/// migrate when the socket closes).
pub(in crate::supervisor) const SETTLE: Duration = Duration::from_millis(10);
/// Connections that have not changed for this long stay open on their own (keep-alive pools).
pub(in crate::supervisor) const STILL: Duration = Duration::from_millis(100);

/// What one slot's count (its open connections while it leaves; its datagrams while it
/// stops) did so far, for one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct Watch {
    /// The worker watched: a watch of an earlier worker of the slot starts over.
    worker: u64,
    /// The count last read.
    count: u64,
    /// Since when it has been that count.
    since: Instant,
}

/// Since when `watch` has seen `count` for `worker` (now, after a change: `watch` is reset).
fn unchanged_since(watch: &mut Option<Watch>, worker: u64, count: u64, now: Instant) -> Instant {
    match watch {
        Some(w) if w.worker == worker && w.count == count => w.since,
        _ => {
            *watch = Some(Watch {
                worker,
                count,
                since: now,
            });
            now
        }
    }
}

/// Whether worker `worker`'s leaving slot is done, given its open connections now (None: not
/// counted) and what they did so far (`watch`, updated): the reason, once done.
pub(in crate::supervisor) fn done(
    watch: &mut Option<Watch>,
    worker: u64,
    open: Option<u64>,
    now: Instant,
) -> Option<String> {
    let Some(open) = open else {
        return Some("its connections are not counted here".into());
    };
    let since = unchanged_since(watch, worker, open, now);
    let still = now.saturating_duration_since(since);
    match open {
        0 if still >= SETTLE => Some("its connections are done".into()),
        1.. if still >= STILL => Some(format!(
            "{open} connection(s) stay open (keep-alive, streams): the stop signal is their cue \
             to close"
        )),
        _ => None,
    }
}

/// Whether worker `worker`'s stopping slot has gone quiet: no new datagram (`datagrams`, its
/// count over the slot's UDP groups) and no open TCP connection (`open`) for `linger`, given
/// what it did so far (`watch`, updated): the reason, once quiet.
pub(in crate::supervisor) fn quiet(
    watch: &mut Option<Watch>,
    worker: u64,
    datagrams: u64,
    open: u64,
    linger: Duration,
    now: Instant,
) -> Option<String> {
    if open > 0 {
        *watch = None;
        return None;
    }
    let since = unchanged_since(watch, worker, datagrams, now);
    (now.saturating_duration_since(since) >= linger)
        .then(|| format!("no datagram and no connection for --udp-linger {linger:?}"))
}

/// Counts every leaving slot's connections: the inputs that let go of those that are done.
pub(in crate::supervisor) fn leavers_done(
    table: &mut SlotTable,
    groups: &Groups,
    now: Instant,
) -> Vec<(u32, Input)> {
    let leaving: Vec<(u32, u64)> = table
        .slots
        .values()
        .filter_map(|s| match s.life.state {
            State::Leaving(run) => Some((s.index, run.id)),
            _ => None,
        })
        .collect();
    let mut finished = Vec::new();
    for (index, worker) in leaving {
        let open = groups.kernel_connections_of(index);
        let Some(slot) = table.slots.get_mut(&index) else {
            continue;
        };
        if let Some(why) = done(&mut slot.leave_watch, worker, open, now) {
            slot.leave_watch = None;
            finished.push((index, Input::Finished(why)));
        }
    }
    finished
}

/// `--udp-linger`: counts every stopping slot's datagrams and kills the workers of those
/// gone quiet (the inputs that do). Nothing to do without UDP groups or with the linger off.
pub(in crate::supervisor) fn lingerers_quiet(
    table: &mut SlotTable,
    groups: &Groups,
    linger: Duration,
    now: Instant,
) -> Vec<(u32, Input)> {
    if linger.is_zero() {
        return Vec::new();
    }
    let stopping: Vec<(u32, u64)> = table
        .slots
        .values()
        .filter_map(|s| match s.life.state {
            State::Stopping(run, _) => Some((s.index, run.id)),
            _ => None,
        })
        .collect();
    let mut quiet_ones = Vec::new();
    for (index, worker) in stopping {
        let Some(datagrams) = groups.datagrams_of(index) else {
            continue;
        };
        let open = groups.kernel_connections_of(index).unwrap_or(0);
        let Some(slot) = table.slots.get_mut(&index) else {
            continue;
        };
        if let Some(why) = quiet(&mut slot.leave_watch, worker, datagrams, open, linger, now) {
            slot.leave_watch = None;
            quiet_ones.push((index, Input::Quiet(why)));
        }
    }
    quiet_ones
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_connection_for_the_settle_time_is_done() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(
            done(&mut watch, 1, Some(0), t0),
            None,
            "one read is not enough"
        );
        assert_eq!(done(&mut watch, 1, Some(0), t0 + SETTLE / 2), None);
        assert_eq!(
            done(&mut watch, 1, Some(0), t0 + SETTLE).as_deref(),
            Some("its connections are done")
        );
        assert!(
            done(&mut None, 1, None, t0).is_some(),
            "not counted: no wait"
        );
    }

    #[test]
    fn changing_connections_are_waited_for_and_still_ones_are_not() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(done(&mut watch, 1, Some(8), t0), None);
        // Changing: the clock starts again at each change.
        assert_eq!(done(&mut watch, 1, Some(5), t0 + STILL), None);
        assert_eq!(done(&mut watch, 1, Some(5), t0 + STILL + STILL / 2), None);
        assert_eq!(done(&mut watch, 1, Some(3), t0 + 2 * STILL), None);
        // Three stay open for STILL after the last change: keep-alive connections.
        let why = done(&mut watch, 1, Some(3), t0 + 3 * STILL).expect("done");
        assert!(why.starts_with("3 connection(s) stay open"), "{why}");
    }

    #[test]
    fn a_connection_arriving_late_restarts_the_settle() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(done(&mut watch, 1, Some(0), t0), None);
        // A handshake the program sent before the slot left completes.
        assert_eq!(done(&mut watch, 1, Some(1), t0 + SETTLE / 2), None);
        assert_eq!(done(&mut watch, 1, Some(0), t0 + SETTLE), None);
        assert!(done(&mut watch, 1, Some(0), t0 + 2 * SETTLE).is_some());
    }

    #[test]
    fn a_watch_of_an_earlier_worker_starts_over() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(done(&mut watch, 1, Some(0), t0), None);
        assert_eq!(
            done(&mut watch, 2, Some(0), t0 + SETTLE),
            None,
            "worker 2's first read"
        );
        assert!(done(&mut watch, 2, Some(0), t0 + 2 * SETTLE).is_some());
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
}
