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

/// Entries of the `pending` table (QUIC handshakes in flight, by the client's original
/// destination connection ID; an LRU hash).
pub const MAX_PENDING: u32 = 16_384;

/// The longest QUIC connection ID (RFC 9000, 17.2).
pub const MAX_CID_LEN: usize = 20;

/// How a UDP group routes, as stored in [`super::Config::udp_mode`].
pub mod udp_mode {
    /// Client address and port -> slot in the `flows` table; new flows by the consistent table.
    /// For any UDP protocol and any unmodified server.
    pub const FLOW: u32 = 0;
    /// No table: every datagram by the consistent table over the ready slots (request/response
    /// protocols: DNS, syslog, statsd).
    pub const STATELESS: u32 = 1;
    /// QUIC: packets whose destination connection ID carries a worker's cookie (see
    /// [`super::cookie`]) go to that worker whatever the client's address (migration, NAT
    /// rebinding); a handshake's Initial and 0-RTT packets by their original destination
    /// connection ID (`pending`); new handshakes by the consistent table.
    pub const QUIC: u32 = 2;
}

/// The cookie a worker puts in the connection IDs it chooses (`quic` mode), in the layout of
/// QUIC-LB's plaintext server ID encoding (draft-ietf-quic-load-balancers): the first octet's top
/// three bits are the configuration (`CONFIG`), its low five bits are free for the server (QUIC-LB
/// puts the connection ID's length there); then the server ID, two octets: the slot, and the
/// low eight bits of the slot's worker generation (`slots` map), so that a reused slot's old
/// connection IDs are stale; then the server's own bytes (at least [`cookie::MIN_NONCE`]).
pub mod cookie {
    /// The configuration bits ck's cookies carry (QUIC-LB's config rotation: 0; 0b111 means
    /// unroutable).
    pub const CONFIG: u8 = 0;
    /// Octets of the server ID (`CK_QUIC_SERVER_ID`): slot, generation.
    pub const SERVER_ID_LEN: usize = 2;
    /// The fewest bytes a worker adds after the server ID (QUIC-LB: at least 4 for plaintext).
    pub const MIN_NONCE: usize = 4;
    /// The shortest connection ID that carries a cookie.
    pub const MIN_CID_LEN: usize = 1 + SERVER_ID_LEN + MIN_NONCE;

    /// The server ID of `slot`'s worker of generation `generation`.
    pub const fn server_id(slot: u32, generation: u32) -> [u8; SERVER_ID_LEN] {
        [slot as u8, generation as u8]
    }

    /// The slot and generation octet a connection ID's first three octets carry, if their
    /// configuration bits are ck's.
    #[inline(always)]
    pub fn read(first: u8, slot: u8, generation: u8) -> Option<(u32, u8)> {
        (first >> 5 == CONFIG).then_some((u32::from(slot), generation))
    }
}

/// A QUIC handshake's key in the `pending` table: the original destination connection ID the
/// client chose (its bytes after `len` are zero).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PendingKey {
    /// Its length in bytes (at most [`MAX_CID_LEN`]).
    pub len: u32,
    /// Its bytes.
    pub cid: [u8; MAX_CID_LEN],
}

/// The routes a datagram can take, as indices of [`UdpStats::routes`]. Every datagram the
/// program sees is counted under exactly one, at the slot it went to (or at `STATS_NO_SLOT`).
pub mod route {
    /// A probe or the steering canary, steered by its source port.
    pub const PROBE: usize = 0;
    /// `quic` mode: by the cookie in the destination connection ID, to its slot.
    pub const COOKIE: usize = 1;
    /// `quic` mode: a handshake's Initial or 0-RTT packet, by its original destination
    /// connection ID, to the slot its first packet went to.
    pub const PENDING: usize = 2;
    /// A known flow, to its slot.
    pub const FLOW: usize = 3;
    /// A new flow (or QUIC handshake), by the consistent table (and remembered, in `flow` and
    /// `quic` mode).
    pub const NEW: usize = 4;
    /// A known flow, cookie or handshake whose slot is gone (its socket closed, or the slot
    /// reused): routed as new.
    pub const STALE: usize = 5;
    /// `stateless` mode: by the consistent table, not remembered.
    pub const STATELESS: usize = 6;
    /// Its addresses, or in `quic` mode its QUIC header, could not be read: dropped.
    pub const MALFORMED: usize = 7;
    /// How many routes there are.
    pub const COUNT: usize = 8;
    /// Each route's name (`ck maps`, `/metrics`), by index.
    pub const NAMES: [&str; COUNT] = [
        "probe",
        "cookie",
        "pending",
        "flow",
        "new",
        "stale",
        "stateless",
        "malformed",
    ];
}

