//! Open connections per slot, counted by the kernel (`ck_conns_ops` on the slots', the workers'
//! or the instance's cgroups, or `ck_conns` on a tracepoint: see `conn_hook` and the program's
//! `conns.rs`). Each listening socket of a slot is made in the slot's cgroup (with `--adopt`,
//! by its worker in the worker's), where the counter is attached with the slot in the cgroup's
//! storage (`slot_cgroups`, `worker_cgroups`), or, on the other hooks, tagged with its slot in
//! the `conn_tags` socket storage (copied by the kernel into every connection it creates). Its
//! cookie is written to `listeners` (so a migration moves the count off the closing listener's
//! slot), and the per-CPU `conns` counters are summed here.
//!
//! The program's links are pinned beside the maps (`conn_hook`). A slot's count is
//! never zeroed: a slot index used again starts from the connections still open that its
//! listeners created (held by an earlier worker's children, say), which is what it holds.
//!
//! ck's own probe connections are not counted: the program tells them by their peer (a port of
//! the probe range, on loopback), read at offsets in `struct sock` found in the kernel's BTF
//! here ([`peer_offsets`]) and set in the program's read-only data at load.
//!
//! Where the kernel refuses the program (no BTF, an old kernel) or `CK_CONN_COUNT=scan` asks for
//! it, counts come from the sock_diag scan instead (`metrics::connections`).
use std::path::Path;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, SkStorage},
};
use ck_common::{ConnTag, MAX_SLOTS, PeerOffsets};
use socket2::Socket;

pub use super::conn_hook::{ConnHook, FORCE_ENV};
use super::slot_cgroups::SlotCgroups;
use super::worker_cgroups::WorkerCgroups;

/// The maps the program counts in, pinned with the others (last in `pins::PINNED_MAPS`, as
/// the tests check).
#[cfg(test)]
const MAPS: [&str; 5] = ["conn_tags", "conns", "listeners", "moved", "moved_any"];

/// How a listening socket's connections are told to count for its slot.
enum Naming {
    /// The counter on the slots' cgroups, where ck makes its sockets.
    Slots(SlotCgroups),
    /// `--adopt`: the counter on the workers' cgroups, where they make theirs.
    Workers(WorkerCgroups),
    /// A tag on each listening socket.
    Tags,
}

/// One group's kernel counting of open connections.
pub struct ConnCounter {
    /// How a slot's sockets count for it.
    naming: Naming,
    tags: SkStorage<MapData, ConnTag>,
    counts: PerCpuArray<MapData, i64>,
    listeners: HashMap<MapData, u64, u32>,
}

impl ConnCounter {
    /// Attaches the counter on `hook` from `ebpf` (already loaded, maps pinned in `pin_dir`)
    /// and takes its maps. `resume`: a pinned link of an earlier image is replaced by this
    /// one. The error says why the kernel refused (the caller falls back to the scan).
    pub fn start(
        ebpf: &mut Ebpf,
        pin_dir: &Path,
        resume: bool,
        hook: &ConnHook,
    ) -> anyhow::Result<ConnCounter> {
        hook.attach(ebpf, pin_dir, resume)?;
        let naming = match hook {
            ConnHook::Slots { sockets, group } => {
                Naming::Slots(SlotCgroups::start(ebpf, pin_dir, sockets, group)?)
            }
            ConnHook::Workers => Naming::Workers(WorkerCgroups::start(ebpf, pin_dir)?),
            ConnHook::Cgroup(_) | ConnHook::Host => Naming::Tags,
        };
        Ok(ConnCounter {
            naming,
            tags: super::object::take(ebpf, "conn_tags")?,
            counts: super::object::take(ebpf, "conns")?,
            listeners: super::object::take(ebpf, "listeners")?,
        })
    }

