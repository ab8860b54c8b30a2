//! `--ready auto` without a word from the worker: a starting worker that says nothing on
//! `NOTIFY_SOCKET` is ready as soon as it accepts on its socket (seen in `/proc`: the socket in
//! one of its epoll sets, or a thread of it in `accept`, `poll`, `ppoll`, `select` or
//! `pselect6` on it), checked every sample interval (1 ms) while such a worker starts (on the
//! sampler's ticks, whatever the pace of queue sampling: see `health`), so it is seen within
//! about a millisecond. A worker that speaks the notify protocol is left to say `READY=1`
//! itself. The grace is no answer on its own: when it is over, a silent worker is taken as
//! ready only if ck cannot see what it waits in (its `/proc` unreadable); else it stays
//! starting until it accepts or `--ready-timeout` ends it. With `--ready probe` the readiness
//! probe alone decides (`health`).
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

    /// `--ready-grace` is over for the worker of run `epoch` on `index`: if it is still a silent
    /// starter, it is taken as ready only if ck cannot see whether it accepts; else it keeps
    /// starting (one log line says so), watched until it accepts or its ready timeout.
    pub(super) fn on_ready_grace(&mut self, index: u32, epoch: u64) {
        let Some(slot) = self.slots.get(&index) else {
            return;
        };
        if !matches!(slot.life.state, State::Starting(run) if run.id == epoch) {
            return;
        }
        let Some(pids) = silent_starter(slot) else {
            return;
        };
        let pid = slot.worker.as_ref().map_or(0, |w| w.pid);
        let grace = self.cfg.ready_grace;
        match readiness::undetectable(&pids) {
            Some(cannot) => self.mark_ready(
                index,
                format!(
                    "sent nothing on NOTIFY_SOCKET within --ready-grace {grace:?}, and {cannot}; \
                     taken as ready (use --ready notify or --ready probe to wait for a sign)"
                ),
            ),
            None => tracing::info!(
                slot = index,
                pid,
                reason = %format!(
                    "silent for --ready-grace {grace:?} and not waiting for connections yet"
                ),
                timeout = ?self.cfg.ready_timeout,
                "worker still starting: ready once it accepts (or READY=1), else stopped at \
                 --ready-timeout"
            ),
        }
    }

    /// Whether the readiness probe alone makes the worker of `index` ready (`--ready probe`,
    /// while it starts): a `READY=1` then changes nothing.
    pub(super) fn probe_decides(&self, index: u32) -> bool {
        self.cfg.ready == ReadyMode::Probe
            && self
                .slots
                .get(&index)
                .is_some_and(|s| matches!(s.life.state, State::Starting(_)))
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
