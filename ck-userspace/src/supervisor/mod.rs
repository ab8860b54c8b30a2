//! The supervisor: owns the slots' sockets, starts and watches workers, keeps the BPF maps true
//! to the fleet, answers the control socket and shuts everything down cleanly.
//!
//! Everything runs on one current-thread tokio runtime; all state lives in [`Supervisor`] and is
//! changed only by its event loop, one [`Event`] at a time. Tasks (child waiters, notify readers,
//! timers, the control server) only send events. A slot's state changes only through the
//! lifecycle machine ([`lifecycle`]), whose effects the [`executor`] runs on the supervisor
//! (`world`).
mod accept_probe;
mod adopt;
mod boot_priority;
mod cgroups;
pub mod continuity;
mod detect;
mod drain;
mod executor;
mod exits;
pub mod fleet;
mod foreign;
mod health;
mod leaving;
pub mod lifecycle;
mod members;
pub mod output;
mod publish;
mod queue_motion;
mod quiet;
mod reconfigure;
mod recycle;
mod roll;
mod scale;
mod scrape;
mod slot;
mod spares;
mod status;
mod steering;
mod systemd;
mod tasks;
mod workers;
mod world;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::sync::{mpsc, oneshot};

use continuity::origin::Origin;
use lifecycle::{Settings, Timer};
use slot::Slot;

pub use accept_probe::FORCE_ENV as READY_DETECT_ENV;
pub use continuity::handover::Compat;

