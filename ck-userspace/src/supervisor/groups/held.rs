//! Retired workers that served (a roll replaced them, a scale-down or a recycle chose them)
//! leave: out of the active set at once, socket open, and the stop signal only once what they
//! were given is done, as `fleet::leave` decides from what this file reads of each leaving slot
//! at the sampler's ticks (every [`CHECK_EVERY`]): its open TCP connections (the kernel's count)
//! and, with UDP groups, its sockets' receive queues and the QUIC handshakes it was given
//! before its flip. The lifecycle's linger (`--drain-timeout`) caps the wait.
//!
//! A stopping worker of a fleet with UDP groups keeps its socket, and so the datagrams of its
//! flows, until it exits, or until its slot has received no datagram (the program's per-slot
//! counters) and held no TCP connection for `--udp-linger`, when it is killed
//! (`fleet::leave::quiet`, read every [`LINGER_CHECK_EVERY`]); `--drain-timeout` still bounds
//! the whole stop.
//!
//! What a leaving slot still holds: its open TCP
//! connections (the kernel's count), and for its UDP sockets the bytes in their receive queues
//! (`sock_diag`'s `idiag_rqueue`, found by the sockets' inodes) and, in `quic` mode, the QUIC
//! handshakes it was given before its flip (the `pending` table).
use std::time::{Duration, Instant};

use socket2::Socket;

use crate::os::{clock, sock_diag};
use crate::supervisor::fleet::leave::{
    self, Connections, HANDSHAKE_QUIET, Reading, UdpReading, Wanted,
};
use crate::supervisor::groups::Groups;
use crate::supervisor::lifecycle::{Input, State};
use crate::supervisor::slots::SlotTable;

/// How often a leaving slot is read.
pub(in crate::supervisor) const CHECK_EVERY: Duration = Duration::from_millis(5);
/// How often a stopping UDP slot's datagrams are counted: a linger is seconds long.
pub(in crate::supervisor) const LINGER_CHECK_EVERY: Duration = Duration::from_millis(100);

/// Reads every leaving slot: the inputs that let go of those that are done.
pub(in crate::supervisor) fn leavers_done(
    table: &mut SlotTable,
    groups: &Groups,
    now: Instant,
) -> Vec<(u32, Input)> {
    let mut finished = Vec::new();
    for slot in table.slots.values_mut() {
        let State::Leaving(run) = slot.life.state else {
            continue;
        };
        let wanted = leave::wanted(&slot.leave_watch, run.id, now);
        let reading = Reading {
            connections: groups.connections_held(slot.index),
            udp: groups.udp_held(slot.index, &slot.sockets, wanted, now),
        };
        if let Some(why) = leave::done(&mut slot.leave_watch, run.id, reading, now) {
            slot.leave_watch = None;
            finished.push((slot.index, Input::Finished(why)));
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
    let mut quiet_ones = Vec::new();
    for slot in table.slots.values_mut() {
        let State::Stopping(run, _) = slot.life.state else {
            continue;
        };
        let Some(datagrams) = groups.datagrams_of(slot.index) else {
            continue;
        };
        let open = groups.kernel_connections_of(slot.index).unwrap_or(0);
        let watch = &mut slot.leave_watch;
        if let Some(why) = leave::quiet(watch, run.id, datagrams, open, linger, now) {
            slot.leave_watch = None;
            quiet_ones.push((slot.index, Input::Quiet(why)));
        }
    }
    quiet_ones
}

impl Groups {
    /// Slot `index`'s open TCP connections as the kernel counts them, summed over every TCP
    /// group.
    pub(in crate::supervisor) fn connections_held(&self, index: u32) -> Connections {
        if self.tcp().next().is_none() {
            return Connections::NoTcpGroup;
        }
        match self.kernel_connections_of(index) {
            Some(open) => Connections::Open(open),
            None => Connections::NotCounted,
        }
    }

    /// What slot `index`'s UDP sockets (`sockets`, in group order) hold, as far as `wanted`
    /// asks, at `now`; None without UDP groups.
    pub(in crate::supervisor) fn udp_held(
        &self,
        index: u32,
        sockets: &[Socket],
        wanted: Wanted,
        now: Instant,
    ) -> Option<UdpReading> {
        if !self.any_udp() {
            return None;
        }
        Some(UdpReading {
            queued: wanted.queue.then(|| self.udp_queued(sockets)).flatten(),
            handshakes: wanted.handshakes.then(|| self.handshakes_until(index, now)),
        })
    }

    /// Bytes waiting in the receive queues of `sockets` that belong to UDP groups (None when
    /// one cannot be read).
    fn udp_queued(&self, sockets: &[Socket]) -> Option<u64> {
        let mut queued = 0;
        for (group, socket) in self.iter().zip(sockets) {
            if !group.addr.is_udp() {
                continue;
            }
            let inode = sock_diag::inode_of(socket).ok()?;
            let bound = sock_diag::bound_udp(group.addr.addr.port(), group.addr.addr.is_ipv6());
            let found = match bound {
                Ok(bound) => bound.into_iter().find(|s| s.inode == inode),
                Err(e) => {
                    tracing::warn!(group = %group.name, "reading a UDP socket's queue: {e}");
                    None
                }
            };
            queued += u64::from(found?.queued);
        }
        Some(queued)
    }

    /// When the last QUIC handshake slot `index` was given before its flip stops being in
    /// flight (its last datagram + [`HANDSHAKE_QUIET`]), over every `quic` group; None when
    /// none is in flight at `now`.
    fn handshakes_until(&self, index: u32, now: Instant) -> Option<Instant> {
        let now_ns = clock::monotonic_ns();
        let quiet = HANDSHAKE_QUIET.as_nanos() as u64;
        self.iter()
            .filter_map(|g| g.bpf.as_ref()?.handshakes_before_flip(index))
            .max()
            .map(|seen| clock::instant_of(seen.saturating_add(quiet), now_ns, now))
            .filter(|until| *until > now)
    }
}
