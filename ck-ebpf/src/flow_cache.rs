//! `flow_cache`: a small direct-mapped cache in front of the `flows` table, read first for
//! every datagram of `flow` mode.
//!
//! Why: a table of 65,536 flows lives in vmalloc'd kernel memory (4 KiB pages), so at a light
//! datagram rate each lookup of the LRU hash misses the TLB and the cache twice or more (its
//! bucket, then its element): measured, that is most of the program's cost. The kernel
//! kmallocs a map of at most 32 KiB, in its direct map of huge pages: [`ENTRIES`] entries of 8
//! bytes stay below that, so a hit costs about what a lookup of the small `sock_gens` does.
//!
//! The cache only remembers what the `flows` table decided (a flow's slot and the generation of
//! that slot's socket), so it never contradicts it: an entry overwritten by another flow of the
//! same index, or one whose socket is gone, sends the datagram on to the `flows` table, which
//! stays the truth. It is not pinned: a new program (`ck upgrade`, a restarted ck) starts with
//! an empty cache and fills it from the table. A flow answered from the cache is not marked as
//! used in the LRU table, so under more flows than the table holds an active flow may age out
//! of it like an idle one (it then keeps its worker while its cache entry lasts).
use aya_ebpf::{btf_maps::Array, macros::btf_map};
use ck_common::udp::Flow;

/// Entries: a power of two, [`ENTRIES`] x 8 bytes plus the map's header under 32 KiB.
pub const ENTRIES: u32 = 2048;

/// One remembered flow, read and written as one 8-byte word so that a reader never sees half
/// of another CPU's write.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct FlowCacheEntry {
    /// The kernel's hash of the flow's addresses and ports (`FlowKey::hash`).
    pub hash: u32,
    /// The flow's slot.
    pub slot: u8,
    /// 1 in an entry written by the program; 0 in an empty one.
    pub used: u8,
    /// The low 16 bits of `sock_gens[slot]` when the flow was given to the slot.
    pub generation: u16,
}

/// The flow's entry, by the low bits of its hash.
#[btf_map(name = "flow_cache")]
static FLOW_CACHE: Array<FlowCacheEntry, { ENTRIES as usize }> = Array::new();

/// The slot of the flow of `hash`, if the entry at its index is this flow's and its slot still
/// has the socket the flow was given to (the low 16 bits of `sock_gens[slot]` unchanged).
#[inline(always)]
pub fn slot_of(hash: u32) -> Option<u32> {
    let entry = FLOW_CACHE.get_ptr(hash & (ENTRIES - 1))?;
    // SAFETY: an 8-byte aligned value of the map, valid for this run, read as one word.
    let bits = unsafe { core::ptr::read_volatile(entry.cast::<u64>()) };
    // SAFETY: `FlowCacheEntry` is 8 bytes of plain integers; every bit pattern is one.
    let entry: FlowCacheEntry = unsafe { core::mem::transmute(bits) };
    if entry.used == 0 || entry.hash != hash {
        return None;
    }
    let slot = u32::from(entry.slot);
    let generation = crate::sock_addr::SOCK_GENS.get(slot)?;
    (*generation as u16 == entry.generation).then_some(slot)
}

/// Remembers that the flow of `hash` goes to `flow` (replacing whatever shared its index).
#[inline(always)]
pub fn put(hash: u32, flow: Flow) {
    let Some(entry) = FLOW_CACHE.get_ptr_mut(hash & (ENTRIES - 1)) else {
        return;
    };
    let value = FlowCacheEntry {
        hash,
        slot: flow.slot as u8,
        used: 1,
        generation: flow.generation as u16,
    };
    // SAFETY: as in `slot_of`; a plain 8-byte struct becomes one word, written at once.
    unsafe { core::ptr::write_volatile(entry.cast::<u64>(), core::mem::transmute(value)) };
}