use crate::{
    bpf::{BpfGroup, pins},
    control::{Request, Response, server::ControlCall},
    metrics,
    os::notify::NotifyMsg,
    os::reexec,
    settings::layers::RunCommandLine,
    settings::run_config::{ListenAddr, ReadyMode, RunConfig, WorkerOutput},
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
    /// Time to look for listeners on the fleet's ports that are not ck's.
    ForeignScan,
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

/// One listen group at run time.
pub(crate) struct Group {
    addr: ListenAddr,
    name: String,
    bpf: Option<BpfGroup>,
    /// After an upgrade, until `bpf` is loaded: the pinned counters (see `status`).
    pinned_stats: Option<crate::bpf::PinnedStats>,
    steering: steering::SteeringCheck,
}

/// The supervisor's state.
pub struct Supervisor {
    cfg: RunConfig,
    settings: Settings,
    groups: Vec<Group>,
    slots: BTreeMap<u32, Slot>,
    events: mpsc::UnboundedSender<Event>,
    started: Instant,
    stopping: bool,
    next_worker_id: u64,
    /// The ready list last published (for log lines only; status reads the map).
    last_ready: Vec<u32>,
    /// The fleet core's state: the roll in flight, the spares' pacing.
    core: fleet::Core,
    /// The numbers the fleet core decides with (from `cfg`).
    shape: fleet::Shape,
    /// Who asked for the roll in flight (`ck reload`), answered when it ends.
    roll_reply: Option<oneshot::Sender<Response>>,
    /// Pace of queue sampling (see `health::Pacer`).
    pacer: health::Pacer,
    /// Inodes of foreign listeners already logged.
    foreign_seen: BTreeSet<u64>,
    /// The instance's cgroup (workers each get one under it), where the host allows.
    cgroups: Option<crate::os::cgroup::InstanceCgroup>,
    /// Cgroups of exited workers, killed and waiting to be empty to be removed.
    dead_cgroups: Vec<crate::os::cgroup::WorkerCgroup>,
    /// `--adopt`: the hooks on the instance's cgroup (kept alive: dropping them detaches them
    /// unless pinned, see `steering`).
    adopt_hooks: Option<crate::bpf::adopt::AdoptHooks>,
    /// The exit watch, where the kernel allows it.
    exit_watch: Option<crate::bpf::exits::ExitWatch>,
    /// The open-file limit ck was started with (the workers get it back; ck raised its own).
    fd_limit: Option<crate::os::fd_limit::FdLimit>,
    /// Rolling restarts that ended, by result (for `/metrics`).
    reloads: metrics::ReloadCounts,
    /// Where `--metrics` listens (for `ck status`).
    metrics_addr: Option<std::net::SocketAddr>,
    /// `--config`: the file `ck reload` reads again.
    config: Option<reconfigure::ConfigSource>,
    /// The task that sends `ProbeTick`s, while probes are on.
    probe_ticker: Option<tokio::task::AbortHandle>,
    /// The service manager ck tells its state (`NOTIFY_SOCKET`), if any.
    systemd: Option<systemd::Notifier>,
    /// The fleet may have changed since the service manager was last told (set by every
    /// publish and canary; the state itself is read from the kernel when telling).
    systemd_due: bool,
    /// The binary ck was first started from (the default of `ck upgrade`).
    exe: std::path::PathBuf,
    /// Upgrades in place so far.
    upgrades: u32,
    /// The upgrade under way.
    upgrade: Option<continuity::upgrade::Upgrade>,
    /// How the last upgrade went (for `ck status`).
    last_upgrade: Option<String>,
    /// Lifecycle timers armed and not fired yet (handed over by an upgrade).
    timers: Vec<continuity::handover::Armed>,
    /// The program being loaded is for maps an earlier image pinned and filled (`ck upgrade`,
    /// or a ck that died, with `--survive-supervisor`).
    bpf_resumed: bool,
    /// The state changed since the state file was last written (`--survive-supervisor`).
    state_dirty: bool,
    /// `--worker-output capture`: the readers and writer of the workers' output.
    output: Option<output::Hub>,
    /// A stop's quiet wait, and the traffic seen per group (`quiet`).
    quiet: quiet::Quiet,
}

/// Whether the run probes its workers over HTTP (a TCP probe passes on ck's own listening
/// socket before the worker accepts: it says nothing about readiness).
fn http_probe(cfg: &RunConfig) -> bool {
    matches!(
        cfg.health.probe,
        Some(crate::settings::health::ProbeKind::Http(_))
    )
}

/// The lifecycle settings of a run.
fn settings(cfg: &RunConfig) -> Settings {
    Settings {
        ready_on_spawn: cfg.ready == ReadyMode::Spawn,
        // With an HTTP probe, a silent worker is ready at its first passing probe instead;
        // adopted, when its socket is. The grace only says when to look whether ck can see the
        // worker wait for connections at all (`detect`).
        ready_grace: (cfg.ready == ReadyMode::Auto && !http_probe(cfg) && !cfg.adopt)
            .then_some(cfg.ready_grace),
        ready_timeout: cfg.ready_timeout,
        drain_timeout: cfg.drain_timeout,
        restart: cfg.restart,
        min_workers: cfg.min_workers,
        adopt: cfg.adopt,
        // Without the program nothing counts a slot's connections, and its socket keeps taking
        // new ones from the kernel's hash: it stops at once.
        linger: (!cfg.no_bpf).then_some(cfg.drain_timeout),
    }
}

/// The numbers the fleet core decides with.
fn shape(cfg: &RunConfig) -> fleet::Shape {
    fleet::Shape {
        reload_batch: cfg.reload_batch,
        spares: cfg.spares,
        min_workers: cfg.min_workers,
        restart: cfg.restart,
    }
}

/// Runs `ck run` to completion: returns after a clean shutdown.
pub fn run(cfg: RunConfig) -> anyhow::Result<()> {
    run_with(cfg, None)
}

/// Runs `ck run` to completion like [`run`]; with the `command_line` of a `--config` run,
/// reloads read the file again under it and apply what changed.
pub fn run_with(cfg: RunConfig, command_line: Option<RunCommandLine>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run_async(cfg, command_line))
}

