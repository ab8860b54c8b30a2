//! Retired workers that served (a roll replaced them, a scale-down or a recycle chose them)
//! leave once their connections are done: out of the active set at once, socket open, and the
//! stop signal only when the kernel has counted no open connection on the slot for [`SETTLE`],
//! or when those left have stayed as many for [`STILL`] (idle keep-alive connections, streams: the signal is
//! their cue to close), or at the lifecycle's linger (`--drain-timeout`). A server that dies on
//! its stop signal without a graceful shutdown (Go's bare `ListenAndServe`, nginx on SIGTERM)
//! then fails no request it was given; one that closes its keep-alive connections on the signal
//! loses nothing either way.
//!
//! Counts are read on the sampler's ticks, every [`CHECK_EVERY`] while a slot leaves. Where the
//! kernel does not count a slot's connections, it leaves at the next tick.
use std::time::{Duration, Instant};

use crate::supervisor::{Supervisor, lifecycle::Input, lifecycle::State};

/// How often a leaving slot's connections are counted.
pub(in crate::supervisor) const CHECK_EVERY: Duration = Duration::from_millis(5);
/// No open connection for this long: none is on its way either (a handshake the program sent
/// the slot before it left completes within this on a LAN; later ones wait in the queue and
/// migrate when the socket closes).
pub(in crate::supervisor) const SETTLE: Duration = Duration::from_millis(10);
/// Connections that have not changed for this long stay open on their own (keep-alive pools).
pub(in crate::supervisor) const STILL: Duration = Duration::from_millis(100);

/// What one leaving slot's counts did so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct Watch {
    /// The open connections last read.
    open: u64,
    /// Since when they have been that many.
    since: Instant,
}

/// Whether a leaving slot is done, given its open connections now (None: not counted) and what
/// they did so far (`watch`, updated): the reason, once done.
pub(in crate::supervisor) fn done(
    watch: &mut Option<Watch>,
    open: Option<u64>,
    now: Instant,
) -> Option<String> {
    let Some(open) = open else {
        return Some("its connections are not counted here".into());
    };
    let since = match watch {
        Some(w) if w.open == open => w.since,
        _ => {
            *watch = Some(Watch { open, since: now });
            now
        }
    };
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

impl Supervisor {
    /// Counts every leaving slot's connections and lets go of those that are done.
    pub(in crate::supervisor) fn check_leavers(&mut self, now: Instant) {
        let leaving: Vec<u32> = self
            .table
            .slots
            .values()
            .filter(|s| matches!(s.life.state, State::Leaving(_)))
            .map(|s| s.index)
            .collect();
        let mut finished = Vec::new();
        for index in leaving {
            let open = self.groups.kernel_connections_of(index);
            let Some(slot) = self.table.slots.get_mut(&index) else {
                continue;
            };
            if let Some(why) = done(&mut slot.leave_watch, open, now) {
                slot.leave_watch = None;
                finished.push((index, Input::Finished(why)));
            }
        }
        if !finished.is_empty() {
            self.apply_all(finished);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_connection_for_the_settle_time_is_done() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(
            done(&mut watch, Some(0), t0),
            None,
            "one read is not enough"
        );
        assert_eq!(done(&mut watch, Some(0), t0 + SETTLE / 2), None);
        assert_eq!(
            done(&mut watch, Some(0), t0 + SETTLE).as_deref(),
            Some("its connections are done")
        );
        assert!(done(&mut None, None, t0).is_some(), "not counted: no wait");
    }

    #[test]
    fn changing_connections_are_waited_for_and_still_ones_are_not() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(done(&mut watch, Some(8), t0), None);
        // Changing: the clock starts again at each change.
        assert_eq!(done(&mut watch, Some(5), t0 + STILL), None);
        assert_eq!(done(&mut watch, Some(5), t0 + STILL + STILL / 2), None);
        assert_eq!(done(&mut watch, Some(3), t0 + 2 * STILL), None);
        // Three stay open for STILL after the last change: keep-alive connections.
        let why = done(&mut watch, Some(3), t0 + 3 * STILL).expect("done");
        assert!(why.starts_with("3 connection(s) stay open"), "{why}");
    }

    #[test]
    fn a_connection_arriving_late_restarts_the_settle() {
        let t0 = Instant::now();
        let mut watch = None;
        assert_eq!(done(&mut watch, Some(0), t0), None);
        // A handshake the program sent before the slot left completes.
        assert_eq!(done(&mut watch, Some(1), t0 + SETTLE / 2), None);
        assert_eq!(done(&mut watch, Some(0), t0 + SETTLE), None);
        assert!(done(&mut watch, Some(0), t0 + 2 * SETTLE).is_some());
    }
}
