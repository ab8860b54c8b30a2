//! Keeping the BPF maps true to the fleet: every slot record and the active set (the slots
//! chosen, then the fallback), written to every group's maps. Called only by the executor.
use ck_common::{ActiveSet, SlotInfo};

use crate::supervisor::{fleet::slow_start::Weighted, groups::Groups, slots::SlotTable};

impl Groups {
    /// Writes every slot record of `table` (with its weight) and then the active set `set`,
    /// its ready slots listed by weight (`weighted`, `--slow-start`), to every group's maps.
    /// `by_client`: a canary by client is judged (see `BpfGroup::publish`).
    pub(in crate::supervisor) fn publish(
        &mut self,
        table: &SlotTable,
        set: &ActiveSet,
        weighted: &Weighted,
        by_client: bool,
    ) {
        let records: Vec<(u32, SlotInfo)> = table
            .slots
            .values()
            .map(|s| {
                let info = SlotInfo {
                    weight: weighted.weight(s.index),
                    ..s.info()
                };
                (s.index, info)
            })
            .collect();
        for group in self.iter_mut() {
            let Some(bpf) = &mut group.bpf else { continue };
            for (index, info) in &records {
                if let Err(e) = bpf.write_slot(*index, info) {
                    tracing::error!(group = %group.name, "{e}");
                }
            }
            if let Err(e) = bpf.publish(set, &weighted.set, by_client) {
                tracing::error!(group = %group.name, "{e}");
            }
        }
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
