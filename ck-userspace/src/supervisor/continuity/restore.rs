//! A slot and its worker as an earlier ck handed them over, built again (`Slot::restore`,
//! `Worker::restored`), and where an adopted slot's sockets live, for the next handover
//! (`Slot::adopted_locations`). These are the slot table's constructors and reads that know
//! the handover's records, so they live with the records: the table knows nothing of them.
use std::os::fd::OwnedFd;

use socket2::Socket;

use crate::supervisor::{
    continuity::handover::{AdoptedSocket, SlotHandover, WorkerHandover},
    slots::slot::{Slot, Worker},
};

impl Worker {
    /// A worker handed over by an earlier ck (`ck upgrade`, or the state file of one that
    /// died), with what that ck knew of it; the caller adds its handles.
    pub fn restored(saved: &WorkerHandover, pidfd: OwnedFd) -> Worker {
        let mut worker = Worker::base(saved.pid, pidfd);
        worker.spoke_notify = saved.spoke_notify;
        worker.status = saved.status.clone();
        worker.selected_base = saved.selected_base;
        worker.requests_limit = saved.requests_limit;
        worker.replacing = saved.replacing;
        worker.stepped_back = saved.stepped_back;
        worker.over_memory = saved.over_memory;
        worker.start_ticks = saved.start_ticks;
        worker.notify_name = saved.notify_name.clone();
        worker
    }
}

impl Slot {
    /// A slot handed over by an earlier ck (`ck upgrade`, or the state file of one that
    /// died) with its `sockets` taken back; its worker is the caller's to add.
    pub fn restore(saved: &SlotHandover, sockets: Vec<Socket>) -> Slot {
        let mut slot = Slot::new(saved.index, saved.life.clone());
        // From an earlier ck, spares and members' roots travel beside the life too.
        slot.life.spare |= saved.spare;
        slot.life.member_of = saved.member_of;
        slot.sockets = sockets;
        slot.last_pid = saved.last_pid;
        slot.last_exit = saved.last_exit.clone();
        slot.boot_mistake = saved.boot_mistake.clone();
        slot.probe_failures = saved.probe_failures;
        slot.output_dropped =
            std::sync::Arc::new(std::sync::atomic::AtomicU64::new(saved.output_dropped));
        slot
    }

    /// `--adopt`: where each of the slot's sockets is open in its worker's process tree (the
    /// holding process first, then the worker's cgroup), read from `/proc`; empty if one is
    /// not found.
    pub fn adopted_locations(&self) -> Vec<AdoptedSocket> {
        use crate::os::{pidfd, sock_diag};
        let Some(worker) = &self.worker else {
            return Vec::new();
        };
        let mut pids = vec![worker.holder.unwrap_or(worker.pid)];
        if let Some(cgroup) = &worker.cgroup {
            pids.extend(cgroup.pids());
        }
        self.sockets
            .iter()
            .map(|socket| {
                let inode = sock_diag::inode_of(socket).ok()?;
                let (pid, fd) = sock_diag::fd_of(inode, &pids)?;
                Some(AdoptedSocket {
                    pid,
                    start_ticks: pidfd::start_ticks(pid),
                    fd,
                    cookie: sock_diag::cookie(socket).ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default()
    }
}