    /// Makes the connections of `socket` (a listening socket of `slot`) count for `slot`: the
    /// counter attached to the slot's cgroup (where ck made the socket) from `ebpf`, or a tag
    /// on the socket. With `--adopt` (a worker's socket), the counter is on the worker's cgroup
    /// already: an error says that the socket was made elsewhere, where nothing counts it.
    pub fn tag(&mut self, ebpf: &mut Ebpf, slot: u32, socket: &Socket) -> anyhow::Result<()> {
        let cookie = crate::os::sock_diag::cookie(socket).context("reading SO_COOKIE")?;
        // The sockets listening on its port and family, listed once and only if asked.
        let listening = std::cell::OnceCell::new();
        let listening = || listening.get_or_init(|| listeners_beside(socket));
        match &mut self.naming {
            Naming::Slots(slots) => slots.count(ebpf, slot)?,
            Naming::Workers(workers) => {
                let made_in = listening().iter().find(|l| l.cookie == cookie);
                if let Some(id) = made_in.and_then(|l| l.cgroup)
                    && !workers.counts_in(id)
                {
                    anyhow::bail!(
                        "it was made in cgroup {id}, not in a cgroup ck made for a worker of \
                         this group (a worker process that moved itself?)"
                    );
                }
            }
            Naming::Tags => {
                let tag = ConnTag { slot, flags: 0 };
                self.tags
                    .insert(socket, tag, 0)
                    .context("writing the conn_tags socket storage")?;
            }
        }
        // An earlier socket of the slot (replaced, perhaps by an earlier image of ck: the map is
        // pinned) leaves once it no longer listens. One that still does (held by a worker whose
        // exit was reported as it began, the kernel still tearing it down) stays: when its last
        // fd closes, the connections queued on it migrate, and their count moves off this slot
        // through this entry. Where the listeners cannot be listed, every earlier one leaves.
        let mut earlier: Vec<u64> = self
            .listeners
            .iter()
            .filter_map(Result::ok)
            .filter(|(c, s)| *s == slot && *c != cookie)
            .map(|(c, _)| c)
            .collect();
        if !earlier.is_empty() {
            earlier.retain(|c| !listening().iter().any(|l| l.cookie == *c));
        }
        for old in earlier {
            let _ = self.listeners.remove(&old);
        }
        self.listeners
            .insert(cookie, slot, 0)
            .context("writing the listeners map")
    }

    /// The tag on `socket`, if any (the tests' view of what the kernel copied into it).
    #[cfg(test)]
    pub fn tag_of(&self, socket: &impl std::os::fd::AsRawFd) -> Option<ConnTag> {
        self.tags.get(socket, 0).ok()
    }

    /// `--adopt`: the counter on the workers' cgroups (None: the group counts otherwise).
    pub fn workers(&mut self) -> Option<&mut WorkerCgroups> {
        match &mut self.naming {
            Naming::Workers(workers) => Some(workers),
            _ => None,
        }
    }

    /// Open connections of `slot`, summed over CPUs.
    pub fn count(&self, slot: u32) -> i64 {
        if slot >= MAX_SLOTS {
            return 0;
        }
        self.counts
            .get(&slot, 0)
            .map(|values| values.iter().sum())
            .unwrap_or(0)
    }
}

/// Where the program reads a connection's peer in a `struct sock`, from the kernel's BTF; not
/// resolved (every connection counts, ck's probes too) where BTF cannot be read, which is also
/// where the program cannot load.
pub fn peer_offsets() -> PeerOffsets {
    let found = &super::kernel_layout::kernel().peer;
    found.clone().unwrap_or(PeerOffsets::UNKNOWN)
}

/// Where the program reads a socket's pending error (`sk_err`) in a `struct sock`, from the
/// kernel's BTF, to tell the resets a connection's own side sent from those it received; 0
/// (no reset is counted) where BTF cannot be read.
pub fn sk_err_offset() -> u32 {
    super::kernel_layout::kernel().sk_err.clone().unwrap_or(0)
}

/// The sockets listening on `socket`'s port and family, `socket` included, with their cookies
/// and the cgroups they were made in (sock_diag); none when they cannot be listed.
fn listeners_beside(socket: &Socket) -> Vec<crate::os::sock_diag::Listener> {
    let Some(addr) = socket.local_addr().ok().and_then(|a| a.as_socket()) else {
        return Vec::new();
    };
    crate::os::sock_diag::listeners(addr.port(), addr.is_ipv6()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets the program is loaded with are the kernel's.
    #[test]
    fn the_peer_is_the_kernels() {
        let layout = super::super::kernel_layout::kernel();
        assert_eq!(Ok(peer_offsets()), layout.peer);
        assert_eq!(Ok(sk_err_offset()), layout.sk_err);
    }

    /// The counter's maps are pinned with the others, last (as `PINNED_MAPS` says).
    #[test]
    fn the_counters_maps_are_pinned_last() {
        let pinned = super::super::pins::PINNED_MAPS;
        assert_eq!(&pinned[pinned.len() - MAPS.len()..], &MAPS[..]);
    }
}
