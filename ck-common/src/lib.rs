//! Types and constants shared by the BPF program (`ck-ebpf`) and the supervisor (`ck-userspace`).
//!
//! Every type here is `#[repr(C)]` and is the value type of one BPF map, so both sides agree on
//! the layout byte for byte; BTF carries the field names so `bpftool map dump` prints them.
#![no_std]

pub mod exits;
pub mod sticky;
pub mod udp;

/// Number of slots per group: the size of every per-slot map. Slots outnumber workers so that
/// a rolling restart can start a replacement before the old worker leaves.
pub const MAX_SLOTS: u32 = 128;

/// How many active-set entries the program tries before it gives up on a connection
/// (an entry can fail when its socket has just closed).
pub const MAX_SELECT_TRIES: u32 = 4;

/// Index in `stats` that counts connections for which no slot could be selected.
pub const STATS_NO_SLOT: u32 = MAX_SLOTS;

/// A slot's state as stored in [`SlotInfo::state`] (its code) and shown by `ck status`, `ck maps`
/// and the metrics (its name): one type for the supervisor, the map dump and the program's maps.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// No worker on this slot, nothing due.
    Stopped = 0,
    /// Worker spawned, socket in the group, not selected yet.
    Starting = 1,
    /// Worker selected for new connections (in the active set).
    Ready = 2,
    /// Not selected; socket open; worker finishing its work (`ck drain` or `STOPPING=1`).
    Draining = 3,
    /// Not selected; socket open; failing health checks.
    Unhealthy = 4,
    /// No worker; the group's last socket kept open for the replacement (last resort).
    Held = 5,
    /// Not selected; socket open; the supervisor sent the worker its stop signal.
    Stopping = 6,
    /// No worker; a restart is due after a backoff; socket closed.
    Restarting = 7,
    /// No worker; circuit breaker open; socket closed.
    Broken = 8,
    /// Ready but held out: a rolling restart's replacement not flipped in yet, or a hot spare.
    Standby = 9,
    /// Ready but held out: a worker of the release the last roll replaced, kept alive by
    /// `--keep-previous` for `ck rollback`.
    Kept = 10,
}

impl SlotState {
    /// Every state, in code order.
    pub const ALL: [SlotState; 11] = [
        SlotState::Stopped,
        SlotState::Starting,
        SlotState::Ready,
        SlotState::Draining,
        SlotState::Unhealthy,
        SlotState::Held,
        SlotState::Stopping,
        SlotState::Restarting,
        SlotState::Broken,
        SlotState::Standby,
        SlotState::Kept,
    ];

    /// The code written to the `slots` map.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The state a `slots` map code stands for.
    pub fn from_code(code: u32) -> Option<SlotState> {
        SlotState::ALL.get(code as usize).copied()
    }

    /// The word shown by `ck status`, `ck maps`, the logs and the metrics.
    pub const fn name(self) -> &'static str {
        match self {
            SlotState::Stopped => "stopped",
            SlotState::Starting => "starting",
            SlotState::Standby => "standby",
            SlotState::Kept => "kept",
            SlotState::Ready => "ready",
            SlotState::Draining => "draining",
            SlotState::Unhealthy => "unhealthy",
            SlotState::Stopping => "stopping",
            SlotState::Restarting => "restarting",
            SlotState::Held => "held",
            SlotState::Broken => "broken",
        }
    }
}

/// Selection policies as stored in [`Config::policy`].
pub mod policy {
    /// Flow hash of the connection's 4-tuple over the active set.
    pub const HASH: u32 = 0;
    /// Even spread: a per-CPU cursor walks the active set.
    pub const ROUND_ROBIN: u32 = 1;
    /// Power of two choices by accept-queue depth; ties go to the round-robin candidate. The
    /// depth is read from the kernel by the program itself when [`config_flags::EXACT_QUEUE`]
    /// is set, else it is the supervisor's sample (`SlotInfo::queue_depth`).
    pub const LEAST_QUEUE: u32 = 2;
    /// Session affinity: the client's source address looked up in the `sticky` table (Maglev,
    /// filled by the supervisor), so a client keeps its worker while that worker is ready.
    pub const STICKY: u32 = 3;
    /// Least connections among up to 4 candidates spread over the active set (the round-robin
    /// one first), by the kernel-counted `conns` (open connections, queued ones included); ties
    /// go to the earlier candidate. For long-lived connections (websockets, SSE, gRPC streams,
    /// keep-alive pools).
    pub const LEAST_CONN: u32 = 4;
    /// Not a policy: the select program's `CK_POLICY` when it was loaded for none in particular
    /// (it then steers by `Config::policy` alone, with every policy's code).
    pub const ANY: u32 = u32::MAX;
}

