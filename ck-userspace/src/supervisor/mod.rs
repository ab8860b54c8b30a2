//! The supervisor: owns the slots' sockets, starts and watches workers, keeps the BPF maps true
//! to the fleet, answers the control socket and shuts everything down cleanly.
//!
//! Everything runs on one current-thread tokio runtime; all state lives in [`Supervisor`] and is
//! changed only by its event loop, one [`Event`] at a time. Tasks (child waiters, notify readers,
//! timers, the control server) only send events.
mod health;
mod publish;
mod roll;
mod scale;
mod slot;
mod steering;
mod workers;

use std::{
    collections::BTreeMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, oneshot},
};

use slot::Slot;

use crate::{
    bpf::{BpfGroup, pins},
    config::{ListenAddr, RunConfig},
    control::{self, Request, Response, server::ControlCall},
    instance::{self, InstanceLock},
    notify::NotifyMsg,
    sockets,
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
    /// A worker sent notify messages.
    Notify {
        slot: u32,
        worker: u64,
        msgs: Vec<NotifyMsg>,
    },
    /// A timer set for a worker (or a slot's restart) fired.
    Timer {
        slot: u32,
        worker: u64,
        kind: TimerKind,
    },
    /// A termination signal arrived.
    Signal(&'static str),
    /// SIGHUP: rolling restart.
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
        result: Result<crate::probe::ProbeAnswer, String>,
    },
}

/// Timers the supervisor sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimerKind {
    /// `auto` readiness: a worker silent this long is taken as ready.
    ReadyGrace,
    /// A worker not ready by now is replaced.
    ReadyTimeout,
    /// A stopping worker still alive now gets SIGKILL.
    Kill,
    /// Start a worker on the slot (after backoff or cool-down).
    Restart,
}

/// One listen group at run time.
pub(crate) struct Group {
    addr: ListenAddr,
    name: String,
    bpf: Option<BpfGroup>,
}

/// The supervisor's state.
pub struct Supervisor {
    cfg: RunConfig,
    groups: Vec<Group>,
    slots: BTreeMap<u32, Slot>,
    events: mpsc::UnboundedSender<Event>,
    started: Instant,
    stopping: bool,
    next_worker_id: u64,
    active: Vec<u32>,
    roll: Option<roll::Roll>,
    /// Pace of queue sampling (see `health::Pacer`).
    pacer: health::Pacer,
}

/// Runs `ck run` to completion: returns after a clean shutdown.
pub fn run(cfg: RunConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run_async(cfg))
}

async fn run_async(cfg: RunConfig) -> anyhow::Result<()> {
    let lock = InstanceLock::acquire(&cfg.name)?;
    for addr in &cfg.listen {
        sockets::ensure_free(*addr)?;
    }
    let bpf_on = !cfg.no_bpf;
    let groups: Vec<Group> = cfg
        .listen
        .iter()
        .map(|addr| Group {
            addr: *addr,
            name: addr.group_name(),
            bpf: None,
        })
        .collect();
    // The program loads on a thread of its own (aya parses the kernel's BTF, ~20 ms) while the
    // workers start; it is attached as soon as it is ready (see `steering`).
    let mut bpf_loading = bpf_on.then(|| steering::load_in_background(&cfg));
    if !bpf_on {
        tracing::warn!(
            "BPF steering is off (--no-bpf): plain SO_REUSEPORT; the kernel hashes connections over \
             every worker, including starting and draining ones, and a closing socket resets its queue"
        );
    }
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<ControlCall>();
    control::server::start(&instance::control_path(&cfg.name), calls_tx)?;
    let mut sup = Supervisor {
        groups,
        slots: BTreeMap::new(),
        events: events_tx,
        started: Instant::now(),
        stopping: false,
        next_worker_id: 0,
        active: Vec::new(),
        roll: None,
        pacer: health::Pacer::new(cfg.health.sample_interval),
        cfg,
    };
    watch_signals(&sup.events)?;
    start_sampler(&sup.events, sup.pacer.period.clone());
    if sup.cfg.health.probe.is_some() {
        start_ticker(&sup.events, sup.cfg.health.probe_interval, || {
            Event::ProbeTick
        });
    }
    tracing::info!(
        name = %sup.cfg.name,
        groups = %sup.group_names().join(","),
        workers = sup.cfg.workers,
        policy = ?sup.cfg.policy,
        bpf = bpf_on,
        "ck started"
    );
    let result = sup.start_fleet();
    if let Err(e) = &result {
        tracing::error!("starting the fleet failed: {e:#}");
        sup.begin_shutdown("startup failure");
    }
    let mut failure = None;
    while !(sup.stopping && sup.all_stopped() && bpf_loading.is_none()) {
        tokio::select! {
            loaded = async { bpf_loading.as_mut().expect("guarded").await }, if bpf_loading.is_some() => {
                bpf_loading = None;
                if let Err(e) = sup.adopt_bpf(loaded) {
                    tracing::error!("{e:#}");
                    failure = Some(e);
                    sup.begin_shutdown("BPF set-up failure");
                }
            }
            Some(event) = events.recv() => sup.handle(event),
            Some((req, reply)) = calls.recv() => sup.control(req, reply),
        }
    }
    sup.finish();
    drop(lock);
    tracing::info!("ck stopped");
    match failure {
        Some(e) => Err(e),
        None => result,
    }
}

