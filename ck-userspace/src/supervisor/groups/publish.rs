//! Keeping the BPF maps true to the fleet: the active set (ready slots, then the fallback) and
//! every slot record, written to every group's maps. Called only by the executor.
use ck_common::SlotInfo;

use crate::supervisor::{Supervisor, lifecycle::active_set};

impl Supervisor {
    /// Writes the active set and every slot record to every group's maps.
    pub(in crate::supervisor) fn publish(&mut self) {
        let set = active_set(self.lives(), self.stopping);
        let ready: Vec<u32> = set.slots[..set.ready_len as usize].to_vec();
        if ready.is_empty() && !self.reports.last_ready.is_empty() && set.live_len > 0 {
            tracing::warn!(
                live = set.live_len,
                "no ready and healthy worker left: new connections wait in the queues of the \
                 other open sockets"
            );
        }
        if ready != self.reports.last_ready {
            tracing::debug!(active = ?ready, fallback = ?&set.slots[ready.len()..set.live_len as usize], "active set");
            self.reports.last_ready = ready;
        }
        self.reports.systemd_due = true;
        let records: Vec<(u32, SlotInfo)> = self
            .table
            .slots
            .values()
            .map(|s| (s.index, s.info()))
            .collect();
        for group in &mut self.groups {
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
    }

    /// Writes the records of `indices` (after their queue depth changed).
    pub(in crate::supervisor) fn write_depths(&mut self, indices: &[u32]) {
        for index in indices {
            let Some(info) = self.table.slots.get(index).map(|s| s.info()) else {
                continue;
            };
            for bpf in self.groups.iter_mut().filter_map(|g| g.bpf.as_mut()) {
                let _ = bpf.write_slot(*index, &info);
            }
        }
    }
}