/// Most slots whose queues a canary's watch reads at once (`watched`).
pub const MAX_WATCHED: u32 = 8;

/// Bits of [`Config::flags`].
pub mod config_flags {
    /// `least-queue` reads each candidate's exact queue depth from kernel memory at the
    /// offsets of [`super::Config::queue`] (set only when the program was loaded able to).
    pub const EXACT_QUEUE: u32 = 1;
    /// `least-conn` sums the kernel's per-CPU open-connection counts (set only when the
    /// counting program runs and the program was loaded able to sum them); without it,
    /// `least-conn` compares the supervisor's samples in `conn_samples`.
    pub const KERNEL_CONNS: u32 = 2;
    /// A canary is judged with `--canary-max-queue-age`: at each new connection (ck's probes
    /// included), the program records how long the oldest queued connection of each slot the
    /// `watched` map lists has waited (`queue_ages`). Set only when the program was loaded
    /// able to read kernel memory.
    pub const WATCH_QUEUES: u32 = 4;
    /// Some ready slot is listed more than once (`--slow-start`, a canary): `least-conn` and
    /// `least-queue` compare each candidate's load per unit of its weight
    /// (`SlotInfo::weight`), read only then.
    pub const WEIGHTED: u32 = 8;
}

/// Per-slot record in the `slots` map: the readable truth about each slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotInfo {
    /// A [`SlotState`] code.
    pub state: u32,
    /// Worker process id (0 when none).
    pub pid: u32,
    /// Incremented each time a new worker takes the slot.
    pub generation: u32,
    /// Times the slot is listed in the ready list of `active`: 1, or while `--slow-start`
    /// ramps a slot up, its weight (a warm slot's is the most).
    pub weight: u32,
    /// Accept-queue depth last sampled by the supervisor.
    pub queue_depth: u32,
    /// Reserved, zero.
    pub flags: u32,
}

/// One half of the double-buffered `active` map.
///
/// `slots[..ready_len]` are the ready slots the policy chooses from. `slots[ready_len..live_len]`
/// are live slots that are not ready (starting, draining, unhealthy): the program uses them only
/// when no slot is ready, so that a connection waits in a queue instead of being refused.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ActiveSet {
    /// Number of ready slots at the front of `slots`.
    pub ready_len: u32,
    /// Number of live slots in `slots` (ready ones first).
    pub live_len: u32,
    /// Slot indices.
    pub slots: [u32; MAX_SLOTS as usize],
}

impl ActiveSet {
    /// An empty set: the program drops every connection it is asked about.
    pub const EMPTY: ActiveSet = ActiveSet {
        ready_len: 0,
        live_len: 0,
        slots: [0; MAX_SLOTS as usize],
    };
}

/// The single entry of the `config` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// One of [`policy`].
    pub policy: u32,
    /// The flip counter: its low bit is the half of `active` (and of `sticky`) the program
    /// reads. Every publish adds one, so a map entry that records it (a QUIC handshake in
    /// `pending`) tells which active set chose it.
    pub live_half: u32,
    /// First source port reserved for probe steering (0: off).
    pub probe_base: u32,
    /// Bits of [`config_flags`].
    pub flags: u32,
    /// Where `least-queue` finds a socket's queue depth in kernel memory (with
    /// [`config_flags::EXACT_QUEUE`]).
    pub queue: QueueOffsets,
    /// `least-queue`'s patience, in microseconds: a queue whose oldest connection has waited
    /// less than this (since the kernel sent its SYN-ACK) keeps up, and the round-robin
    /// candidate keeps its turn while its queue keeps up; only longer waits are compared by
    /// depth (0: every non-empty queue is compared). Read with exact depths only.
    pub queue_patience_us: u32,
    /// A UDP group's routing, one of [`udp::udp_mode`] (unused by TCP groups).
    pub udp_mode: u32,
}

