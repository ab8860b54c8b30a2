//! The workers' process trees and the sockets they hold: which processes count as a slot's
//! (its cgroup less its members'), and which worker holds a given socket (`--adopt`, foreign
//! listeners).
use crate::os::sock_diag;
use crate::supervisor::slots::SlotTable;

impl SlotTable {
    /// Inodes of the sockets of group `position` ck holds (adopted or pending).
    pub(in crate::supervisor) fn own_inodes(&self, position: usize) -> Vec<u64> {
        self.slots
            .values()
            .flat_map(|s| {
                let adopted = s.sockets.get(position);
                let pending = s.adopting.get(position).and_then(Option::as_ref);
                adopted.into_iter().chain(pending)
            })
            .filter_map(|socket| sock_diag::inode_of(socket).ok())
            .collect()
    }

    /// A socket of group `position` that a slot holds: the group has a member through which
    /// a program can be attached, and a canary can be steered.
    pub(in crate::supervisor) fn member_socket(&self, position: usize) -> Option<&socket2::Socket> {
        self.slots.values().find_map(|s| s.sockets.get(position))
    }

    /// The slot, pid and fd of the worker process (of any worker's cgroup) holding `inode`.
    pub(in crate::supervisor) fn holder_in_fleet(&self, inode: u64) -> Option<(u32, u32, i32)> {
        self.slots.values().find_map(|slot| {
            let pids = slot.worker.as_ref()?.cgroup.as_ref()?.pids();
            sock_diag::fd_of(inode, &pids).map(|(pid, fd)| (slot.index, pid, fd))
        })
    }

    /// The processes whose connections count as slot `index`'s: its worker's cgroup (else its
    /// pid), less the processes that hold member slots of its tree (`--adopt`, forking
    /// servers), whose connections count as theirs.
    pub(in crate::supervisor) fn tree_pids(&self, index: u32) -> Vec<u32> {
        let Some(worker) = self.worker(index) else {
            return Vec::new();
        };
        let members: Vec<u32> = self
            .slots
            .values()
            .filter(|m| m.life.member_of == Some(index))
            .filter_map(|m| Some(m.worker.as_ref()?.pid))
            .collect();
        let tree = worker
            .cgroup
            .as_ref()
            .map(|c| c.pids())
            .filter(|pids| !pids.is_empty())
            .unwrap_or_else(|| vec![worker.pid]);
        tree.into_iter().filter(|p| !members.contains(p)).collect()
    }

    /// The workers' process trees, for the sock_diag scan: `(slot, pids)` of slots with one.
    pub(in crate::supervisor) fn worker_trees(&self) -> Vec<(u32, Vec<u32>)> {
        self.slots
            .keys()
            .map(|i| (*i, self.tree_pids(*i)))
            .filter(|(_, pids)| !pids.is_empty())
            .collect()
    }
}
