//! What `ck maps` prints: an instance's maps decoded, one serialisable type per map.
use ck_common::SlotStats;
use serde::{Deserialize, Serialize};

/// Every group's maps of one instance.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct InstanceMaps {
    /// The instance.
    pub instance: String,
    /// Its pin directory.
    pub pins: String,
    /// One entry per listen group.
    pub groups: Vec<GroupMaps>,
}

/// One group's maps, decoded.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupMaps {
    /// The group (`tcp4-8080`).
    pub group: String,
    /// Its pin directory.
    pub dir: String,
    /// Every map pinned there, as the kernel describes it.
    pub maps: Vec<MapMeta>,
    /// `config`.
    pub config: ConfigEntry,
    /// `active`: both halves, the live one first.
    pub active: ActiveEntry,
    /// `slots`: every record in use (state, pid or generation not zero), by slot.
    pub slots: Vec<SlotEntry>,
    /// `stats` and `selected`, summed over CPUs: every slot with a record or a non-zero
    /// counter.
    pub stats: Vec<StatsEntry>,
    /// `stats[128]`: `errors` counts connections no slot could take.
    pub no_slot: Counters,
    /// `cursor`: the round-robin cursor of each CPU.
    pub cursor: Vec<u32>,
    /// `sockets`: what userspace can read of it.
    pub sockets: String,
    /// `sticky`: each half's table, summarised.
    pub sticky: StickyEntry,
    /// `conns`, summed over CPUs: open connections of every slot with a record or a count.
    #[serde(default)]
    pub conns: Vec<ConnsEntry>,
    /// `listeners`: (socket cookie, slot) of each tagged listening socket, by cookie.
    #[serde(default)]
    pub listeners: Vec<(u64, u32)>,
    /// `moved`: established connections re-homed off a closing listener and still open.
    #[serde(default)]
    pub moved: usize,
    /// `conn_tags`: what userspace can read of it.
    #[serde(default)]
    pub conn_tags: String,
    /// A UDP group's `udp_stats` and `flows` (None: a TCP group).
    #[serde(default)]
    pub udp: Option<super::UdpEntry>,
}

/// The `sticky` map (the `sticky` policy's Maglev table, 65537 positions per half),
/// summarised as how many positions each slot holds.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StickyEntry {
    /// Whether the program reads it (`--policy sticky`); otherwise it is never written and
    /// both halves are shown empty.
    pub used: bool,
    /// The half the program reads (`config`'s live half, as for `active`).
    pub live: Vec<SlotShare>,
    /// The other half.
    pub idle: Vec<SlotShare>,
}

/// How many positions of a `sticky` table name one slot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct SlotShare {
    /// The slot.
    pub slot: u32,
    /// Positions naming it.
    pub entries: u32,
}

/// One slot's open connections in `conns`, summed over CPUs.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnsEntry {
    /// The slot.
    pub slot: u32,
    /// Open connections its listeners created (signed per CPU: the sum is the count).
    pub open: i64,
}

/// A pinned map as the kernel describes it (`bpftool map show`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MapMeta {
    /// Its pin's file name.
    pub name: String,
    /// The kernel's map id.
    pub id: u32,
    /// Its type, as bpftool names it (`array`, `percpu_array`, `reuseport_sockarray`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Entries.
    pub max_entries: u32,
}

/// The `config` entry.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConfigEntry {
    /// The policy's word (`round-robin`), or `unknown(N)`.
    pub policy: String,
    /// The half of `active` the program reads.
    pub live_half: u32,
    /// First probe source port (0: off).
    pub probe_base: u32,
    /// Bits of `ck_common::config_flags` (1: least-queue reads exact queue depths).
    pub flags: u32,
    /// Byte offsets of the exact queue depth's fields in kernel memory: `selected_sk` in
    /// `struct sk_reuseport_kern`, `sk_ack_backlog` in `struct sock`, and
    /// `icsk_accept_queue.qlen` (SYN_RECV) and `icsk_accept_queue.rskq_accept_head` in
    /// `struct inet_connection_sock`, and `snt_synack` in `struct tcp_request_sock` (0: not
    /// set).
    #[serde(default)]
    pub queue_offsets: [u32; 5],
    /// `least-queue`'s patience in microseconds (0: every non-empty queue is compared).
    #[serde(default)]
    pub queue_patience_us: u32,
}

/// The `active` map.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActiveEntry {
    /// The half the program reads (from `config`).
    pub live_half: u32,
    /// That half.
    pub live: ActiveHalf,
    /// The other half (the previous set, overwritten by the next publish).
    pub idle: ActiveHalf,
}

/// One half of `active`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ActiveHalf {
    /// `slots[..ready_len]`: the slots the policy chooses from.
    pub ready: Vec<u32>,
    /// `slots[ready_len..live_len]`: chosen only while nothing is ready.
    pub fallback: Vec<u32>,
}

/// One record of `slots`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotEntry {
    /// The slot.
    pub slot: u32,
    /// The state's word (`ready`), or `unknown(N)`.
    pub state: String,
    /// The worker's pid (0: none).
    pub pid: u32,
    /// Workers started on the slot.
    pub generation: u32,
    /// Times the slot is listed in the ready list: 1, or while it ramps up with
    /// `--slow-start` its weight (a warm slot's is the most).
    pub weight: u32,
    /// Accept-queue depth last sampled.
    pub queue_depth: u32,
    /// Reserved.
    pub flags: u32,
}

/// One slot's counters in `stats` and `selected`, summed over CPUs.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatsEntry {
    /// The slot.
    pub slot: u32,
    /// The counters.
    #[serde(flatten)]
    pub counters: Counters,
}

/// The counters of one slot, summed over CPUs (`SlotStats`, by name): `selected` from the
/// `selected` map, the others from `stats`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Counters {
    /// New connections (and migrated requests) sent to the slot.
    pub selected: u64,
    /// Requests re-homed to the slot from a closing listener.
    pub migrated: u64,
    /// Selections made while no slot was ready.
    pub fallbacks: u64,
    /// Selections that failed (socket gone); for `no_slot`, connections dropped.
    pub errors: u64,
    /// Probe connections steered to the slot.
    pub probe_hits: u64,
}

impl From<SlotStats> for Counters {
    fn from(s: SlotStats) -> Counters {
        Counters {
            selected: s.selected,
            migrated: s.migrated,
            fallbacks: s.fallbacks,
            errors: s.errors,
            probe_hits: s.probe_hits,
        }
    }
}