/// Sends [`Event::Tick`] every `period` (microseconds, changed by the supervisor as it goes:
/// fast while some queue is non-empty, slow while all are idle) until the event loop is gone.
fn start_sampler(events: &mpsc::UnboundedSender<Event>, period: Arc<AtomicU64>) {
    let events = events.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_micros(period.load(Ordering::Relaxed))).await;
            if events.send(Event::Tick).is_err() {
                return;
            }
        }
    });
}

/// Sends `event()` every `period` until the event loop is gone.
fn start_ticker(events: &mpsc::UnboundedSender<Event>, period: Duration, event: fn() -> Event) {
    let events = events.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if events.send(event()).is_err() {
                return;
            }
        }
    });
}

fn watch_signals(events: &mpsc::UnboundedSender<Event>) -> anyhow::Result<()> {
    /// A signal, its name, and the event it becomes.
    type Watched = (SignalKind, &'static str, fn() -> Event);
    let signals: [Watched; 5] = [
        (SignalKind::terminate(), "SIGTERM", || {
            Event::Signal("SIGTERM")
        }),
        (SignalKind::interrupt(), "SIGINT", || {
            Event::Signal("SIGINT")
        }),
        (SignalKind::hangup(), "SIGHUP", || Event::Reload),
        (SignalKind::from_raw(libc::SIGTTIN), "SIGTTIN", || {
            Event::ScaleBy(1)
        }),
        (SignalKind::from_raw(libc::SIGTTOU), "SIGTTOU", || {
            Event::ScaleBy(-1)
        }),
    ];
    for (kind, name, event) in signals {
        let mut stream = signal(kind).with_context(|| format!("installing a {name} handler"))?;
        let events = events.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if events.send(event()).is_err() {
                    return;
                }
            }
        });
    }
    Ok(())
}

impl Supervisor {
    fn group_names(&self) -> Vec<String> {
        self.groups.iter().map(|g| g.name.clone()).collect()
    }

    fn bpf_on(&self) -> bool {
        self.groups.iter().any(|g| g.bpf.is_some())
    }

    fn all_stopped(&self) -> bool {
        self.slots.values().all(|s| s.worker.is_none())
    }

