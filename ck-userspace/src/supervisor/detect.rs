//! `--ready auto` without a word from the worker: a starting worker that says nothing on
//! `NOTIFY_SOCKET` is ready as soon as it accepts on its socket (seen in `/proc`: the socket in
//! one of its epoll sets, or a thread of it in `accept`), checked every sample interval (1 ms)
//! while such a worker starts (on the sampler's ticks, whatever the pace of queue sampling:
//! see `health`), so it is seen within about a millisecond. `READY=1` and the grace stay the other ways in; a worker that speaks
//! the notify protocol is left to say `READY=1` itself.
use super::{Supervisor, lifecycle::State};
use crate::{os::notify, os::readiness, os::sock_diag, settings::run_config::ReadyMode};

impl Supervisor {
    /// Whether some starting worker is watched for readiness (ticks stay fast meanwhile).
    pub(super) fn watching_readiness(&self) -> bool {
        self.detects_readiness() && self.slots.values().any(|s| silent_starter(s).is_some())
    }

    fn detects_readiness(&self) -> bool {
        self.cfg.ready == ReadyMode::Auto && !self.cfg.adopt
    }

    /// Marks ready every silent starting worker that accepts on its socket.
    pub(super) fn detect_ready(&mut self) {
        if !self.detects_readiness() {
            return;
        }
        let ready: Vec<(u32, &'static str)> = self
            .slots
            .values()
            .filter_map(|slot| {
                let pids = silent_starter(slot)?;
                let inodes: Vec<u64> = slot
                    .sockets
                    .iter()
                    .filter_map(|s| sock_diag::inode_of(s).ok())
                    .collect();
                readiness::accepting(&pids, &inodes).map(|how| (slot.index, how.reason()))
            })
            .collect();
        for (index, why) in ready {
            self.mark_ready(index, why.to_string());
        }
    }
}

/// The processes of a starting worker that has said nothing on `NOTIFY_SOCKET` (nor has a
/// message waiting there), if the slot has one.
fn silent_starter(slot: &super::slot::Slot) -> Option<Vec<u32>> {
    let worker = slot.worker.as_ref()?;
    let starting = matches!(slot.life.state, State::Starting(_));
    let pending = worker.notify.as_deref().is_some_and(notify::pending);
    if !starting || worker.spoke_notify || pending {
        return None;
    }
    Some(
        worker
            .cgroup
            .as_ref()
            .map(|c| c.pids())
            .unwrap_or_else(|| vec![worker.pid]),
    )
}
