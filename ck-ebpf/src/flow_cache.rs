//! `flow_cache`: a small direct-mapped cache in front of the `flows` table, read first for
//! every datagram of `flow` mode.
//!
//! Why: a table of 65,536 flows lives in vmalloc'd kernel memory (4 KiB pages), so at a light
//! datagram rate each lookup of the LRU hash misses the TLB and the cache twice or more (its
//! bucket, then its element): measured, that is most of the program's cost. The kernel
//! kmallocs a map of at most 32 KiB, in its direct map of huge pages: [`ENTRIES`] entries of 8
//! bytes stay below that, so a hit costs one cold line.
//!
//! The cache only remembers what the `flows` table decided (a flow's slot), so it never
//! contradicts it: an entry overwritten by another flow of the same index, or one whose socket
//! is gone (the selection fails), sends the datagram on to the `flows` table, which stays the
//! truth. An entry holds no generation, so a hit reads no `sock_gens` line: instead the
//! supervisor keeps every entry true to its socket. Before a slot takes a new socket, it
//! empties the slot's place in `sockets`, waits until every program run that could have seen
//! the old socket is over, and then empties the slot's entries (`BpfGroup::place`); a run
//! after that cannot write one for the slot until the new socket is in.
//!
//! It is not pinned: a new program (`ck upgrade`, a restarted ck) starts with an empty cache
//! and fills it from the table. A flow answered from the cache is not marked as used in the
//! LRU table, so under more flows than the table holds an active flow may age out of it like
//! an idle one (it then keeps its worker while its cache entry lasts).
use aya_ebpf::{btf_maps::Array, macros::btf_map};
use ck_common::udp::{FLOW_CACHE_ENTRIES as ENTRIES, FlowCacheEntry};

/// The flow's entry, by the low bits of its hash.
#[btf_map(name = "flow_cache")]
static FLOW_CACHE: Array<FlowCacheEntry, { ENTRIES as usize }> = Array::new();

/// The slot of the flow of `hash`, if the entry at its index is this flow's. No generation to
/// check: the supervisor empties a slot's entries before the slot takes a new socket.
#[inline(always)]
pub fn slot_of(hash: u32) -> Option<u32> {
    let entry = FLOW_CACHE.get_ptr(hash & (ENTRIES - 1))?;
    // SAFETY: an 8-byte aligned value of the map, valid for this run, read as one word.
    let bits = unsafe { core::ptr::read_volatile(entry.cast::<u64>()) };
    // SAFETY: `FlowCacheEntry` is 8 bytes of plain integers; every bit pattern is one.
    let entry: FlowCacheEntry = unsafe { core::mem::transmute(bits) };
    (entry.used != 0 && entry.hash == hash).then_some(u32::from(entry.slot))
}

/// Remembers that the flow of `hash` goes to `slot` (replacing whatever shared its index).
#[inline(always)]
pub fn put(hash: u32, slot: u32) {
    let Some(entry) = FLOW_CACHE.get_ptr_mut(hash & (ENTRIES - 1)) else {
        return;
    };
    let value = FlowCacheEntry {
        hash,
        slot: slot as u8,
        used: 1,
        reserved: 0,
    };
    // SAFETY: as in `slot_of`; a plain 8-byte struct becomes one word, written at once.
    unsafe { core::ptr::write_volatile(entry.cast::<u64>(), core::mem::transmute(value)) };
}