async fn run_async(cfg: RunConfig, command_line: Option<RunCommandLine>) -> anyhow::Result<()> {
    // After `ck upgrade`, this image takes over what the one before it handed over; after a
    // crash with `--survive-supervisor`, what the ck that died left running.
    let (origin, lock) = Origin::find(&cfg)?;
    let fd_limit = origin.fd_limit();
    let prior = origin.prior();
    let reuse_maps = origin.reuse_maps(&cfg.name);
    origin.check_ports(&cfg)?;
    // Bound before any worker starts: a taken address fails here, leaving nothing behind.
    let (metrics_tx, mut metrics_calls) = mpsc::unbounded_channel::<metrics::Call>();
    let metrics_server = origin.metrics(&cfg, metrics_tx)?;
    let cgroups = origin.cgroups(&cfg)?;
    // The bind hooks must be in place before the first worker binds.
    let (adopt_hooks, listens) = match cfg.adopt {
        true => {
            let (hooks, ring) = adopt::attach(&cfg, cgroups.as_ref())?;
            (Some(hooks), Some(ring))
        }
        false => (None, None),
    };
    let bpf_on = !cfg.no_bpf;
    let groups: Vec<Group> = cfg
        .listen
        .iter()
        .map(|addr| Group {
            addr: *addr,
            name: addr.group_name(),
            bpf: None,
            pinned_stats: match (reuse_maps, bpf_on) {
                (true, true) => crate::bpf::PinnedStats::open(&cfg.name, &addr.group_name())
                    .inspect_err(|e| tracing::warn!("{e}"))
                    .ok(),
                _ => None,
            },
            steering: Default::default(),
        })
        .collect();
    // The program loads on a thread of its own (aya parses the kernel's BTF, ~20 ms) while the
    // rest of ck sets up. A fresh fleet waits for it: every socket is tagged for the kernel's
    // connection counts before it listens, and the program is attached to the group's first
    // socket before a second one listens, so the first connection is steered and counted.
    // After an upgrade or a take-back it loads on the pinned maps while the fleet resumes: the
    // program attached before keeps steering, and its pinned counter keeps counting, meanwhile.
    let mut bpf_loading = bpf_on.then(|| steering::load_in_background(&cfg, reuse_maps));
    if !bpf_on && !origin.upgraded() {
        tracing::warn!(
            "BPF steering is off (--no-bpf): plain SO_REUSEPORT; the kernel hashes connections over \
             every worker, including starting and draining ones, and a closing socket resets its queue"
        );
    }
    let (events_tx, mut events) = mpsc::unbounded_channel();
    if let Some(ring) = listens {
        adopt::read_listens(ring, events_tx.clone())?;
    }
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<ControlCall>();
    let control = origin.control(&cfg, calls_tx)?;
    let mut sup = Supervisor {
        settings: settings(&cfg),
        groups,
        slots: BTreeMap::new(),
        events: events_tx,
        started: prior.map_or_else(Instant::now, |h| h.started),
        stopping: false,
        next_worker_id: prior.map_or(0, |h| h.next_worker_id),
        last_ready: Vec::new(),
        core: fleet::Core {
            roll: None,
            spares: fleet::spares::Pacing {
                failures: prior.map_or(0, |h| h.spare_failures),
                due: None,
            },
        },
        shape: shape(&cfg),
        roll_reply: None,
        pacer: health::Pacer::new(cfg.health.sample_interval),
        foreign_seen: BTreeSet::new(),
        cgroups,
        dead_cgroups: prior.map_or_else(Vec::new, |h| {
            h.dead_cgroups
                .iter()
                .filter_map(|(dir, memory)| {
                    crate::os::cgroup::WorkerCgroup::resume(dir.clone(), *memory).ok()
                })
                .collect()
        }),
        adopt_hooks,
        exit_watch: None,
        fd_limit,
        reloads: prior.map_or_else(Default::default, |h| metrics::ReloadCounts {
            ok: h.reloads.0,
            aborted: h.reloads.1,
        }),
        metrics_addr: metrics_server.as_ref().map(|m| m.local_addr()),
        config: command_line.map(|c| reconfigure::ConfigSource::new(c, &cfg)),
        probe_ticker: None,
        systemd: systemd::Notifier::from_env(),
        systemd_due: true,
        exe: match &origin {
            Origin::Upgrade(h) => h.exe.clone(),
            _ => continuity::upgrade::own_binary(),
        },
        upgrades: prior.map_or(0, |h| h.upgrades),
        upgrade: None,
        last_upgrade: None,
        timers: Vec::new(),
        bpf_resumed: reuse_maps,
        state_dirty: true,
        quiet: Default::default(),
        output: match cfg.worker_output {
            WorkerOutput::Capture => Some(output::Hub::start(cfg.log_format)?),
            WorkerOutput::Inherit => None,
        },
        cfg,
    };
    tasks::watch_signals(&sup.events)?;
    // An upgrade blocked these across the exec: the handlers are in place now.
    reexec::unblock_handled().context("unblocking signals")?;
    tasks::start_sampler(&sup.events, sup.pacer.next_tick.subscribe());
    sup.start_probe_ticker();
    // The once-a-second chores, each on its own ticker.
    tasks::start_ticker(&sup.events, steering::CHECK_EVERY, || Event::SteeringCheck);
    if sup.cfg.adopt {
        tasks::start_ticker(&sup.events, steering::CHECK_EVERY, || Event::AdoptScan);
    }
    tasks::start_ticker(&sup.events, steering::CHECK_EVERY, || Event::ForeignScan);
    tasks::start_ticker(&sup.events, steering::CHECK_EVERY, || Event::CgroupReap);
    tasks::start_ticker(&sup.events, steering::CHECK_EVERY, || Event::RecycleCheck);
    if let Some(period) = sup.systemd.as_ref().and_then(|s| s.watchdog_period()) {
        tasks::start_ticker(&sup.events, period, || Event::SystemdWatchdog);
    }
    let resumed = origin.upgraded();
    if sup.cfg.survive_supervisor
        && !resumed
        && let Err(e) = continuity::survive::start_guard(&sup.cfg)
    {
        tracing::warn!("{e:#}; workers left by a ck that dies will not be stopped");
    }
    let result = match origin {
        Origin::Upgrade(handover) => sup.resume(handover),
        Origin::Orphans(state) => sup.take_fleet_back(state),
        Origin::Fresh => {
            tracing::info!(
                name = %sup.cfg.name,
                groups = %sup.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(","),
                workers = sup.cfg.workers,
                policy = ?sup.cfg.policy,
                bpf = bpf_on,
                "ck started"
            );
            match bpf_loading.take() {
                Some(loading) => sup.steer_with(loading.await),
                None => Ok(()),
            }
            .and_then(|()| sup.start_fleet())
        }
    };
    if let Err(e) = &result {
        tracing::error!(resumed, "starting the fleet failed: {e:#}");
        sup.begin_shutdown("startup failure");
    }
    // `--survive-supervisor`: the workers just started are on record before anything else.
    sup.save_state();
    let mut failure = None;
    loop {
        // Until ck has stopped, or a checked upgrade is due (then exec from here).
        let done = |sup: &Supervisor, loading: bool| {
            sup.exec_due() || (sup.stopping && sup.all_stopped() && !loading)
        };
        while !done(&sup, bpf_loading.is_some()) {
            tokio::select! {
                loaded = async { bpf_loading.as_mut().expect("guarded").await }, if bpf_loading.is_some() => {
                    bpf_loading = None;
                    if let Err(e) = sup.steer_with(loaded) {
                        tracing::error!("{e:#}");
                        failure = Some(e);
                        sup.begin_shutdown("BPF set-up failure");
                    }
                }
                Some(event) = events.recv() => sup.handle(event),
                Some((req, reply)) = calls.recv() => sup.control(req, reply),
                Some(call) = metrics_calls.recv() => sup.metrics_call(call),
            }
            sup.tell_systemd();
            sup.save_state();
        }
        if !sup.exec_due() {
            break;
        }
        // `ck upgrade`: from here, on the main thread, with the answers given written.
        sup.settle(&mut events, &mut calls, &mut metrics_calls)
            .await;
        sup.reexec(
            lock.fd(),
            control.listener(),
            metrics_server.as_ref().map(|m| m.listener()),
        );
        // Still here: the exec failed and this image carries on.
    }
    drop(metrics_server);
    sup.finish();
    // The workers' last lines (read to their pipes' end) before ck's own last one.
    if let Some(output) = &sup.output {
        output.finish(Duration::from_millis(500)).await;
    }
    // Answers already given (`ck stop` to a fleet with no worker) reach their clients.
    control.flush(Duration::from_millis(500)).await;
    drop(lock);
    tracing::info!("ck stopped");
    match failure {
        Some(e) => Err(e),
        None => result,
    }
}

