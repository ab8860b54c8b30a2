//! Keeping the BPF maps true to the fleet: the active set (ready slots, then the fallback) and
//! every slot record, written to every group's maps. Called only by the executor.
use ck_common::{ActiveSet, SlotInfo};

use crate::supervisor::{groups::Groups, lifecycle::active_set, slots::SlotTable};

impl Groups {
    /// Writes the active set of `table` and every slot record to every group's maps; the set
    /// written.
    pub(in crate::supervisor) fn publish(
        &mut self,
        table: &SlotTable,
        stopping: bool,
    ) -> ActiveSet {
        let set = active_set(table.lives(), stopping);
        let records: Vec<(u32, SlotInfo)> =
            table.slots.values().map(|s| (s.index, s.info())).collect();
        for group in self.iter_mut() {
            let Some(bpf) = &mut group.bpf else { continue };
            for (index, info) in &records {
                if let Err(e) = bpf.write_slot(*index, info) {
                    tracing::error!(group = %group.name, "{e}");
                }
            }
            if let Err(e) = bpf.publish(&set) {
                tracing::error!(group = %group.name, "{e}");
            }
        }
        set
    }

    /// Writes the records of `indices` (after their queue depth changed).
    pub(in crate::supervisor) fn write_depths(&mut self, table: &SlotTable, indices: &[u32]) {
        for index in indices {
            let Some(info) = table.slots.get(index).map(|s| s.info()) else {
                continue;
            };
            for bpf in self.iter_mut().filter_map(|g| g.bpf.as_mut()) {
                let _ = bpf.write_slot(*index, &info);
            }
        }
    }
}
