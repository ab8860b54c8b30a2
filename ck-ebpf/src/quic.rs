//! `quic` mode of a UDP group: routing by the QUIC header (RFC 9000, 17; versions 1 and 2), so a
//! connection keeps its worker whatever the client's address:
//!
//! - a short-header packet, or a Handshake packet, goes to the slot its destination connection
//!   ID's cookie names (`ck_common::udp::cookie`: the worker chose that ID), while that slot's
//!   worker is the generation the cookie names and its socket is open;
//! - a client's Initial or 0-RTT packet (or one of a version ck does not know) goes where the
//!   first packet of its handshake went, by the original destination connection ID the client
//!   chose (`pending`), so every datagram of a ClientHello reaches one worker, also across a
//!   roll's flip; else by a cookie (a client that already has the server's connection ID);
//!   else it starts a handshake: the consistent table, remembered in `pending` with the flip
//!   counter of the active set that chose it and the time of its last datagram (a leaving
//!   worker is signalled once the handshakes it was given before its flip are done);
//! - a cookie or handshake whose slot is gone takes the new-flow path, counted `stale` (the
//!   worker it reaches can answer with a stateless reset).
use aya_ebpf::{
    EbpfContext as _,
    btf_maps::LruHashMap,
    helpers::{bpf_ktime_get_ns, bpf_skb_load_bytes},
    macros::btf_map,
    programs::SkReuseportContext,
};
use ck_common::{
    ActiveSet, MAX_SLOTS,
    udp::{Flow, Handshake, MAX_CID_LEN, MAX_PENDING, PendingKey, cookie, route},
};

use crate::{
    SLOT_INFO, SOCKETS,
    sock_addr::SOCK_GENS,
    udp::{choose, dropped, pass, still_given},
};

/// A handshake's original destination connection ID -> the slot its first packet went to, the
/// flip counter of the set that chose it, and when its last datagram came.
#[btf_map(name = "pending")]
static PENDING: LruHashMap<PendingKey, Handshake, { MAX_PENDING as usize }> = LruHashMap::new();

/// The UDP header's length: the QUIC packet starts after it.
const UDP_HEADER: u32 = 8;
/// QUIC version 1 (RFC 9000).
const V1: u32 = 1;
/// QUIC version 2 (RFC 9369), whose long-header packet types are numbered differently.
const V2: u32 = 0x6b33_43cf;
/// A long header's first octet, version, connection ID length and the longest connection ID.
const LONG_HEAD: usize = 1 + 4 + 1 + MAX_CID_LEN;

/// Routes one datagram of a `quic` group (the kernel's `hash` of its addresses and ports for the
/// new-flow path).
#[inline(always)]
pub fn select(ctx: &SkReuseportContext, hash: u32, set: &ActiveSet, half: u32) -> u32 {
    let mut short = [0u8; 4];
    if !load(ctx, &mut short) {
        return dropped(route::MALFORMED);
    }
    if short[0] & 0x80 == 0 {
        // Short header: the destination connection ID follows the first octet.
        return match cookie_slot(ctx, short[1], short[2], short[3]) {
            Some(slot) => pass(slot, route::COOKIE),
            None => new_flow(ctx, hash, set, half, None, route::STALE),
        };
    }
    let mut long = [0u8; LONG_HEAD];
    if !load(ctx, &mut long) {
        return dropped(route::MALFORMED);
    }
    let version = u32::from_be_bytes([long[1], long[2], long[3], long[4]]);
    let cid_len = long[5] as usize;
    if cid_len > MAX_CID_LEN {
        return dropped(route::MALFORMED);
    }
    let kind = (long[0] >> 4) & 3;
    let handshake = (version == V1 && kind == 2) || (version == V2 && kind == 3);
    if handshake {
        // The client has the server's connection ID by now: only the cookie can route it.
        return match cookie_slot(ctx, long[6], long[7], long[8]) {
            Some(slot) => pass(slot, route::COOKIE),
            None => new_flow(ctx, hash, set, half, None, route::STALE),
        };
    }
    let mut pending = PendingKey {
        len: cid_len as u32,
        cid: [0; MAX_CID_LEN],
    };
    let mut i = 0;
    while i < MAX_CID_LEN {
        if i < cid_len {
            pending.cid[i] = long[6 + i];
        }
        i += 1;
    }
    let mut stale = false;
    if let Some(handshake) = PENDING.get_ptr_mut(pending) {
        // SAFETY: a value of the map, valid for this run; a torn read names one slot or
        // another, both checked below.
        let flow = unsafe { (*handshake).to };
        if still_given(flow) && SOCKETS.select_reuseport(ctx, flow.slot).is_ok() {
            // SAFETY: as above; a racing write of another CPU stores a time just as recent.
            unsafe { (*handshake).seen_ns = bpf_ktime_get_ns() };
            return pass(flow.slot, route::PENDING);
        }
        stale = true;
    }
    if cid_len >= cookie::MIN_CID_LEN {
        if let Some(slot) = cookie_slot(ctx, long[6], long[7], long[8]) {
            return pass(slot, route::COOKIE);
        }
    }
    let route = if stale { route::STALE } else { route::NEW };
    new_flow(ctx, hash, set, half, Some(pending), route)
}

/// The slot a cookie (a connection ID's first three octets) names, its socket selected: only
/// while the slot's worker is the generation the cookie names.
#[inline(always)]
fn cookie_slot(ctx: &SkReuseportContext, first: u8, slot: u8, generation: u8) -> Option<u32> {
    let (slot, generation) = cookie::read(first, slot, generation)?;
    if slot >= MAX_SLOTS {
        return None;
    }
    let info = SLOT_INFO.get(slot)?;
    if info.generation as u8 != generation || info.pid == 0 {
        return None;
    }
    SOCKETS.select_reuseport(ctx, slot).ok()?;
    Some(slot)
}

/// A new handshake or a lost connection: the consistent table, the handshake remembered in
/// `pending` (by its original destination connection ID) when there is one.
#[inline(always)]
fn new_flow(
    ctx: &SkReuseportContext,
    hash: u32,
    set: &ActiveSet,
    half: u32,
    pending: Option<PendingKey>,
    route: usize,
) -> u32 {
    let Some(slot) = choose(ctx, hash, set, half) else {
        return dropped(route);
    };
    if let Some(pending) = pending {
        let generation = SOCK_GENS.get(slot).map_or(0, |g| *g);
        let handshake = Handshake {
            to: Flow { slot, generation },
            flip: half,
            reserved: 0,
            // SAFETY: a helper without arguments.
            seen_ns: unsafe { bpf_ktime_get_ns() },
        };
        // A full table evicts its least recently seen handshake.
        let _ = PENDING.insert(pending, handshake, 0);
    }
    pass(slot, route)
}

/// Reads the first `N` bytes of the QUIC packet (after the UDP header); false when the datagram
/// is shorter.
#[inline(always)]
fn load<const N: usize>(ctx: &SkReuseportContext, buf: &mut [u8; N]) -> bool {
    // SAFETY: the helper writes at most N bytes into `buf`, which is N bytes long.
    let rc =
        unsafe { bpf_skb_load_bytes(ctx.as_ptr(), UDP_HEADER, buf.as_mut_ptr().cast(), N as u32) };
    rc == 0
}