/// Where the select program finds a candidate socket's queue depth in kernel memory: byte
/// offsets resolved by the supervisor from the kernel's BTF at load (the program has no CO-RE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueOffsets {
    /// `selected_sk` in `struct sk_reuseport_kern`, the kernel context the program's context
    /// points to: the socket the last `bpf_sk_select_reuseport` chose.
    pub selected_sk: u32,
    /// `sk_ack_backlog` in `struct sock`: established connections not accepted yet.
    pub ack_backlog: u32,
    /// `icsk_accept_queue.qlen` in `struct inet_connection_sock`: requests still in SYN_RECV.
    pub syn_recv: u32,
    /// `icsk_accept_queue.rskq_accept_head` in `struct inet_connection_sock`: the oldest
    /// established connection not accepted yet (a `struct request_sock *`).
    pub accept_head: u32,
    /// `snt_synack` in `struct tcp_request_sock`: when the kernel sent that connection's first
    /// SYN-ACK, in microseconds of `CLOCK_MONOTONIC` (`tcp_clock_us`).
    pub synack_sent: u32,
}

/// A slot's counters as ck reports them, summed over CPUs (and groups): `selected` from the
/// per-CPU `selected` map (one `u64` per slot, the only counter every connection writes: a
/// fleet's counts share a few cache lines), the others from the per-CPU `stats` map
/// ([`SlotEvents`], written on the rarer paths).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotStats {
    /// New connections (and migrated requests) sent to this slot.
    pub selected: u64,
    /// Requests re-homed to this slot from a closing listener.
    pub migrated: u64,
    /// Selections made while no slot was ready (fallback to a live, non-ready slot).
    pub fallbacks: u64,
    /// `bpf_sk_select_reuseport` failures for this slot (socket gone); at [`STATS_NO_SLOT`]:
    /// connections dropped because no slot could take them.
    pub errors: u64,
    /// Probe connections steered to this slot by their source port.
    pub probe_hits: u64,
}

impl SlotStats {
    /// Adds `other`'s counters to these (summing groups).
    pub fn add(&mut self, other: &SlotStats) {
        self.selected += other.selected;
        self.add_events(&other.events());
    }

    /// Adds one CPU's `stats` entry to these counters.
    pub fn add_events(&mut self, events: &SlotEvents) {
        self.migrated += events.migrated;
        self.fallbacks += events.fallbacks;
        self.errors += events.errors;
        self.probe_hits += events.probe_hits;
    }

    /// The counters kept in the `stats` map.
    pub fn events(&self) -> SlotEvents {
        SlotEvents {
            migrated: self.migrated,
            fallbacks: self.fallbacks,
            errors: self.errors,
            probe_hits: self.probe_hits,
        }
    }
}

/// Per-slot counters in the per-CPU `stats` map: what [`SlotStats`] holds but `selected`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotEvents {
    /// As [`SlotStats::migrated`].
    pub migrated: u64,
    /// As [`SlotStats::fallbacks`].
    pub fallbacks: u64,
    /// As [`SlotStats::errors`].
    pub errors: u64,
    /// As [`SlotStats::probe_hits`].
    pub probe_hits: u64,
}

/// The `conn_tags` socket-storage value: written by the supervisor on each listening socket of a
/// slot, copied by the kernel (`BPF_F_CLONE`) into every connection that listener creates, so the
/// `ck_conns` program knows which slot's `conns` counter an open connection belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnTag {
    /// The slot whose listener created the connection.
    pub slot: u32,
    /// [`CONN_COUNTED`] once the connection counts as open (0 on listeners).
    pub flags: u32,
}

/// Where the `ck_conns` program finds a connection's peer in kernel memory (`struct sock`, its
/// `sock_common`): byte offsets resolved by the supervisor from the kernel's BTF at load (the
/// program has no CO-RE), so that it can tell ck's own probe connections (from a port of the
/// probe range, on loopback) from clients' and leave them out of the open-connection counts.
/// All 0: not resolved (every connection counts).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerOffsets {
    /// `skc_dport`: the peer's port, network byte order (2 bytes).
    pub port: u32,
    /// `skc_family`: `AF_INET` or `AF_INET6` (2 bytes).
    pub family: u32,
    /// `skc_daddr`: an IPv4 peer's address (4 bytes).
    pub addr4: u32,
    /// `skc_v6_daddr`: an IPv6 peer's address (16 bytes).
    pub addr6: u32,
}

