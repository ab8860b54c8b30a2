//! The program of UDP groups, `ck_select_udp`: the kernel runs it for every datagram (not once per
//! connection), so a flow keeps its worker only if the program remembers it. In order, each
//! outcome counted under one route (`udp_stats`):
//!
//! 1. a probe or the steering canary, from loopback and a probe port: to the slot its port
//!    names (as for TCP);
//! 2. `stateless` mode: the consistent table, nothing remembered; `quic` mode: by the QUIC
//!    header (`quic`);
//! 3. a known flow (the kernel's hash of its addresses and ports in `flows`, looked up first in
//!    the small `flow_cache`, see `flow_cache.rs`) whose slot still has the socket it was given
//!    to (same `sock_gens` generation): to that slot, ready or not (a retired worker keeps its
//!    flows until its socket closes);
//! 4. a new flow, or one whose slot is gone (counted `stale`): the consistent table (the
//!    `sticky` Maglev table of the ready slots, by the same hash), else the live slots in
//!    turn; remembered in `flows` (and the cache) with the client's address and port (for
//!    people: routing reads only the hash, which the kernel computed already, so a known flow
//!    costs no helper call).
//!
//! Never the kernel's hash: a datagram no slot can take is dropped and counted.
use aya_ebpf::{
    Global,
    bindings::sk_action::{SK_DROP, SK_PASS},
    btf_maps::{LruHashMap, PerCpuArray},
    macros::{btf_map, sk_reuseport},
    programs::SkReuseportContext,
};
use ck_common::{
    ActiveSet, MAX_SELECT_TRIES, MAX_SLOTS, STATS_NO_SLOT,
    sticky::{self, NO_SLOT},
    udp::{Client, Flow, FlowKey, FlowValue, MAX_FLOWS, UdpStats, route, udp_mode},
};

use crate::{
    ACTIVE, CONFIG, SLOTS, SOCKETS, STICKY, flow_cache,
    probe::{CK_PROBE_BASE, probe_slot},
    sock_addr::SOCK_GENS,
    source_address,
};

/// The kernel's hash of a flow's addresses and ports -> the slot it goes to and its client
/// (`flow` mode).
#[btf_map(name = "flows")]
static FLOWS: LruHashMap<FlowKey, FlowValue, { MAX_FLOWS as usize }> = LruHashMap::new();

/// Per-slot datagram counters by route; index `STATS_NO_SLOT` counts datagrams no slot took.
#[btf_map(name = "udp_stats")]
static UDP_STATS: PerCpuArray<UdpStats, { SLOTS + 1 }> = PerCpuArray::new();

/// The group's `--udp-mode` (a [`udp_mode`] code), set when ck loads the program. Read-only
/// data, known to the verifier: it drops the other modes' code, and a datagram reads no map to
/// learn its mode (`config.udp_mode` holds the same code, for people).
#[unsafe(no_mangle)]
static CK_UDP_MODE: Global<u32> = Global::new(0);

#[sk_reuseport]
pub fn ck_select_udp(ctx: SkReuseportContext) -> u32 {
    select(&ctx)
}

#[inline(always)]
fn select(ctx: &SkReuseportContext) -> u32 {
    let probe_base = CK_PROBE_BASE.load();
    if probe_base != 0 {
        if let Some(slot) = probe_slot(ctx, probe_base) {
            // The canary asks for slot 127, which has no socket: counted and dropped here.
            let done = crate::SOCKETS.select_reuseport(ctx, slot).is_ok();
            count(if done { slot } else { STATS_NO_SLOT }, route::PROBE);
            return if done { SK_PASS } else { SK_DROP };
        }
    }
    let hash = ctx.hash();
    let mode = CK_UDP_MODE.load();
    if mode == udp_mode::FLOW {
        return select_flow(ctx, hash);
    }
    let Some(config) = CONFIG.get(0) else {
        return SK_DROP;
    };
    let Some(set) = ACTIVE.get(config.live_half & 1) else {
        return SK_DROP;
    };
    if mode == udp_mode::QUIC {
        return crate::quic::select(ctx, hash, set, config.live_half);
    }
    // Any other mode value is stateless (the supervisor writes only these three).
    match choose(ctx, hash, set, config.live_half) {
        Some(slot) => pass(slot, route::STATELESS),
        None => dropped(route::STATELESS),
    }
}

