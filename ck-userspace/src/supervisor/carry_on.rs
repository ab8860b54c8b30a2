//! Continuity as the running supervisor sequences it: a fleet rebuilt by `continuity` from a
//! handover or a dead ck's state put into the slot table (holders watched, timers armed, slots
//! whose worker is gone started again), the state file kept current, and `ck upgrade`'s last
//! steps on the event loop (queued work handled, then the exec).
use std::{os::fd::BorrowedFd, path::PathBuf, time::Duration, time::Instant};

use tokio::sync::{mpsc, oneshot};

use super::{
    continuity::{self, handover::Handover, resume::Restored, resume::Restorer},
    event::Event,
    event_loop::Supervisor,
    executor::World,
    inputs::members::watch_holder,
    lifecycle::Input,
    tasks,
};
use crate::control::{Response, server::ControlCall};

impl Supervisor {
    /// What taking workers back needs of this supervisor.
    fn restorer(&self) -> Restorer<'_> {
        Restorer {
            cfg: &self.cfg,
            groups: &self.groups,
            hub: self.table.output.as_ref(),
            events: &self.events,
        }
    }

    /// Rebuilds the fleet `ck upgrade` handed over, in place of starting one.
    pub(super) fn resume(&mut self, handover: Handover) -> anyhow::Result<()> {
        // What was rebuilt before an error is the fleet's all the same: the shutdown that
        // follows stops it.
        let (restored, result) = continuity::resume::restore(&self.restorer(), handover);
        self.take_restored(restored);
        result
    }

    /// Takes back the fleet of a ck that died (`--survive-supervisor`).
    pub(super) fn take_fleet_back(&mut self, state: Handover) -> anyhow::Result<()> {
        let restored = continuity::survive::take_fleet_back(&self.restorer(), state);
        self.take_restored(restored);
        Ok(())
    }

    /// Puts a restored fleet in the slot table, then watches, arms and starts what it says.
    fn take_restored(&mut self, restored: Restored) {
        if let Some(workers) = restored.workers {
            self.cfg.workers = workers;
        }
        for slot in restored.slots {
            self.table.slots.insert(slot.index, slot);
        }
        for (index, holder) in restored.holders {
            watch_holder(&mut self.table, &self.events, index, holder);
        }
        for (slot, epoch, timer, delay) in restored.timers {
            self.set_timer(slot, epoch, timer, delay);
        }
        if let Some(delay) = restored.spare_due {
            self.ops.core.spares.due = Some(Instant::now() + delay);
            tasks::send_after(&self.events, delay, Event::SpareDue);
        }
        if restored.last_upgrade.is_some() {
            self.continuity.last_upgrade = restored.last_upgrade;
        }
        // Every slot is in the table before the first starts (the machine reads the others).
        let mut renew = Vec::new();
        for renewal in restored.renew {
            World::open(self, renewal.index, renewal.life);
            if let Some(slot) = self.table.slots.get_mut(&renewal.index) {
                slot.last_pid = renewal.last_pid;
                slot.last_exit = Some("gone while ck was down".into());
            }
            renew.push(renewal.index);
        }
        for index in renew {
            self.apply(index, Input::Start);
        }
    }

    /// Writes the state file if anything changed since the last write (only with
    /// `--survive-supervisor`).
    pub(super) fn save_state(&mut self) {
        if !self.cfg.survive_supervisor || !self.continuity.state_dirty {
            return;
        }
        self.continuity.state_dirty = false;
        let prepared =
            continuity::handover::prepare(self.parts(), self.reports.started, None, None, None);
        continuity::survive::write_state(&self.cfg.name, &prepared.handover);
    }

    /// `ck upgrade` or SIGUSR2: the candidate is checked on a task (see
    /// [`continuity::Continuity::upgrade`]).
    pub(super) fn upgrade(
        &mut self,
        binary: Option<PathBuf>,
        reply: Option<oneshot::Sender<Response>>,
    ) {
        let refused = continuity::upgrade::refused(self.parts());
        self.continuity
            .upgrade(refused, binary, reply, &self.events);
    }

    /// The candidate of an upgrade answered its check.
    pub(super) fn on_upgrade_checked(
        &mut self,
        result: Result<continuity::handover::Compat, String>,
    ) {
        let refused = continuity::upgrade::refused(self.parts());
        self.continuity.upgrade_checked(refused, result);
    }

    /// Hands the state over and execs the checked binary. Returns only if ck could not
    /// re-execute (the old image carries on).
    pub(super) fn reexec(
        &mut self,
        lock: BorrowedFd<'_>,
        control: BorrowedFd<'_>,
        metrics: Option<BorrowedFd<'_>>,
    ) {
        let Some(upgrade) = self.continuity.upgrade.take() else {
            return;
        };
        let error = continuity::upgrade::reexec(
            &upgrade,
            self.parts(),
            self.reports.started,
            lock,
            control,
            metrics,
        );
        tracing::error!(reason = %error, "upgrade failed");
        self.continuity.last_upgrade = Some(format!("failed: {error}"));
    }

    /// Lets the connection tasks write the answers already given (the upgrade's own among
    /// them), and handles what is already queued (events, control and metrics calls) so that
    /// the state handed over is current.
    pub(super) async fn finish_before_exec(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        calls: &mut mpsc::UnboundedReceiver<ControlCall>,
        metrics_calls: &mut mpsc::UnboundedReceiver<crate::metrics::Call>,
    ) {
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let mut handled = false;
            while let Ok(event) = events.try_recv() {
                self.handle(event);
                handled = true;
            }
            while let Ok((req, reply)) = calls.try_recv() {
                self.control(req, reply);
                handled = true;
            }
            while let Ok(call) = metrics_calls.try_recv() {
                self.reports.metrics_call(self.view(), call);
                handled = true;
            }
            if !handled {
                return;
            }
        }
    }
}