impl PeerOffsets {
    /// Not resolved.
    pub const UNKNOWN: PeerOffsets = PeerOffsets {
        port: 0,
        family: 0,
        addr4: 0,
        addr6: 0,
    };
}

/// `--adopt`: the group a `ck_tag_bind4`/`ck_tag_bind6` program tags binds for (the
/// `bind_group` map's one value, written by the supervisor before it attaches them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BindGroup {
    /// The group's port, host byte order.
    pub port: u16,
    /// The group's address family (`AF_INET` or `AF_INET6`), or 0 for any (the instance's
    /// only group on the port).
    pub family: u16,
}

/// The value of a cgroup in the `slot_cgroups` cgroup storage: which slot's listening sockets
/// are created there (a slot's cgroup of ck's own sockets, or with `--adopt` a worker's
/// cgroup), so that `ck_conns_ops`, attached there, counts their connections for it with no tag
/// on them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotCgroup {
    /// The slot + 1 (0, the kernel's initial value: not a slot's cgroup).
    pub slot_plus_one: u32,
    /// Only connections to this local port count (host byte order; 0: any, a slot's cgroup,
    /// which holds the group's sockets only). A worker's cgroup may hold other listeners.
    pub port: u16,
    /// With `port`, only connections of this address family count (`AF_INET`, `AF_INET6`;
    /// 0: either, the instance's only group on the port).
    pub family: u16,
}

/// [`ConnTag::flags`]: the connection is counted in `conns` (set on `SYN_RECV -> ESTABLISHED`,
/// cleared on `-> CLOSE`, so that no connection counts twice).
pub const CONN_COUNTED: u32 = 1;

/// Most connections the `moved` map tracks at once: established connections re-homed off a closing
/// listener (by socket cookie) that have not closed yet.
pub const MAX_MOVED_CONNS: u32 = 65536;

/// A connection re-homed from a closing listener while it waited in its accept queue (`moved`
/// map, keyed by the connection's socket cookie): its count moved from `from` to `to`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MovedConn {
    /// The slot whose listener created the connection (its [`ConnTag::slot`]).
    pub from: u32,
    /// The slot it was last re-homed to: its count belongs there until it closes.
    pub to: u32,
}

/// Ports `--adopt` workers may bind with `SO_REUSEPORT` added: at most this many.
pub const MAX_ADOPT_PORTS: u32 = 16;

/// What the `sock_ops` program reports when a process of the instance's cgroup starts to
/// listen (`--adopt`), in the `listens` ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenEvent {
    /// The socket's cookie (`SO_COOKIE`; sock_diag reports it too).
    pub cookie: u64,
    /// When it started listening (`CLOCK_MONOTONIC`, nanoseconds).
    pub ktime_ns: u64,
    /// Its local port (host byte order).
    pub port: u32,
    /// `AF_INET` or `AF_INET6`.
    pub family: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: each type is `#[repr(C)]`, `Copy`, made only of integers, with no padding bytes
    // (every field is a u32 or u64, and u64 fields come in a struct of u64 only).
    unsafe impl aya::Pod for super::SlotInfo {}
    // SAFETY: as above: u32 fields and an array of u32.
    unsafe impl aya::Pod for super::ActiveSet {}
    // SAFETY: as above: u32 fields, and a struct of u32 fields only.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above: u64 fields only.
    unsafe impl aya::Pod for super::SlotEvents {}
    // SAFETY: as above: two u64 then two u32 fields, 24 bytes, no padding.
    unsafe impl aya::Pod for super::ListenEvent {}
    // SAFETY: as above: two u32 fields.
    unsafe impl aya::Pod for super::ConnTag {}
    // SAFETY: as above: a u32 then two u16, no padding.
    unsafe impl aya::Pod for super::SlotCgroup {}
    // SAFETY: as above (two u16, no padding).
    unsafe impl aya::Pod for super::BindGroup {}
    // SAFETY: as above: two u32 fields.
    unsafe impl aya::Pod for super::MovedConn {}
    // SAFETY: as above: four u32 fields.
    unsafe impl aya::Pod for super::PeerOffsets {}
}
