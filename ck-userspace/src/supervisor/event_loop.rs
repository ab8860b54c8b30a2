//! The supervisor's state ([`Supervisor`]: the run's configuration and one field per part) and
//! its event loop's routing: each [`Event`] and control request goes to the part it concerns
//! or to the top-level file that sequences it (`feed`, `operate`, `steer`, `carry_on`); a
//! worker's exit goes straight from the inputs that make it a death to the fleet executor.
//! Nothing else happens here. All state changes only here, one event at a time.
use tokio::sync::{mpsc, oneshot};

use crate::{
    control::{Request, Response},
    settings::run_config::RunConfig,
    supervisor::{
        continuity, event::Event, executor, groups, inputs, lifecycle::Settings, operations,
        reports, slots,
    },
};

/// A [`reports::View`] of a supervisor's fields, borrowed one by one (so that the reports can be
/// borrowed apart from it).
macro_rules! view_of {
    ($sup:expr) => {
        reports::View {
            cfg: &$sup.cfg,
            settings: &$sup.settings,
            stopping: $sup.stopping,
            table: &$sup.table,
            groups: &$sup.groups,
            inputs: &$sup.inputs,
            ops: &$sup.ops,
            continuity: &$sup.continuity,
        }
    };
}

/// The supervisor's state: the run's configuration and its parts, each in a folder of its own.
pub(super) struct Supervisor {
    pub(super) cfg: RunConfig,
    /// The lifecycle machine's settings (from `cfg`).
    pub(super) settings: Settings,
    pub(super) events: mpsc::UnboundedSender<Event>,
    /// ck is shutting down.
    pub(super) stopping: bool,
    pub(super) table: slots::SlotTable,
    pub(super) groups: groups::Groups,
    pub(super) inputs: inputs::Inputs,
    pub(super) ops: operations::Operations,
    pub(super) reports: reports::Reports,
    pub(super) continuity: continuity::Continuity,
}

