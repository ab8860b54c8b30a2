//! Open connections per slot, counted by the kernel (`ck_conns_ops` on the instance's cgroup,
//! or `ck_conns` on a tracepoint: see `conn_hook` and the program's `conns.rs`): each listening socket of a slot is tagged with its slot in the
//! `conn_tags` socket storage (copied by the kernel into every connection it creates), its cookie
//! written to `listeners` (so a migration moves the count off the closing listener's slot), and
//! the per-CPU `conns` counters are summed here.
//!
//! The program's link is pinned beside the maps (`conn_hook`). A slot's count is
//! never zeroed: a slot index used again starts from the connections still open that its
//! listeners created (held by an earlier worker's children, say), which is what it holds.
//!
//! ck's own probe connections are not counted: the program tells them by their peer (a port of
//! the probe range, on loopback), read at offsets in `struct sock` found in the kernel's BTF
//! here ([`peer_offsets`]) and set in the program's read-only data at load.
//!
//! Where the kernel refuses the program (no BTF, an old kernel) or `CK_CONN_COUNT=scan` asks for
//! it, counts come from the sock_diag scan instead (`metrics::connections`).
use std::{path::Path, sync::OnceLock};

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, SkStorage},
};
use ck_common::{ConnTag, MAX_SLOTS, PeerOffsets};
use socket2::Socket;

pub use super::conn_hook::{ConnHook, FORCE_ENV};

/// The maps the program counts in, pinned with the others.
pub(crate) const MAPS: [&str; 5] = ["conn_tags", "conns", "listeners", "moved", "moved_any"];

/// One group's kernel counting of open connections.
pub struct ConnCounter {
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
        Ok(ConnCounter {
            tags: super::group::take(ebpf, "conn_tags")?,
            counts: super::group::take(ebpf, "conns")?,
            listeners: super::group::take(ebpf, "listeners")?,
        })
    }

    /// Tags `socket` (a listening socket of `slot`): its connections count for `slot`.
    pub fn tag(&mut self, slot: u32, socket: &Socket) -> anyhow::Result<()> {
        let tag = ConnTag { slot, flags: 0 };
        self.tags
            .insert(socket, tag, 0)
            .context("writing the conn_tags socket storage")?;
        let cookie = crate::os::sock_diag::cookie(socket).context("reading SO_COOKIE")?;
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
            let live = listening_cookies(socket);
            earlier.retain(|c| !live.contains(c));
        }
        for old in earlier {
            let _ = self.listeners.remove(&old);
        }
        self.listeners
            .insert(cookie, slot, 0)
            .context("writing the listeners map")
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
/// where the program cannot load. Resolved once per process.
pub fn peer_offsets() -> PeerOffsets {
    static RESOLVED: OnceLock<PeerOffsets> = OnceLock::new();
    *RESOLVED.get_or_init(|| {
        let found = super::btf::Btf::kernel().and_then(|btf| peer_offsets_in(&btf));
        found.unwrap_or_else(|e| {
            tracing::debug!("probe connections counted as open: {e}");
            PeerOffsets::UNKNOWN
        })
    })
}

/// [`peer_offsets`] in `btf`, each field checked for the size the program reads.
pub fn peer_offsets_in(btf: &super::btf::Btf) -> Result<PeerOffsets, super::btf::BtfError> {
    let at = |member: &str, size: u32| {
        btf.sized_field("sock", &["__sk_common", member], size)
            .map(|f| f.offset)
    };
    Ok(PeerOffsets {
        port: at("skc_dport", 2)?,
        family: at("skc_family", 2)?,
        addr4: at("skc_daddr", 4)?,
        addr6: at("skc_v6_daddr", 16)?,
    })
}