    /// Opens slots 0..workers and starts a worker on each.
    fn start_fleet(&mut self) -> anyhow::Result<()> {
        for index in 0..self.cfg.workers {
            let slot = self.new_slot(index);
            self.slots.insert(index, slot);
            self.start_worker(index)?;
        }
        Ok(())
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Exited {
                slot,
                worker,
                status,
            } => self.on_exit(slot, worker, status),
            Event::Notify { slot, worker, msgs } => self.on_notify(slot, worker, msgs),
            Event::Timer { slot, worker, kind } => self.on_timer(slot, worker, kind),
            Event::Signal(name) => {
                if !self.stopping {
                    tracing::info!(signal = name, "stopping: draining every worker");
                    self.begin_shutdown(name);
                } else if name == "SIGINT" {
                    // A second Ctrl-C: the person at the terminal does not want to wait.
                    tracing::warn!(signal = name, "second interrupt: killing every worker now");
                    self.kill_all();
                } else {
                    tracing::info!(
                        signal = name,
                        "already stopping; send SIGINT again to kill now"
                    );
                }
            }
            Event::Reload => self.begin_reload(None),
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
        }
    }

    fn control(&mut self, req: Request, reply: oneshot::Sender<Response>) {
        let response = match req {
            Request::Status => Response::Status(Box::new(self.status())),
            Request::Drain { slot } => self.set_drained(slot, true),
            Request::Undrain { slot } => self.set_drained(slot, false),
            Request::Stop => {
                tracing::info!("stop requested on the control socket: draining every worker");
                self.begin_shutdown("ck stop");
                Response::Ok("stopping".into())
            }
            Request::Scale { workers } => match self.scale_to(workers) {
                Ok(msg) => Response::Ok(msg),
                Err(msg) => Response::Error(msg),
            },
            // Answered when the roll ends.
            Request::Reload => return self.begin_reload(Some(reply)),
        };
        let _ = reply.send(response);
    }

    fn set_drained(&mut self, index: u32, drained: bool) -> Response {
        if !self.bpf_on() && !self.cfg.no_bpf {
            return Response::Error(
                "BPF steering is still being set up (ck started a moment ago); try again".into(),
            );
        }
        if !self.bpf_on() {
            return Response::Error(
                "draining without closing the socket needs BPF steering, which is off (--no-bpf); \
                 restart ck without --no-bpf"
                    .into(),
            );
        }
        let Some(slot) = self.slots.get_mut(&index) else {
            let known: Vec<u32> = self.slots.keys().copied().collect();
            return Response::Error(format!(
                "no slot {index}; slots in use: {known:?} (see `ck status`)"
            ));
        };
        if slot.drained == drained {
            let word = if drained { "drained" } else { "not drained" };
            return Response::Ok(format!("slot {index} is already {word}"));
        }
        slot.drained = drained;
        let pid = slot.worker.as_ref().map(|w| w.pid).unwrap_or(0);
        if drained {
            tracing::info!(slot = index, pid, reason = "ck drain", "worker draining");
        } else {
            tracing::info!(
                slot = index,
                pid,
                reason = "ck undrain",
                "worker back in the active set"
            );
        }
        self.publish();
        let word = if drained { "drained" } else { "undrained" };
        Response::Ok(format!("slot {index} {word}"))
    }

    /// Sends a timer event for worker `worker` of `slot` after `delay` (for a restart: the
    /// worker that crashed).
    fn set_timer(&self, slot: u32, worker: u64, kind: TimerKind, delay: Duration) {
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = events.send(Event::Timer { slot, worker, kind });
        });
    }

    /// Starts the shutdown: nothing new is steered anywhere, every worker gets SIGTERM, and
    /// SIGKILL after the drain timeout.
    fn begin_shutdown(&mut self, reason: &'static str) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.finish_roll(Err("rolling restart aborted: ck is stopping".into()));
        self.publish();
        let indices: Vec<u32> = self.slots.keys().copied().collect();
        for index in indices {
            self.stop_worker(index, reason);
        }
    }

    /// Releases what is left after the last worker exited: sockets, pins.
    fn finish(&mut self) {
        for slot in self.slots.values_mut() {
            slot.sockets.clear();
        }
        for group in &mut self.groups {
            group.bpf = None;
        }
        if let Err(e) = pins::remove_instance(&self.cfg.name) {
            tracing::error!("{e}");
        }
    }
}
