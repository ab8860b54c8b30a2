//! A UDP group's own maps: the per-slot datagram counters by route (`udp_stats`, per CPU), the
//! flow table (`flows`) and the QUIC handshakes (`pending`), read for `ck status`, `ck maps`,
//! `/metrics` and a leaving worker's wait.
use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuValues};
use ck_common::{
    STATS_NO_SLOT,
    udp::{FlowKey, FlowValue, Handshake, PendingKey, UdpStats},
};

use super::{error::BpfError, object::take};

/// The maps only a UDP group's program uses.
pub struct UdpMaps {
    stats: PerCpuArray<MapData, UdpStats>,
    flows: HashMap<MapData, FlowKey, FlowValue>,
    pending: HashMap<MapData, PendingKey, Handshake>,
}

impl UdpMaps {
    /// Takes the group's `udp_stats`, `flows` and `pending` out of its loaded object.
    pub(super) fn take(ebpf: &mut aya::Ebpf) -> Result<UdpMaps, BpfError> {
        Ok(UdpMaps {
            stats: take(ebpf, "udp_stats")?,
            flows: take(ebpf, "flows")?,
            pending: take(ebpf, "pending")?,
        })
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

    /// When the last datagram came (`CLOCK_MONOTONIC` ns) of the handshakes in `pending` given
    /// to `slot`'s socket of generation `generation` by an active set older than flip `flip`
    /// (None: by any); None when there is none.
    pub fn last_handshake(&self, slot: u32, generation: u32, flip: Option<u32>) -> Option<u64> {
        self.pending
            .iter()
            .flatten()
            .map(|(_, handshake)| handshake)
            .filter(|h| h.to.slot == slot && h.to.generation == generation)
            .filter(|h| flip.is_none_or(|flip| super::flips::before(h.flip, flip)))
            .map(|h| h.seen_ns)
            .max()
    }

    /// Every remembered flow (`ck maps`).
    pub fn flows(&self) -> Vec<(FlowKey, FlowValue)> {
        self.flows.iter().flatten().collect()
    }
}
