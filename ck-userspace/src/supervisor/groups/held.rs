//! What a leaving slot still holds, read for its leave (`fleet::leave`): its open TCP
//! connections (the kernel's count), and for its UDP sockets the bytes in their receive queues
//! (`sock_diag`'s `idiag_rqueue`, found by the sockets' inodes) and, in `quic` mode, the QUIC
//! handshakes it was given before its flip (the `pending` table).
use std::time::Instant;

use socket2::Socket;

use crate::os::{clock, sock_diag};
use crate::supervisor::fleet::leave::{Connections, HANDSHAKE_QUIET, UdpReading, Wanted};
use crate::supervisor::groups::Groups;

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
