//! The property test's model of the slots' UDP sockets: the datagrams waiting in each, the QUIC
//! handshakes the program gave each slot, and what a leaving slot was given before its flip.
//! A leaving slot is read by the leave's own decision (`fleet::leave`), as the supervisor
//! reads it; the invariant: a leaving worker gets its stop signal only once what it was given
//! before its flip has been read and no handshake of then is in flight, unless its
//! `--drain-timeout` ran out or ck is shutting down.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::{Model, Op};
use crate::supervisor::fleet::leave::{
    self, Connections, HANDSHAKE_QUIET, Reading, UdpReading, Watch,
};

/// Bytes of one datagram.
const DATAGRAM: u64 = 1200;

/// The slots' UDP sockets.
#[derive(Default)]
pub(super) struct Udp {
    /// Datagrams waiting in each slot's socket.
    queued: BTreeMap<u32, u64>,
    /// Each slot's handshakes: when each one's last datagram came.
    handshakes: BTreeMap<u32, Vec<Instant>>,
    /// Leaving slots: what they were given before their flip.
    owed: BTreeMap<u32, Owed>,
    /// Leaving slots whose `--drain-timeout` ran out.
    capped: BTreeSet<u32>,
    /// Each leaving slot's watch, as the supervisor keeps it.
    watches: BTreeMap<u32, Option<Watch>>,
}

/// What a leaving slot was given before its flip.
struct Owed {
    /// Datagrams of then, or of a handshake of then, not read yet.
    unread: bool,
    /// Its first `handshakes` handshakes are of then.
    handshakes: usize,
}

impl Udp {
    /// A datagram reaches slot `index`; `handshake`: the first of a new handshake.
    pub fn datagram(&mut self, index: u32, handshake: Option<Instant>) {
        *self.queued.entry(index).or_default() += 1;
        if let Some(now) = handshake {
            self.handshakes.entry(index).or_default().push(now);
        }
    }

    /// The n-th handshake still in flight at `now` sends again (through `pending`, to its slot).
    pub fn handshake_again(&mut self, n: usize, now: Instant) {
        let in_flight: Vec<(u32, usize)> = self
            .handshakes
            .iter()
            .flat_map(|(slot, seen)| {
                let live = seen.iter().enumerate();
                live.filter(|(_, at)| now - **at < HANDSHAKE_QUIET)
                    .map(|(i, _)| (*slot, i))
                    .collect::<Vec<_>>()
            })
            .collect();
        let Some(&(slot, i)) = in_flight.get(n % in_flight.len().max(1)) else {
            return;
        };
        self.handshakes.get_mut(&slot).expect("listed")[i] = now;
        *self.queued.entry(slot).or_default() += 1;
        if let Some(owed) = self.owed.get_mut(&slot)
            && i < owed.handshakes
        {
            owed.unread = true;
        }
    }

    /// Slot `index`'s worker reads every datagram waiting.
    pub fn read(&mut self, index: u32) {
        self.queued.remove(&index);
        if let Some(owed) = self.owed.get_mut(&index) {
            owed.unread = false;
        }
    }

    /// Slot `index` was just published out of the ready list as a leaving slot (its flip).
    pub fn flipped_out(&mut self, index: u32) {
        if self.owed.contains_key(&index) {
            return;
        }
        let owed = Owed {
            unread: self.queued.get(&index).is_some_and(|n| *n > 0),
            handshakes: self.handshakes.get(&index).map_or(0, Vec::len),
        };
        self.owed.insert(index, owed);
    }

    /// Slot `index`'s `--drain-timeout` ran out while it was leaving.
    pub fn capped(&mut self, index: u32) {
        self.capped.insert(index);
    }