/// The cookies of the sockets listening on `socket`'s port and family (sock_diag); none when
/// they cannot be listed.
fn listening_cookies(socket: &Socket) -> Vec<u64> {
    let Some(addr) = socket.local_addr().ok().and_then(|a| a.as_socket()) else {
        return Vec::new();
    };
    crate::os::sock_diag::listeners(addr.port(), addr.is_ipv6())
        .map(|all| all.iter().map(|l| l.cookie).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use socket2::{Domain, Type};

    use super::super::{BpfGroup, pins};
    use super::*;
    use crate::os::cgroup::InstanceCgroup;

    /// Removes an instance's pins when dropped, so a failed check leaves none behind.
    struct PinsGone<'a>(&'a str);

    impl Drop for PinsGone<'_> {
        fn drop(&mut self) {
            let _ = pins::remove_instance(self.0);
        }
    }

    /// Runs `check` on each hook: the host-wide tracepoint, then an instance cgroup of its own
    /// (named after `what`), where the test's listeners are created.
    fn on_each_hook(what: &str, check: impl Fn(&str, Option<&InstanceCgroup>)) {
        check(&format!("unit-{what}-host-{}", std::process::id()), None);
        let name = format!("unit-{what}-cg-{}", std::process::id());
        let cgroup = InstanceCgroup::create(&name, false).expect("creating cgroups as root");
        assert!(cgroup.holds_sockets());
        check(&name, Some(&cgroup));
    }

    /// A listening `SO_REUSEPORT` socket on a free loopback port (created in `cgroup`'s
    /// `sockets` cgroup if given, as ck creates its own).
    fn listener(cgroup: Option<&InstanceCgroup>) -> Socket {
        let socket = match cgroup {
            Some(cgroup) => cgroup.socket(Domain::IPV4, Type::STREAM, None).unwrap(),
            None => Socket::new(Domain::IPV4, Type::STREAM, None).unwrap(),
        };
        socket.set_reuse_port(true).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        socket.listen(16).unwrap();
        socket
    }

    /// Polls `count` until it is `want` (closing is asynchronous: the FINs cross loopback).
    fn settles(group: &BpfGroup, slot: u32, want: i64) -> Option<i64> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = group.connections(slot);
            if now == Some(want) || Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Connections of a tagged listener count for its slot while they are open, including
    /// those not accepted yet; an untagged listener's count for nothing. (Loads the program:
    /// root.)
    #[test]
    fn a_tagged_listeners_connections_count_until_they_close() {
        on_each_hook("conns", tagged_listeners_count);
    }

    fn tagged_listeners_count(name: &str, cgroup: Option<&InstanceCgroup>) {
        let scope = cgroup.map(InstanceCgroup::dir);
        let _pins = PinsGone(name);
        let mut group =
            BpfGroup::load(name, "tcp4-1", 1, None, 0, false, scope).expect("loading as root");
        let tagged = listener(cgroup);
        group.insert(5, &tagged).expect("inserting the socket");
        let addr = tagged.local_addr().unwrap().as_socket().unwrap();
        let untagged = TcpListener::bind("127.0.0.1:0").unwrap();
        let clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let others: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(untagged.local_addr().unwrap()).unwrap())
            .collect();
        let queued = settles(&group, 5, 3);
        let accepted: Vec<_> = (0..3).map(|_| tagged.accept().unwrap()).collect();
        let after_accept = group.connections(5);
        drop((clients, accepted, others));
        let closed = settles(&group, 5, 0);
        let elsewhere: Vec<_> = (0..MAX_SLOTS)
            .filter_map(|s| group.connections(s))
            .collect();
        drop(group);
        let queued = queued.expect("the kernel counts here (both hooks load on this machine)");
        assert_eq!(queued, 3, "queued ones count");
        assert_eq!(after_accept, Some(3));
        assert_eq!(closed, Some(0));
        assert!(elsewhere.iter().all(|n| *n == 0), "{elsewhere:?}");
    }

    /// The kernel's layout, as the program reads it: `sock_common` at the start of `struct
    /// sock`, its peer's port after the addresses and the hash.
    #[test]
    fn the_peer_is_found_in_the_kernels_btf() {
        let at = peer_offsets_in(&super::super::btf::Btf::kernel().unwrap()).unwrap();
        assert_eq!((at.addr4, at.port, at.family), (0, 12, 16), "{at:?}");
        assert!(at.addr6 > at.family, "{at:?}");
        assert_eq!(peer_offsets(), at);
    }

    /// A loopback socket bound to a port the kernel picks, with `SO_REUSEADDR` as ck's probes
    /// have.
    fn bound_socket() -> Socket {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket.set_reuse_address(true).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        socket
    }

    /// The port `socket` is bound to.
    fn port_of(socket: &Socket) -> u16 {
        socket.local_addr().unwrap().as_socket().unwrap().port()
    }

    /// A connection from a port of the probe range on loopback is ck's probe: never counted,
    /// while a client's next to it is. (Loads the program: root.)
    ///
    /// The ports are the kernel's choice, not fixed ones, as other tests run alongside: the
    /// probe's names the range (its port is slot 2's), and the client's is one outside it.
    #[test]
    fn a_probe_connection_is_not_counted() {
        on_each_hook("conns-probe", probe_not_counted);
    }

    fn probe_not_counted(name: &str, cgroup: Option<&InstanceCgroup>) {
        let probe = bound_socket();
        let base = port_of(&probe) - 2;
        let in_range =
            |port: u16| (u32::from(base)..u32::from(base) + MAX_SLOTS).contains(&port.into());
        let client = std::iter::repeat_with(bound_socket)
            .take(64)
            .find(|c| !in_range(port_of(c)))
            .expect("a free port outside the probe range");
        let scope = cgroup.map(InstanceCgroup::dir);
        let _pins = PinsGone(name);
        let mut group =
            BpfGroup::load(name, "tcp4-1", 1, None, base, false, scope).expect("loading as root");
        let tagged = listener(cgroup);
        group.insert(2, &tagged).expect("inserting the socket");
        let addr = tagged.local_addr().unwrap();
        probe.connect(&addr).unwrap();
        client.connect(&addr).unwrap();
        // Both established (the tracepoint has seen both) once both are accepted.
        let accepted: Vec<_> = (0..2).map(|_| tagged.accept().unwrap()).collect();
        let open = group.connections(2);
        drop((probe, client, accepted));
        let closed = settles(&group, 2, 0);
        drop(group);
        assert_eq!(open, Some(1), "the client's connection only");
        assert_eq!(closed, Some(0));
    }
}