impl Supervisor {
    /// Every part but the reports, read-only: what the reports and other reads look at.
    pub(super) fn view(&self) -> reports::View<'_> {
        view_of!(self)
    }

    /// What continuity reads, read-only.
    pub(super) fn parts(&self) -> continuity::Parts<'_> {
        continuity::Parts {
            cfg: &self.cfg,
            stopping: self.stopping,
            table: &self.table,
            healths: &self.inputs.healths,
            groups: &self.groups,
            ops: &self.ops,
            continuity: &self.continuity,
        }
    }

    /// The reports to change (the service manager told), beside the view they tell from.
    pub(super) fn reporting(&mut self) -> (&mut reports::Reports, reports::View<'_>) {
        (&mut self.reports, view_of!(self))
    }

    pub(super) fn handle(&mut self, event: Event) {
        match event {
            Event::Exited {
                slot,
                worker,
                status,
            } => {
                // Its pidfd: a death not yet seen by the exit watch goes to the fleet executor.
                let pidfd = inputs::exits::ExitReport::Pidfd;
                let death =
                    (self.inputs).exited(&mut self.table, &self.cfg, slot, worker, status, pidfd);
                if let Some(death) = death {
                    executor::on_death(self, slot, death);
                }
            }
            Event::Exiting(exit) => {
                // A watched process began to exit: a worker that died on its own is dead now.
                let seen =
                    (self.inputs).exit_began(&mut self.table, &self.cfg, self.stopping, exit);
                if let Some((slot, death)) = seen {
                    executor::on_death(self, slot, death);
                }
            }
            Event::ExitWatch(watch) => self.inputs.start_exit_watch(watch, &self.table),
            Event::Notify { slot, worker, msgs } => self.on_notify(slot, worker, msgs),
            Event::Timer { slot, epoch, timer } => {
                self.continuity.timer_fired(slot, epoch, timer);
                self.on_timer(slot, epoch, timer)
            }
            Event::Upgrade => self.upgrade(None, None),
            Event::UpgradeChecked(result) => self.on_upgrade_checked(result),
            Event::BecameReady(slot) => executor::decisions::on_ready(self, slot),
            Event::RollCheck => executor::decisions::finish_when_left(self),
            Event::SpareDue => self.replenish_spares(),
            Event::SpreadEnds => self.republish(),
            Event::SlowStartStep => {
                self.ops.slow_start_due = false;
                let ended_early = self.step_ramps();
                self.republish();
                if ended_early {
                    executor::decisions::continue_roll(self);
                }
            }
            Event::RollNext => executor::decisions::continue_roll(self),
            Event::Signal(name) => self.on_stop_signal(name),
            Event::QuietTick => self.on_quiet_tick(),
            Event::Reload => self.reload(None, None),
            Event::CanaryVerdict(canary) => executor::decisions::canary_verdict(self, canary),
            Event::CanaryCheck => self.check_canary(),
            Event::Faltered { slot, why } => executor::decisions::on_faltered(self, slot, why),
            Event::Tick => self.on_tick(),
            Event::ProbeTick => inputs::probes::start(
                &self.cfg,
                &self.groups,
                &self.table,
                &mut self.inputs.healths,
                &self.events,
            ),
            Event::ProbeResult {
                slot,
                worker,
                result,
            } => self.on_probe_result(slot, worker, result),
            Event::ScaleBy(delta) => {
                let target = self.table.serving().len() as i64 + i64::from(delta);
                if let Err(e) = self.scale_to(target.max(0) as u32) {
                    tracing::warn!("scaling refused: {e}");
                }
            }
            Event::SteeringCheck => self.check_steering_soon(),
            Event::AdoptScan if !self.stopping => self.scan_unadopted(),
            Event::AdoptScan => {}
            Event::ListenScan if !self.stopping => {
                self.inputs
                    .watch_listeners(&self.cfg, &self.groups, &self.table)
            }
            Event::ListenScan => {}
            Event::CgroupReap => self.table.reap_cgroups(),
            Event::RecycleCheck => self.check_recycling(),
            Event::Listened(event) => self.on_listened(event),
            Event::MemberExited { slot, worker } => self.on_member_exit(slot, worker),
            Event::HolderExited { slot, worker } => self.on_holder_exit(slot, worker),
            Event::Canary {
                group,
                before,
                connected,
            } => {
                self.groups
                    .on_canary(&self.table, self.stopping, group, before, connected);
                self.reports.systemd_due = true;
            }
            Event::SystemdWatchdog => {
                if let Some(systemd) = &self.reports.systemd {
                    systemd.watchdog();
                }
            }
        }
    }

    pub(super) fn control(&mut self, req: Request, reply: oneshot::Sender<Response>) {
        let response = match req {
            Request::Status => Response::Status(Box::new(self.reports.status(self.view()))),
            Request::Drain { slot } => self.set_drained(slot, true),
            Request::Undrain { slot } => self.set_drained(slot, false),
            Request::Stop => self.stop_requested(false),
            Request::StopNow => self.stop_requested(true),
            Request::DrainAll => self.set_all_drained(true),
            Request::UndrainAll => self.set_all_drained(false),
            Request::Scale { workers } => match self.scale_to(workers) {
                Ok(msg) => Response::Ok(msg),
                Err(msg) => Response::Error(msg),
            },
            // Answered when the roll ends.
            Request::Reload { canary } => return self.reload(Some(reply), canary),
            // After an upgrade, once this image's program steers (see `steer`).
            Request::Rollback if self.continuity.bpf_resumed => {
                tracing::info!(
                    reason = "ck rollback",
                    "rollback waits for the BPF program, still loading after the upgrade"
                );
                return self.ops.rollbacks_waiting.push(reply);
            }
            Request::Rollback => match self.rollback() {
                Ok(msg) => Response::Ok(msg),
                Err(msg) => Response::Error(msg),
            },
            // Answered once the new binary is checked.
            Request::Upgrade { binary } => return self.upgrade(binary, Some(reply)),
        };
        let _ = reply.send(response);
    }
}
