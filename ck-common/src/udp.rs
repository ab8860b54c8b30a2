//! UDP groups: the per-datagram program's flow table, its per-route counters and its modes,
//! shared by the program (`ck_select_udp`) and the supervisor (which reads and decodes them).
//!
//! For UDP the kernel asks the group's program about every datagram, not once per connection:
//! a flow keeps its worker only if the program remembers it. The `flows` table (client address
//! and port -> slot) does that; a new flow takes the active set's consistent (Maglev) table, so a
//! change of the set moves no flow and only its share of new ones.

/// Entries of the `flows` table (an LRU hash: the least recently seen flow makes room). 65536
/// flows cost about 3 MiB of kernel memory per UDP group; TCP groups get a table of one entry.
pub const MAX_FLOWS: u32 = 65_536;

/// How a UDP group routes, as stored in [`super::Config::udp_mode`].
pub mod udp_mode {
    /// Client address and port -> slot in the `flows` table; new flows by the consistent table.
    /// For any UDP protocol and any unmodified server.
    pub const FLOW: u32 = 0;
    /// No table: every datagram by the consistent table over the ready slots (request/response
    /// protocols: DNS, syslog, statsd).
    pub const STATELESS: u32 = 1;
}

/// The routes a datagram can take, as indices of [`UdpStats::routes`]. Every datagram the
/// program sees is counted under exactly one, at the slot it went to (or at `STATS_NO_SLOT`).
pub mod route {
    /// A probe or the steering canary, steered by its source port.
    pub const PROBE: usize = 0;
    /// A known flow, to its slot.
    pub const FLOW: usize = 1;
    /// A new flow, by the consistent table (and remembered, in `flow` mode).
    pub const NEW: usize = 2;
    /// A known flow whose slot is gone (its socket closed, or the slot reused): routed as new.
    pub const STALE: usize = 3;
    /// `stateless` mode: by the consistent table, not remembered.
    pub const STATELESS: usize = 4;
    /// Its addresses could not be read: dropped.
    pub const MALFORMED: usize = 5;
    /// How many routes there are.
    pub const COUNT: usize = 6;
    /// Each route's name (`ck maps`, `/metrics`), by index.
    pub const NAMES: [&str; COUNT] = ["probe", "flow", "new", "stale", "stateless", "malformed"];
}

/// A flow's key in the `flows` table: the client's address (IPv4 in the first 4 bytes, zeros
/// after) and port (network byte order, as on the wire), and its family.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address.
    pub addr: [u8; 16],
    /// Source port, network byte order.
    pub port: u16,
    /// 1 for IPv6, 0 for IPv4.
    pub v6: u16,
}

/// A flow's value in the `flows` table: the slot it goes to, and the generation of that slot's
/// `sockets` entry when the flow was given to it (`sock_gens`): a slot whose socket was replaced
/// since (a new worker on the slot) does not get the old flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// Slot index.
    pub slot: u32,
    /// `sock_gens[slot]` when the flow was remembered.
    pub generation: u32,
}

/// Per-slot datagram counters of a UDP group, by route (per-CPU `udp_stats` map, summed by
/// the reader); index `STATS_NO_SLOT` counts datagrams no slot took.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams by [`route`].
    pub routes: [u64; route::COUNT],
}

impl UdpStats {
    /// Adds `other`'s counters to these (summing CPUs).
    pub fn add(&mut self, other: &UdpStats) {
        for (mine, theirs) in self.routes.iter_mut().zip(other.routes) {
            *mine += theirs;
        }
    }

    /// Every datagram counted, whatever its route.
    pub fn total(&self) -> u64 {
        self.routes.iter().sum()
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: `#[repr(C)]`, `Copy`, 16 bytes then two u16: 20 bytes, no padding.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: `#[repr(C)]`, `Copy`, two u32 fields.
    unsafe impl aya::Pod for super::Flow {}
    // SAFETY: `#[repr(C)]`, `Copy`, an array of u64.
    unsafe impl aya::Pod for super::UdpStats {}
}
