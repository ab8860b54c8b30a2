//! The supervisor: owns the slots' sockets, starts and watches workers, keeps the BPF maps true
//! to the fleet, answers the control socket and shuts everything down cleanly.
//!
//! Everything runs on one current-thread tokio runtime (`start`); all state lives in
//! [`Supervisor`] and is changed only by its event loop, one [`Event`] at a time: this file
//! routes each event to the part it concerns and does nothing else. Tasks (child waiters,
//! notify readers, timers, the control server) only send events.
//!
//! Who decides what: a slot's state changes only through the lifecycle machine
//! ([`lifecycle`]); what spans slots (a death, a roll, a scale, the spares, boot priority, the
//! quiet wait) is decided by the fleet core ([`fleet`]); the executor ([`executor`]) runs both
//! on the OS (`world`). The parts, each in a folder with its rule at the top, own their fields
//! and take the other parts they read as arguments, never the supervisor: the slot table
//! (`slots`), the groups and their BPF state (`groups`), the input sources (`inputs`), the
//! operations (`operations`), the reports (`reports`, which read a `reports::View`) and what
//! outlives one image of ck (`continuity`). What spans parts is sequenced at this folder's top,
//! one file a concern: `feed` (what the inputs found, fed to the machine), `operate` (the
//! operations' plans applied), `steer` (the loaded programs taken into use), `carry_on`
//! (continuity's steps), `world` (the executor's effects), `start` (a run's start and end).
mod carry_on;
pub mod continuity;
mod executor;
mod feed;
pub mod fleet;
mod groups;
mod inputs;
pub mod lifecycle;
mod operate;
mod operations;
pub mod output;
mod reports;
mod slots;
mod start;
mod steer;
mod tasks;
mod world;

pub use start::{run, run_with};

use tokio::sync::{mpsc, oneshot};

use groups::Group;
use lifecycle::{Settings, Timer};

pub use continuity::handover::Compat;
pub use inputs::accept_probe::FORCE_ENV as READY_DETECT_ENV;
pub use tasks::IDLE_BURN_ENV;

use crate::{
    control::{Request, Response},
    os::notify::NotifyMsg,
    settings::run_config::RunConfig,
};

/// Something that happened, for the event loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// A worker process ended.
    Exited {
        slot: u32,
        worker: u64,
        status: std::io::Result<std::process::ExitStatus>,
    },
    /// A watched worker's last thread is exiting (the exit watch).
    Exiting(ck_common::exits::ExitEvent),
    /// The exit watch is loaded.
    ExitWatch(crate::bpf::exits::ExitWatch),
    /// A worker sent notify messages.
    Notify {
        slot: u32,
        worker: u64,
        msgs: Vec<NotifyMsg>,
    },
    /// A slot's worker became ready (a roll may flip its batch).
    BecameReady(u32),
    /// Slots changed during a roll (its old workers may all have been told to stop).
    RollCheck,
    /// `--spares`: time to boot spares again after one died unused.
    SpareDue,
    /// The boot window ends: starting workers are chosen no more (`fleet::spread`).
    SpreadEnds,
    /// A timer the lifecycle armed (in epoch `epoch`) fired.
    Timer { slot: u32, epoch: u64, timer: Timer },
    /// A termination signal arrived.
    Signal(&'static str),
    /// Time to read the counters during a stop's quiet wait.
    QuietTick,
    /// SIGHUP: rolling restart (with `--config`, after reading the file again).
    Reload,
    /// SIGTTIN (+1) or SIGTTOU (-1): change the worker count by one.
    ScaleBy(i32),
    /// Time to sample accept queues and check heartbeats.
    Tick,
    /// Time to probe every worker.
    ProbeTick,
    /// A probe ended.
    ProbeResult {
        slot: u32,
        worker: u64,
        result: Result<crate::os::probe::ProbeAnswer, String>,
    },
    /// Time to check that every group's program steers (the canary).
    SteeringCheck,
    /// `--adopt`: time to look for listeners of the workers' trees not adopted yet.
    AdoptScan,
    /// Time to look at what listens: listeners on the fleet's ports that are not ck's, and
    /// what the workers listen on by themselves.
    ListenScan,
    /// Time to remove the cgroups of exited workers that are empty now.
    CgroupReap,
    /// Time to see which workers `--max-requests` / `--max-memory` recycle.
    RecycleCheck,
    /// `--adopt`: a process of the instance's cgroup started to listen.
    Listened(ck_common::ListenEvent),
    /// `--adopt`: the process of a member slot exited.
    MemberExited { slot: u32, worker: u64 },
    /// `--adopt`: the process holding a root slot's socket (not the worker) exited.
    HolderExited { slot: u32, worker: u64 },
    /// Time to send the service manager `WATCHDOG=1` (from the event loop: a stuck loop
    /// misses it).
    SystemdWatchdog,
    /// `ck upgrade` without a client: SIGUSR2.
    Upgrade,
    /// The candidate binary of an upgrade answered its check.
    UpgradeChecked(Result<continuity::handover::Compat, String>),
    /// A steering canary came back (`connected`: the kernel, not the program, chose).
    Canary {
        group: usize,
        before: u64,
        connected: std::io::Result<bool>,
    },
}

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
pub struct Supervisor {
    cfg: RunConfig,
    /// The lifecycle machine's settings (from `cfg`).
    settings: Settings,
    events: mpsc::UnboundedSender<Event>,
    /// ck is shutting down.
    stopping: bool,
    table: slots::SlotTable,
    groups: groups::Groups,
    inputs: inputs::Inputs,
    ops: operations::Operations,
    reports: reports::Reports,
    continuity: continuity::Continuity,
}

impl Supervisor {
    /// Every part but the reports, read-only: what the reports and other reads look at.
    fn view(&self) -> reports::View<'_> {
        view_of!(self)
    }

    /// The reports to change (the service manager told), beside the view they tell from.
    fn reporting(&mut self) -> (&mut reports::Reports, reports::View<'_>) {
        (&mut self.reports, view_of!(self))
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited {
                slot,
                worker,
                status,
            } => self.on_exit(slot, worker, status, inputs::exits::ExitReport::Pidfd),
            Event::Exiting(exit) => self.on_exiting(exit),
            Event::ExitWatch(watch) => self.inputs.start_exit_watch(watch, &self.table),
            Event::Notify { slot, worker, msgs } => self.on_notify(slot, worker, msgs),
            Event::Timer { slot, epoch, timer } => {
                self.continuity.timer_fired(slot, epoch, timer);
                self.on_timer(slot, epoch, timer)
            }
            Event::Upgrade => self.upgrade(None, None),
            Event::UpgradeChecked(result) => self.on_upgrade_checked(result),
            Event::BecameReady(slot) => executor::fleet::on_ready(self, slot),
            Event::RollCheck => executor::fleet::finish_when_left(self),
            Event::SpareDue => self.replenish_spares(),
            Event::SpreadEnds => self.republish(),
            Event::Signal(name) => self.on_stop_signal(name),
            Event::QuietTick => self.on_quiet_tick(),
            Event::Reload => self.reload(None),
            Event::Tick => self.on_tick(),
            Event::ProbeTick => {
                inputs::probes::start(&self.cfg, &self.groups, &mut self.table, &self.events)
            }
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

    fn control(&mut self, req: Request, reply: oneshot::Sender<Response>) {
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
            Request::Reload => return self.reload(Some(reply)),
            // Answered once the new binary is checked.
            Request::Upgrade { binary } => return self.upgrade(binary, Some(reply)),
        };
        let _ = reply.send(response);
    }
}
