//! The program's per-slot counters (`stats`, per CPU): summed and zeroed for a group's loaded
//! program, and the pinned map opened on its own while `ck upgrade` loads its program.
use aya::maps::{MapData, PerCpuArray, PerCpuValues};
use ck_common::{STATS_NO_SLOT, SlotStats};

use super::{error::BpfError, pins};

/// A slot's counters summed over CPUs (zero for an index past [`STATS_NO_SLOT`]).
pub(super) fn sum(map: &PerCpuArray<MapData, SlotStats>, slot: u32) -> SlotStats {
    let mut total = SlotStats::default();
    if slot > STATS_NO_SLOT {
        return total;
    }
    if let Ok(values) = map.get(&slot, 0) {
        for v in values.iter() {
            total.add(v);
        }
    }
    total
}

/// Zeroes a slot's counters on every CPU.
pub(super) fn reset(map: &mut PerCpuArray<MapData, SlotStats>, slot: u32) {
    let cpus = aya::util::nr_cpus().unwrap_or(1);
    if let Ok(zero) = PerCpuValues::try_from(vec![SlotStats::default(); cpus]) {
        let _ = map.set(slot, zero, 0);
    }
}

/// A group's pinned `stats` map opened on its own (`ck upgrade`: the counters the new image
/// reports while it loads its program, so they go on from the old image's).
pub struct PinnedStats(PerCpuArray<MapData, SlotStats>);

impl PinnedStats {
    /// Opens the `stats` map pinned for group `group` of instance `name`.
    pub fn open(name: &str, group: &str) -> Result<PinnedStats, BpfError> {
        let path = pins::group_dir(name, group).join("stats");
        let pin_err = |e: &dyn std::fmt::Display| BpfError::Pin {
            what: "opening the pinned map",
            path: path.display().to_string(),
            error: std::io::Error::other(e.to_string()),
            advice: String::new(),
        };
        let data = MapData::from_pin(&path).map_err(|e| pin_err(&e))?;
        let map = aya::maps::Map::PerCpuArray(data);
        PerCpuArray::try_from(map)
            .map(PinnedStats)
            .map_err(|e| pin_err(&e))
    }

    /// A slot's counters summed over CPUs.
    pub fn stats(&self, slot: u32) -> SlotStats {
        sum(&self.0, slot)
    }
}
