//! The `sticky` policy's double-buffered Maglev table in one group's `sticky` map: computed
//! when the ready set changes, written to the idle half beside `active`, flipped with it.
use aya::maps::{Array, MapData};
use ck_common::{ActiveSet, sticky::StickyTable};

use super::{
    error::{BpfError, write_err},
    maglev::Maglev,
};

/// The `sticky` map's halves (`--policy sticky` only): the table is computed when the ready
/// set changes, and written to a half only when that half holds another set's table.
pub(super) struct Sticky {
    map: Array<MapData, StickyTable>,
    /// The table of the latest ready set.
    built: Option<Maglev>,
    /// The set each half's table was built for (`None`: not known to this image).
    halves: [Option<Vec<u32>>; 2],
}

impl Sticky {
    /// The halves of `map`, neither known to hold a table yet.
    pub(super) fn new(map: Array<MapData, StickyTable>) -> Sticky {
        Sticky {
            map,
            built: None,
            halves: [None, None],
        }
    }

    /// Writes the table of the empty set (no slot) to both halves of a fresh map, which the
    /// kernel created zeroed (slot 0 everywhere), so that `ck maps` never shows a table that
    /// was not published.
    pub(super) fn clear(&mut self) -> Result<(), BpfError> {
        for half in 0..2 {
            self.map
                .set(half, StickyTable::EMPTY, 0)
                .map_err(write_err("sticky"))?;
            self.halves[half as usize] = Some(Vec::new());
        }
        Ok(())
    }

    /// The table the kernel holds in half `half` (None: unreadable).
    pub(super) fn read(&self, half: u32) -> Option<StickyTable> {
        self.map.get(&(half & 1), 0).ok()
    }

    /// Writes the table of `set`'s ready slots to half `half`, unless it holds it already.
    pub(super) fn write(
        &mut self,
        half: u32,
        set: &ActiveSet,
        weighted: bool,
    ) -> Result<(), BpfError> {
        let mut ready = set.slots[..(set.ready_len as usize).min(set.slots.len())].to_vec();
        ready.sort_unstable();
        if !weighted {
            ready.dedup();
        }
        let half_set = &mut self.halves[(half & 1) as usize];
        if half_set.as_deref() == Some(ready.as_slice()) {
            return Ok(());
        }
        let table = match &self.built {
            Some(table) if table.slots() == ready => table,
            _ => {
                let started = std::time::Instant::now();
                let table = Maglev::build_listed(ready.clone());
                tracing::debug!(
                    slots = ?ready,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "sticky table computed"
                );
                self.built.insert(table)
            }
        };
        // Forget the half first: if the write fails, the next publish writes it again.
        *half_set = None;
        self.map
            .set(half & 1, table.table(), 0)
            .map_err(write_err("sticky"))?;
        *half_set = Some(ready);
        Ok(())
    }
}
