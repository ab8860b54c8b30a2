//! `--adopt` at run time. The hooks are attached to the instance's cgroup before any worker
//! starts. A listen event (for a UDP group, the event of a bind: UDP sockets never listen), or
//! the periodic scan should an event be lost, leads to the socket:
//! sock_diag by cookie gives its inode, the pids of each worker's cgroup give the process and fd
//! holding it, and `pidfd_getfd` gives ck a copy. Once every group has the worker's socket, they
//! go into the slot's place in the `sockets` maps and become the slot's sockets (the lifecycle's
//! `Adopted`: publish, then close any the slot held for it), and the worker is ready (with
//! `--ready notify`, once it also said READY=1). From then on the slot is steered, drained,
//! probed and migrated like one whose sockets ck made.
use std::os::fd::AsRawFd as _;

use aya::maps::{MapData, RingBuf};
use ck_common::ListenEvent;
use socket2::Socket;

use crate::supervisor::{
    event::Event, groups::Group, groups::Groups, inputs::Inputs, slots::SlotTable,
};
use crate::{
    bpf::adopt::{self, AdoptHooks},
    os::pidfd,
    os::sock_diag,
};

/// Attaches the hooks for `cfg`'s ports to the instance's cgroup, before any worker starts.
pub(in crate::supervisor) fn attach(
    cfg: &crate::settings::run_config::RunConfig,
    cgroup: Option<&crate::os::cgroup::InstanceCgroup>,
) -> anyhow::Result<(AdoptHooks, RingBuf<MapData>)> {
    let cgroup = cgroup.ok_or_else(|| anyhow::anyhow!("--adopt needs the instance's cgroup"))?;
    let ports: Vec<u16> = cfg.listen.iter().map(|a| a.addr.port()).collect();
    let udp = cfg.listen.iter().any(|a| a.is_udp());
    Ok(AdoptHooks::attach(cgroup.dir(), &ports, udp)?)
}

/// The sockets workers may hold for a group on `port` in the family of `v6`: TCP listeners, or
/// (`udp`) bound UDP sockets.
fn group_sockets(udp: bool, port: u16, v6: bool) -> std::io::Result<Vec<sock_diag::Listener>> {
    match udp {
        true => sock_diag::bound_udp(port, v6),
        false => sock_diag::listeners(port, v6),
    }
}

/// Forwards every listen event of `ring` to the event loop.
pub(in crate::supervisor) fn read_listens(
    ring: RingBuf<MapData>,
    events: tokio::sync::mpsc::UnboundedSender<Event>,
) -> anyhow::Result<()> {
    adopt::forward_listens(ring, move |event| {
        events.send(Event::Listened(event)).is_ok()
    })
}

/// What copying a socket a worker holds led to.
pub(in crate::supervisor) enum Copied {
    /// Nothing more to do (already the slot's, gone, not ck's, or waiting for other groups).
    Nothing,
    /// A further listener of root slot `root`'s tree (one group): a member slot of its own.
    Member {
        root: u32,
        pid: u32,
        socket: Socket,
        latency_us: Option<u64>,
    },
    /// Every group has slot `index`'s socket, held by `holder`: the adoption is complete
    /// (`said_ready`: its worker said READY=1 meanwhile).
    Complete {
        index: u32,
        holder: u32,
        said_ready: bool,
    },
}

