//! Retired workers that served (a roll replaced them, a scale-down or a recycle chose them)
//! leave: out of the active set at once, socket open, and the stop signal only once what they
//! were given is done, as `fleet::leave` decides from what this reads of each leaving slot at
//! the sampler's ticks (every [`CHECK_EVERY`]): its open TCP connections (the kernel's count)
//! and, with UDP groups, its sockets' receive queues and the QUIC handshakes it was given
//! before its flip (`groups::held`). The lifecycle's linger (`--drain-timeout`) caps the wait.
//!
//! A stopping worker of a fleet with UDP groups keeps its socket, and so the datagrams of its
//! flows, until it exits, or until its slot has received no datagram (the program's per-slot
//! counters) and held no TCP connection for `--udp-linger`, when it is killed
//! (`fleet::leave::quiet`, read every [`LINGER_CHECK_EVERY`]); `--drain-timeout` still bounds
//! the whole stop.
use std::time::{Duration, Instant};

use crate::supervisor::{
    fleet::leave::{self, Reading},
    groups::Groups,
    lifecycle::Input,
    lifecycle::State,
    slots::SlotTable,
};

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
