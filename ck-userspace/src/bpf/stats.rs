//! The program's per-slot counters, per CPU: `selected` (one `u64` per slot) and the rarer
//! events in `stats` ([`SlotEvents`]), summed into a [`SlotStats`] and zeroed for a group's
//! loaded program, and the pinned maps opened on their own while `ck upgrade` loads its
//! program.
use aya::maps::{MapData, PerCpuArray, PerCpuValues};
use ck_common::{MAX_SLOTS, STATS_NO_SLOT, SlotEvents, SlotStats};

use super::{error::BpfError, pins};

/// A group's two counter maps.
pub(super) struct Counters {
    /// `stats`: slot (and [`STATS_NO_SLOT`]) -> this CPU's [`SlotEvents`].
    pub(super) events: PerCpuArray<MapData, SlotEvents>,
    /// `selected`: slot -> this CPU's count of connections sent to it.
    pub(super) selected: PerCpuArray<MapData, u64>,
}

impl Counters {
    /// A slot's counters summed over CPUs (zero for an index past [`STATS_NO_SLOT`]; no
    /// `selected` at [`STATS_NO_SLOT`]).
    pub(super) fn sum(&self, slot: u32) -> SlotStats {
        if slot > STATS_NO_SLOT {
            return SlotStats::default();
        }
        let events = self.events.get(&slot, 0).ok();
        let selected = (slot < MAX_SLOTS)
            .then(|| self.selected.get(&slot, 0).ok())
            .flatten();
        summed(
            events.as_ref().map(|v| &v[..]),
            selected.as_ref().map(|v| &v[..]),
        )
    }

    /// Zeroes a slot's counters on every CPU.
    pub(super) fn reset(&mut self, slot: u32) {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        if let Ok(zero) = PerCpuValues::try_from(vec![SlotEvents::default(); cpus]) {
            let _ = self.events.set(slot, zero, 0);
        }
        if let Ok(zero) = PerCpuValues::try_from(vec![0u64; cpus]) {
            let _ = self.selected.set(slot, zero, 0);
        }
    }
}

/// One slot's counters from its per-CPU values: `stats` and `selected` as read (None: not read,
/// or no `selected` entry, as at [`STATS_NO_SLOT`]).
pub(super) fn summed(events: Option<&[SlotEvents]>, selected: Option<&[u64]>) -> SlotStats {
    let mut total = SlotStats::default();
    events
        .unwrap_or_default()
        .iter()
        .for_each(|v| total.add_events(v));
    total.selected = selected.unwrap_or_default().iter().sum();
    total
}

/// A group's pinned counter maps opened on their own (`ck upgrade`: the counters the new image
/// reports while it loads its program, so they go on from the old image's).
pub struct PinnedStats(Counters);

impl PinnedStats {
    /// Opens the `stats` and `selected` maps pinned for group `group` of instance `name`.
    pub fn open(name: &str, group: &str) -> Result<PinnedStats, BpfError> {
        Ok(PinnedStats(Counters {
            events: open_pinned(name, group, "stats")?,
            selected: open_pinned(name, group, "selected")?,
        }))
    }

    /// A slot's counters summed over CPUs.
    pub fn stats(&self, slot: u32) -> SlotStats {
        self.0.sum(slot)
    }
}

/// The per-CPU array `map` pinned for group `group` of instance `name`.
fn open_pinned<V: aya::Pod>(
    name: &str,
    group: &str,
    map: &str,
) -> Result<PerCpuArray<MapData, V>, BpfError> {
    let path = pins::group_dir(name, group).join(map);
    let pin_err = |e: &dyn std::fmt::Display| BpfError::Pin {
        what: "opening the pinned map",
        path: path.display().to_string(),
        error: std::io::Error::other(e.to_string()),
        advice: String::new(),
    };
    let data = MapData::from_pin(&path).map_err(|e| pin_err(&e))?;
    PerCpuArray::try_from(aya::maps::Map::PerCpuArray(data)).map_err(|e| pin_err(&e))
}