/// A flow's key in the `flows` table: the kernel's hash of the datagram's addresses and ports
/// (`sk_reuseport_md.hash`, the reuseport hash of the 4-tuple, with a per-boot secret), which
/// the program reads without a helper call. Two flows with one hash (rare: 32 bits, at most
/// [`MAX_FLOWS`] entries) share an entry and go to one worker, which is all a flow needs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The kernel's hash of the flow's addresses and ports.
    pub hash: u32,
}

/// A client's address and port, as the `flows` table records the flow's first datagram for
/// `ck maps` and bpftool (the program routes by the [`FlowKey`] alone).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Client {
    /// Source address: IPv4 in the first 4 bytes (zeros after), or IPv6.
    pub addr: [u8; 16],
    /// Source port, network byte order.
    pub port: u16,
    /// 1 for IPv6, 0 for IPv4.
    pub v6: u16,
}

/// Where a remembered flow or handshake goes: the slot, and the generation of that slot's
/// `sockets` entry when it was given to it (`sock_gens`): a slot whose socket was replaced
/// since (a new worker on the slot) does not get the old flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// Slot index.
    pub slot: u32,
    /// `sock_gens[slot]` when the flow was remembered.
    pub generation: u32,
}

/// A QUIC handshake's value in the `pending` table: where it goes, the active set that chose
/// it, and when its last datagram came. A worker that leaves is signalled only once the
/// handshakes it was given before its flip are done (see ck's `fleet::leave`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handshake {
    /// Where its datagrams go.
    pub to: Flow,
    /// The flip counter ([`super::Config::live_half`]) of the active set that chose `to`.
    pub flip: u32,
    /// Padding, zero.
    pub reserved: u32,
    /// When its last datagram came (`bpf_ktime_get_ns`: `CLOCK_MONOTONIC`, nanoseconds).
    pub seen_ns: u64,
}

/// A flow's value in the `flows` table: where it goes, and whose flow it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowValue {
    /// Where the flow goes.
    pub to: Flow,
    /// The client of the flow's first datagram.
    pub client: Client,
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
    // SAFETY: `#[repr(C)]`, `Copy`, one u32.
    unsafe impl aya::Pod for super::FlowKey {}
    // SAFETY: `#[repr(C)]`, `Copy`, 16 bytes then two u16: 20 bytes, no padding.
    unsafe impl aya::Pod for super::Client {}
    // SAFETY: `#[repr(C)]`, `Copy`, a `Flow` (two u32) then a `Client` (20 bytes, 2-aligned):
    // 28 bytes, no padding.
    unsafe impl aya::Pod for super::FlowValue {}
    // SAFETY: `#[repr(C)]`, `Copy`, two u32 fields.
    unsafe impl aya::Pod for super::Flow {}
    // SAFETY: `#[repr(C)]`, `Copy`, an array of u64.
    unsafe impl aya::Pod for super::UdpStats {}
    // SAFETY: `#[repr(C)]`, `Copy`, a u32 then 20 bytes: 24 bytes, no padding.
    unsafe impl aya::Pod for super::PendingKey {}
    // SAFETY: `#[repr(C)]`, `Copy`, a `Flow` (two u32), two u32 then a u64: 24 bytes, no
    // padding.
    unsafe impl aya::Pod for super::Handshake {}
}