impl Inputs {
    /// A process of the instance's cgroup started to listen (TCP) or bound a UDP socket to one
    /// of the instance's ports: the event's cookie tells which socket, so which protocol. The
    /// group's position, the socket's inode and the latency since the event, to adopt.
    pub(in crate::supervisor) fn listened(
        &mut self,
        groups: &Groups,
        table: &SlotTable,
        event: ListenEvent,
    ) -> Option<(usize, u64, u64)> {
        let port = event.port as u16;
        let v6 = event.family == libc::AF_INET6 as u32;
        let mut found = None;
        for udp in [false, true] {
            let sockets = match group_sockets(udp, port, v6) {
                Ok(sockets) => sockets,
                Err(e) => {
                    tracing::warn!(port, udp, "listing sockets failed: {e}");
                    return None;
                }
            };
            if let Some(socket) = sockets.into_iter().find(|l| l.cookie == event.cookie) {
                found = Some((udp, socket));
                break;
            }
        }
        // Gone already (the worker closed it, or died): nothing to adopt.
        let (udp, listener) = found?;
        let of_group = |g: &Group| g.addr.addr.port() == port && g.addr.is_udp() == udp;
        let Some(position) = groups.iter().position(of_group) else {
            let holder = table.holder_in_fleet(listener.inode);
            let (slot, pid) = (holder.map(|h| h.0), holder.map(|h| h.1));
            // The same port in the other protocol (a DNS server's TCP listener beside its UDP
            // group): the worker serves that socket alone, unsteered.
            if groups.iter().any(|g| g.addr.addr.port() == port) {
                if !self.other_protocol_seen.insert((port, udp)) {
                    return None;
                }
                let (what, scheme) = match udp {
                    true => ("bound a UDP socket to", "udp"),
                    false => ("listens with TCP on", "tcp"),
                };
                tracing::warn!(
                    port,
                    ?slot,
                    ?pid,
                    "a worker {what} port {port}, where the instance has no {scheme} group: not \
                     adopted, each worker serves its own (add --listen {scheme}://HOST:{port} to \
                     steer them too); said once"
                );
                return None;
            }
            tracing::warn!(
                port,
                ?slot,
                ?pid,
                "a worker listens on a port that is not one of the instance's: not adopted \
                 (it binds another port than $PORT?)"
            );
            return None;
        };
        let latency = crate::os::clock::monotonic_ns().saturating_sub(event.ktime_ns) / 1000;
        Some((position, listener.inode, latency))
    }
}

/// Listeners of group `position`'s port held by workers and not adopted yet (in case a listen
/// event was lost): their inodes.
pub(in crate::supervisor) fn unadopted(
    groups: &Groups,
    table: &SlotTable,
    position: usize,
) -> Vec<u64> {
    let addr = groups[position].addr;
    let Ok(listeners) = group_sockets(addr.is_udp(), addr.addr.port(), addr.addr.is_ipv6()) else {
        return Vec::new();
    };
    let own = table.own_inodes(position);
    listeners
        .iter()
        .filter(|l| !own.contains(&l.inode))
        .map(|l| l.inode)
        .collect()
}

/// Takes a copy of socket `inode` from the worker holding it into its slot, for group
/// `position`; says when the slot has one for every group (or the socket is a further listener).
pub(in crate::supervisor) fn copy(
    groups: &Groups,
    table: &mut SlotTable,
    position: usize,
    inode: u64,
    latency_us: Option<u64>,
) -> Copied {
    if table.own_inodes(position).contains(&inode) {
        return Copied::Nothing;
    }
    let Some((index, pid, fd)) = table.holder_in_fleet(inode) else {
        return Copied::Nothing;
    };
    let copy = pidfd::open(pid).and_then(|pidfd| pidfd::get_fd(&pidfd, fd));
    let socket = match copy {
        Ok(fd) => Socket::from(fd),
        Err(e) => {
            tracing::warn!(slot = index, pid, "taking the worker's socket failed: {e}");
            return Copied::Nothing;
        }
    };
    let count = groups.len();
    let Some(slot) = table.slots.get_mut(&index) else {
        return Copied::Nothing;
    };
    slot.adopting.resize_with(count, || None);
    let adopted = slot.life.state.run().is_some_and(|run| run.adopted);
    if slot.adopting[position].is_some() || adopted {
        if count == 1 {
            return Copied::Member {
                root: index,
                pid,
                socket,
                latency_us,
            };
        }
        tracing::warn!(
            slot = index,
            pid,
            group = %groups[position].name,
            "a second listening socket on the port in one worker's process tree: with \
             several groups only the first of each is steered"
        );
        return Copied::Nothing;
    }
    tracing::debug!(
        slot = index,
        pid,
        fd = socket.as_raw_fd(),
        "worker socket copied"
    );
    slot.adopting[position] = Some(socket);
    if !slot.adopting.iter().all(Option::is_some) {
        return Copied::Nothing;
    }
    // Every group has the worker's socket: the lifecycle's `Adopted` installs them (into
    // the maps, then as the slot's sockets: see the executor), then the worker's readiness.
    let said_ready = match slot.worker.as_mut() {
        Some(worker) => {
            worker.adopt_latency_us = latency_us;
            worker.said_ready
        }
        None => false,
    };
    Copied::Complete {
        index,
        holder: pid,
        said_ready,
    }
}
