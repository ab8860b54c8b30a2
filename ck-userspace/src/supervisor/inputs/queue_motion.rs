//! Whether a worker's accept queue moved between two samples: what stall detection asks.
//!
//! Depths alone cannot tell. A worker that keeps up under load often holds a connection or two
//! at the moment of a sample, so two samples can read the same depth (1, then 1) while dozens
//! passed through: with depths only, such a worker was marked stalled (`bench stall`, 100 ms
//! stall timeout, 2,000 new connections/s: the healthy slots were taken out of the active set
//! again and again). The select program counts every connection it sends to a slot
//! (`selected`, and `probe_hits` for probes), so the supervisor knows the arrivals between two
//! samples too, and so how many connections left the queue:
//! `accepted = arrivals - (depth - previous)`.
//!
//! Arrivals are counted at the SYN, the depth once the handshake is done: connections still in
//! their handshake at one sample and not at the other make `accepted` off by that difference.
//! On loopback or a LAN that is 0 or 1; with long round trips at high rates it is more. So a
//! queue moved when more connections left it than a quarter of the arrivals (rounded down): at
//! least one (a stalled worker's error stays near its handshakes in flight; a worker that keeps
//! up accepts about all of its arrivals).
//!
//! Without the program's counters (`--no-bpf`), a queue moved only when it shrank.
//!
//! A queue that did not move has been still since the last sample, unless it was empty then
//! ([`still_since`]).
use std::time::Instant;

/// Whether the queue of one slot moved between the sample that read `previous` and the one
/// that read `depth`, with `arrivals` the connections the program sent it meanwhile (None:
/// not counted).
pub(in crate::supervisor) fn moved(previous: u32, depth: u32, arrivals: Option<u64>) -> bool {
    let Some(arrivals) = arrivals else {
        return depth < previous;
    };
    let accepted = i128::from(arrivals) + i128::from(previous) - i128::from(depth);
    // At least 1, and more than a quarter of the arrivals.
    accepted > i128::from(arrivals / 4)
}

/// Since when a queue that did not move has been still, read at `now` with `previous` the depth
/// of the sample taken at `last`: since that sample, unless the queue was empty then (after a
/// quiet second, the last sample is that long ago), in which case since now.
pub(in crate::supervisor) fn still_since(previous: u32, last: Instant, now: Instant) -> Instant {
    if previous == 0 { now } else { last }
}

#[cfg(test)]
mod tests {
    use super::{moved, still_since};

    #[test]
    fn a_queue_empty_at_the_last_sample_is_still_only_from_now() {
        let last = std::time::Instant::now();
        let now = last + std::time::Duration::from_secs(1);
        assert_eq!(still_since(0, last, now), now);
        assert_eq!(still_since(3, last, now), last);
    }

    #[test]
    fn without_counters_only_a_shrinking_queue_moved() {
        assert!(moved(3, 2, None));
        assert!(!moved(2, 2, None));
        assert!(!moved(2, 5, None));
    }

    #[test]
    fn a_queue_that_holds_one_while_dozens_pass_moved() {
        // 1 then 1, 25 sent meanwhile: 25 left.
        assert!(moved(1, 1, Some(25)));
        // Growing, but most of what arrived left.
        assert!(moved(1, 4, Some(25)));
    }

    #[test]
    fn a_stalled_queue_did_not_move() {
        // Everything that arrived is still there.
        assert!(!moved(3, 28, Some(25)));
        // Two handshakes in flight at the first sample finished by the second: 2 of 25 seem
        // to have left, under a quarter.
        assert!(!moved(3, 26, Some(25)));
        // Nothing arrived, nothing left.
        assert!(!moved(2, 2, Some(0)));
    }

    #[test]
    fn with_nothing_arriving_a_shrinking_queue_moved() {
        assert!(moved(2, 1, Some(0)));
        assert!(!moved(0, 0, Some(0)));
    }
}