/// `flow` mode: a known flow to its slot (the small cache first, then the `flows` table), else
/// a new one by the consistent table, remembered in both. The configuration and the active set
/// are read only for new flows: a known flow's datagram touches as few cache lines as it can.
#[inline(always)]
fn select_flow(ctx: &SkReuseportContext, hash: u32) -> u32 {
    if let Some(slot) = flow_cache::slot_of(hash) {
        if SOCKETS.select_reuseport(ctx, slot).is_ok() {
            return pass(slot, route::FLOW);
        }
    }
    let key = FlowKey { hash };
    let mut new_route = route::NEW;
    if let Some(flow) = FLOWS.get_ptr(key) {
        // SAFETY: a value of the map, valid for this run; a torn read (another CPU updating
        // the flow) names one slot or the other, both of which the checks below accept.
        let flow = unsafe { (*flow).to };
        if still_given(flow) && SOCKETS.select_reuseport(ctx, flow.slot).is_ok() {
            flow_cache::put(hash, flow);
            return pass(flow.slot, route::FLOW);
        }
        new_route = route::STALE;
    }
    let Some(half) = CONFIG.get(0).map(|c| c.live_half) else {
        return dropped(new_route);
    };
    let Some(set) = ACTIVE.get(half & 1) else {
        return dropped(new_route);
    };
    let Some(client) = client_of(ctx) else {
        count(STATS_NO_SLOT, route::MALFORMED);
        return SK_DROP;
    };
    let Some(slot) = choose(ctx, hash, set, half) else {
        return dropped(new_route);
    };
    let generation = SOCK_GENS.get(slot).map_or(0, |g| *g);
    let value = FlowValue {
        to: Flow { slot, generation },
        client,
    };
    // A full table evicts its least recently seen flow; an error leaves the flow unremembered
    // (its next datagram is a new flow again, on the same consistent table).
    let _ = FLOWS.insert(key, value, 0);
    flow_cache::put(hash, value.to);
    pass(slot, new_route)
}

/// Whether the flow's slot still has the socket the flow was given to.
#[inline(always)]
pub(crate) fn still_given(flow: Flow) -> bool {
    flow.slot < MAX_SLOTS
        && SOCK_GENS
            .get(flow.slot)
            .is_some_and(|g| *g == flow.generation)
}

/// Selects a slot for a new flow (the kernel's `hash` of its addresses and ports) and selects
/// its socket: the consistent table's slot for the flow, else the live slots in turn from its
/// position (at most [`MAX_SELECT_TRIES`]).
#[inline(always)]
pub(crate) fn choose(
    ctx: &SkReuseportContext,
    hash: u32,
    set: &ActiveSet,
    half: u32,
) -> Option<u32> {
    let pos = sticky::hash_position(hash);
    if set.ready_len > 0 {
        if let Some(table) = STICKY.get(half & 1) {
            // Always true (a multiply-shift onto the table): kept so the verifier sees it.
            if (pos as usize) < sticky::TABLE_SIZE {
                let slot = u32::from(table.slots[pos as usize]);
                if slot != u32::from(NO_SLOT)
                    && slot < MAX_SLOTS
                    && SOCKETS.select_reuseport(ctx, slot).is_ok()
                {
                    return Some(slot);
                }
            }
        }
    }
    // No ready slot, or its socket just closed: the live ones (ready first) in turn.
    let len = set.live_len;
    if len == 0 {
        return None;
    }
    // The flow's table position scaled onto [0, len] by a multiply and a shift (no divide).
    let first = ((u64::from(pos) * u64::from(len)) >> 16) as u32;
    let tries = if len < MAX_SELECT_TRIES {
        len
    } else {
        MAX_SELECT_TRIES
    };
    let mut i = 0;
    while i < tries {
        let mut at = first + i;
        // first <= len and i < len: subtractions wrap it (first == len only at the table's last
        // position).
        if at >= len {
            at -= len;
        }
        if at >= len {
            at -= len;
        }
        let at = at as usize;
        if at >= SLOTS {
            break;
        }
        let slot = set.slots[at];
        if slot < MAX_SLOTS && SOCKETS.select_reuseport(ctx, slot).is_ok() {
            return Some(slot);
        }
        i += 1;
    }
    None
}

/// The datagram's client: its source address (IP header) and source port (the UDP header's
/// first field, where the context's data starts).
#[inline(always)]
fn client_of(ctx: &SkReuseportContext) -> Option<Client> {
    let (addr, v6) = source_address(ctx)?;
    let data = ctx.data();
    if data + 2 > ctx.data_end() {
        return None;
    }
    // SAFETY: the two bytes lie within [data, data_end), checked above (and by the verifier).
    let port = unsafe { core::ptr::read_unaligned(data as *const u16) };
    Some(Client {
        addr,
        port,
        v6: u16::from(v6),
    })
}

/// Counts the datagram under `route` at `slot` and lets the kernel deliver it there.
#[inline(always)]
pub(crate) fn pass(slot: u32, route: usize) -> u32 {
    count(slot, route);
    SK_PASS
}

/// Counts a datagram no slot could take under `route` and drops it.
#[inline(always)]
pub(crate) fn dropped(route: usize) -> u32 {
    count(STATS_NO_SLOT, route);
    SK_DROP
}

/// Adds one to `slot`'s counter of `route`.
#[inline(always)]
fn count(slot: u32, route: usize) {
    if route >= route::COUNT {
        return;
    }
    if let Some(stats) = UDP_STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
        unsafe { (*stats).routes[route] += 1 };
    }
}
