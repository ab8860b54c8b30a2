//! A UDP group's own maps: the per-slot datagram counters by route (`udp_stats`, per CPU) and
//! the flow table (`flows`), read for `ck status`, `ck maps` and `/metrics`; and the flow
//! cache (`flow_cache`), emptied of a slot's entries before the slot takes a new socket.
use std::collections::BTreeMap;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, PerCpuValues};
use ck_common::{
    MAX_SLOTS, STATS_NO_SLOT,
    udp::{Flow, FlowCacheEntry, FlowKey, FlowValue, PendingKey, UdpStats},
};

use super::{BpfError, group::take};

const _: () = assert!(
    MAX_SLOTS <= u128::BITS,
    "UdpMaps::cached has a bit per slot"
);

/// The maps only a UDP group's program uses.
pub struct UdpMaps {
    stats: PerCpuArray<MapData, UdpStats>,
    flows: HashMap<MapData, FlowKey, FlowValue>,
    pending: HashMap<MapData, PendingKey, Flow>,
    /// `flow` mode's small cache in front of `flows` (one unused entry in other modes).
    flow_cache: Array<MapData, FlowCacheEntry>,
    /// Slots (a bit each) that had a socket in `sockets` since the program was loaded: the
    /// cache may name them (`flow` mode only; always empty in other modes).
    cached: u128,
    /// `flow` mode: the program reads `flow_cache`.
    flow_mode: bool,
}

impl UdpMaps {
    /// Takes the group's own maps out of its loaded object (`flow_mode`: a `flow` mode group).
    pub(super) fn take(ebpf: &mut aya::Ebpf, flow_mode: bool) -> Result<UdpMaps, BpfError> {
        Ok(UdpMaps {
            stats: take(ebpf, "udp_stats")?,
            flows: take(ebpf, "flows")?,
            pending: take(ebpf, "pending")?,
            flow_cache: take(ebpf, "flow_cache")?,
            cached: 0,
            flow_mode,
        })
    }

    /// Whether `flow_cache` may hold entries for `slot`'s socket: one that was in `sockets`
    /// since the program was loaded.
    pub(super) fn may_cache(&self, slot: u32) -> bool {
        self.flow_mode && slot < MAX_SLOTS && self.cached & (1 << slot) != 0
    }

    /// `slot` holds a socket in `sockets`: the program may remember flows for it from now on.
    pub(super) fn socket_in(&mut self, slot: u32) {
        if self.flow_mode && slot < MAX_SLOTS {
            self.cached |= 1 << slot;
        }
    }

    /// Empties every `flow_cache` entry that names `slot`; returns how many there were. The
    /// program trusts an entry without checking the slot's socket generation, so call it only
    /// once no program run can still write one for the slot's old socket (see
    /// `BpfGroup::place`).
    pub(super) fn forget_cached(&mut self, slot: u32) -> Result<usize, BpfError> {
        let mut forgotten = 0;
        for index in 0..self.flow_cache.len() {
            let entry = self
                .flow_cache
                .get(&index, 0)
                .map_err(super::group::write_err("flow_cache"))?;
            if entry.used != 0 && u32::from(entry.slot) == slot {
                self.flow_cache
                    .set(index, FlowCacheEntry::default(), 0)
                    .map_err(super::group::write_err("flow_cache"))?;
                forgotten += 1;
            }
        }
        Ok(forgotten)
    }

    /// `slot`'s datagrams by route, summed over CPUs (`STATS_NO_SLOT`: those no slot took).
    pub fn stats(&self, slot: u32) -> UdpStats {
        let mut total = UdpStats::default();
        if slot > STATS_NO_SLOT {
            return total;
        }
        if let Ok(values) = self.stats.get(&slot, 0) {
            for v in values.iter() {
                total.add(v);
            }
        }
        total
    }

    /// Zeroes `slot`'s counters on every CPU (a slot forgotten).
    pub fn reset(&mut self, slot: u32) {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        if let Ok(zero) = PerCpuValues::try_from(vec![UdpStats::default(); cpus]) {
            let _ = self.stats.set(slot, zero, 0);
        }
    }

    /// Remembered flows per slot (an LRU table: flows whose slot is gone stay until evicted or
    /// seen again).
    pub fn flows_per_slot(&self) -> BTreeMap<u32, u64> {
        let mut per_slot = BTreeMap::new();
        for (_, flow) in self.flows.iter().flatten() {
            *per_slot.entry(flow.to.slot).or_insert(0) += 1;
        }
        per_slot
    }

    /// QUIC handshakes remembered in `pending` (`quic` mode).
    pub fn pending(&self) -> u64 {
        self.pending.keys().filter(Result::is_ok).count() as u64
    }

    /// Every remembered flow (`ck maps`).
    pub fn flows(&self) -> Vec<(FlowKey, FlowValue)> {
        self.flows.iter().flatten().collect()
    }
}