impl Supervisor {
    fn all_stopped(&self) -> bool {
        self.slots.values().all(|s| s.worker.is_none())
    }

    /// Opens slots 0..workers and starts a worker on each, then the spares.
    fn start_fleet(&mut self) -> anyhow::Result<()> {
        for _ in 0..self.cfg.workers {
            self.open_slot().map_err(anyhow::Error::msg)?;
        }
        self.replenish_spares();
        Ok(())
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited {
                slot,
                worker,
                status,
            } => self.on_exit(slot, worker, status, exits::ExitReport::Pidfd),
            Event::Exiting(exit) => self.on_exiting(exit),
            Event::ExitWatch(watch) => self.on_exit_watch(watch),
            Event::Notify { slot, worker, msgs } => self.on_notify(slot, worker, msgs),
            Event::Timer { slot, epoch, timer } => {
                self.timer_fired(slot, epoch, timer);
                self.on_timer(slot, epoch, timer)
            }
            Event::Upgrade => self.upgrade(None, None),
            Event::UpgradeChecked(result) => self.on_upgrade_checked(result),
            Event::BecameReady(slot) => executor::fleet::on_ready(self, slot),
            Event::RollCheck => executor::fleet::finish_when_left(self),
            Event::SpareDue => self.replenish_spares(),
            Event::Signal(name) => self.on_stop_signal(name),
            Event::QuietTick => self.on_quiet_tick(),
            Event::Reload => self.reload(None),
            Event::Tick => self.on_tick(),
            Event::ProbeTick => self.on_probe_tick(),
            Event::ProbeResult {
                slot,
                worker,
                result,
            } => self.on_probe_result(slot, worker, result),
            Event::ScaleBy(delta) => {
                let target = self.serving_slots().len() as i64 + i64::from(delta);
                if let Err(e) = self.scale_to(target.max(0) as u32) {
                    tracing::warn!("scaling refused: {e}");
                }
            }
            Event::SteeringCheck => self.check_steering_soon(),
            Event::AdoptScan if !self.stopping => self.scan_unadopted(),
            Event::AdoptScan => {}
            Event::ForeignScan => self.watch_foreign(),
            Event::CgroupReap => self.reap_cgroups(),
            Event::RecycleCheck => self.check_recycling(),
            Event::Listened(event) => self.on_listened(event),
            Event::MemberExited { slot, worker } => self.on_member_exit(slot, worker),
            Event::HolderExited { slot, worker } => self.on_holder_exit(slot, worker),
            Event::Canary {
                group,
                before,
                connected,
            } => {
                self.on_canary(group, before, connected);
                self.systemd_due = true;
            }
            Event::SystemdWatchdog => {
                if let Some(systemd) = &self.systemd {
                    systemd.watchdog();
                }
            }
        }
    }

    fn control(&mut self, req: Request, reply: oneshot::Sender<Response>) {
        let response = match req {
            Request::Status => Response::Status(Box::new(self.status())),
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

    /// Sends a timer event for `slot` after `delay`, tagged with the slot's epoch.
    fn set_timer(&mut self, slot: u32, epoch: u64, timer: Timer, delay: Duration) {
        self.note_timer(slot, epoch, timer, delay);
        tasks::send_after(&self.events, delay, Event::Timer { slot, epoch, timer });
    }

    /// Starts the shutdown (after the quiet wait, if any: see `quiet`): nothing new is steered anywhere, every worker gets SIGTERM, and
    /// SIGKILL after the drain timeout.
    pub(super) fn begin_shutdown(&mut self, reason: &'static str) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        executor::fleet::shutdown(self, reason);
    }

    /// Releases what is left after the last worker exited: sockets, cgroups, pins.
    fn finish(&mut self) {
        self.remove_state();
        for slot in self.slots.values_mut() {
            slot.sockets.clear();
        }
        for cgroup in self.dead_cgroups.drain(..) {
            cgroup.remove();
        }
        self.cgroups = None;
        for group in &mut self.groups {
            group.bpf = None;
        }
        if let Err(e) = pins::remove_instance(&self.cfg.name) {
            tracing::error!("{e}");
        }
    }
}