    /// Reads leaving slot `index` (worker `worker`) as the supervisor does, at `now`: whether
    /// it is done.
    pub fn leave_done(&mut self, index: u32, worker: u64, now: Instant) -> Option<String> {
        let watch = self.watches.entry(index).or_default();
        let wanted = leave::wanted(watch, worker, now);
        let owed_handshakes = self.owed.get(&index).map_or(0, |o| o.handshakes);
        let until = self.handshakes.get(&index).and_then(|seen| {
            seen[..owed_handshakes.min(seen.len())]
                .iter()
                .map(|at| *at + HANDSHAKE_QUIET)
                .max()
                .filter(|until| *until > now)
        });
        let queued = self.queued.get(&index).copied().unwrap_or(0) * DATAGRAM;
        let reading = Reading {
            connections: Connections::Open(0),
            udp: Some(UdpReading {
                queued: wanted.queue.then_some(queued),
                handshakes: wanted.handshakes.then_some(until),
            }),
        };
        let done = leave::done(watch, worker, reading, now);
        if done.is_some() {
            self.watches.remove(&index);
        }
        done
    }

    /// Slot `index`'s worker gets its stop signal at `now`: a leaving one only once what it was
    /// given before its flip is read and done.
    pub fn signalled(&mut self, index: u32, now: Instant, stopping: bool) {
        let Some(owed) = self.owed.remove(&index) else {
            return;
        };
        if stopping || self.capped.remove(&index) {
            return;
        }
        assert!(
            !owed.unread,
            "slot {index} signalled with datagrams of before its flip unread"
        );
        let seen = self.handshakes.get(&index).map_or(&[][..], Vec::as_slice);
        assert!(
            seen[..owed.handshakes.min(seen.len())]
                .iter()
                .all(|at| now - *at >= HANDSHAKE_QUIET),
            "slot {index} signalled with a handshake of before its flip in flight"
        );
    }

    /// Slot `index`'s sockets closed: what they held is gone (nothing is left to read).
    pub fn closed(&mut self, index: u32) {
        self.queued.remove(&index);
        self.handshakes.remove(&index);
        if let Some(owed) = self.owed.get_mut(&index) {
            owed.unread = false;
        }
    }

    /// Slot `index`'s worker is gone (exited, or the slot forgotten).
    pub fn gone(&mut self, index: u32) {
        self.owed.remove(&index);
        self.capped.remove(&index);
        self.watches.remove(&index);
    }
}

/// What happens around leaves: scales and rolls of a fleet whose workers get ready, traffic,
/// reads, the supervisor's readings of leaving slots, time (often less than a handshake's
/// quiet), now and then a timer, an exit or a quiet slot.
fn leave_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1..5u32).prop_map(Op::Scale),
        2 => (0..6usize).prop_map(Op::Roll),
        4 => (0..6usize, prop::bool::weighted(0.9)).prop_map(|(n, h)| Op::Ready(n, h)),
        4 => (0..6usize, any::<bool>()).prop_map(|(n, h)| Op::Datagram(n, h)),
        2 => (0..6usize).prop_map(Op::HandshakeAgain),
        3 => (0..6usize).prop_map(Op::Read),
        6 => (0..6usize).prop_map(Op::Finish),
        4 => prop_oneof![0..30u64, 0..1500u64].prop_map(Op::Wait),
        1 => (0..8usize).prop_map(Op::Fire),
        1 => (0..6usize, any::<bool>()).prop_map(|(n, o)| Op::Exit(n, o)),
        1 => (0..6usize).prop_map(Op::Quiet),
    ]
}

proptest! {
    #![proptest_config(Config {
        cases: 2000,
        rng_seed: RngSeed::Fixed(0x0075_6470),
        failure_persistence: None,
        ..Config::default()
    })]

    /// The leave's invariant (checked as each signal is sent), with every other invariant
    /// checked after every step, on fleets that roll and scale while their sockets get
    /// datagrams and handshakes.
    #[test]
    fn a_leaving_worker_is_signalled_only_once_what_it_was_given_is_done(
        workers in 1..4u32,
        batch in 1..3u32,
        ops in prop::collection::vec(leave_op(), 1..80),
    ) {
        let mut model = Model::new(workers, 0, false, 0, batch, false);
        for n in 0..workers as usize {
            model.run(Op::Ready(n, true));
        }
        model.check();
        for op in ops {
            model.run(op);
            model.check();
        }
    }
}
