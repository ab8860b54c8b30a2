//! The start of a run: builds the [`Supervisor`] from where the run comes from (fresh, a
//! handover, a dead ck's state), starts the fleet, runs the event loop until ck stops or
//! re-executes itself, then releases what is left.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::sync::mpsc;

use super::{
    continuity, continuity::origin::Origin, event::Event, event_loop::Supervisor, fleet, groups,
    groups::Group, inputs, machine_config, operations, output, reports, slots, tasks,
};
use crate::{
    control::server::ControlCall,
    metrics,
    os::reexec,
    settings::layers::RunCommandLine,
    settings::run_config::{RunConfig, WorkerOutput},
};

/// Runs `ck run` to completion: returns after a clean shutdown.
pub fn run(cfg: RunConfig) -> anyhow::Result<()> {
    run_with(cfg, None)
}

/// Runs `ck run` to completion like [`run`]; with the `command_line` of a `--config` run,
/// reloads read the file again under it and apply what changed.
pub fn run_with(cfg: RunConfig, command_line: Option<RunCommandLine>) -> anyhow::Result<()> {
    crate::os::memory::give_large_blocks_back();
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
            let (hooks, ring) = inputs::adopt::attach(&cfg, cgroups.as_ref())?;
            (Some(hooks), Some(ring))
        }
        false => (None, None),
    };
    let bpf_on = !cfg.no_bpf;
    let groups = groups::Groups(
        cfg.listen
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
            .collect(),
    );
    // The program loads on a thread of its own (aya parses the kernel's BTF, ~20 ms) while the
    // rest of ck sets up. A fresh fleet waits for it: every socket is tagged for the kernel's
    // connection counts before it listens, and the program is attached to the group's first
    // socket before a second one listens, so the first connection is steered and counted.
    // After an upgrade or a take-back it loads on the pinned maps while the fleet resumes: the
    // program attached before keeps steering, and its pinned counter keeps counting, meanwhile.
    // The connection counter runs on the instance's cgroup where the fleet's sockets are born
    // in it: ck's own (`sockets`), and with --adopt the workers' (see `bpf::conn_hook`).
    let counted_in = cgroups
        .as_ref()
        .filter(|c| c.holds_sockets() || cfg.adopt)
        .map(|c| c.dir().to_path_buf());
    let mut bpf_loading =
        bpf_on.then(|| groups::steering::load_in_background(&cfg, reuse_maps, counted_in));
    if !bpf_on && !origin.upgraded() {
        tracing::warn!(
            "BPF steering is off (--no-bpf): plain SO_REUSEPORT; the kernel hashes connections over \
             every worker, including starting and draining ones, and a closing socket resets its queue"
        );
    }
    let (events_tx, mut events) = mpsc::unbounded_channel();
    if let Some(ring) = listens {
        inputs::adopt::read_listens(ring, events_tx.clone())?;
    }
    let (calls_tx, mut calls) = mpsc::unbounded_channel::<ControlCall>();
    let control = origin.control(&cfg, calls_tx)?;
    let mut sup = Supervisor {
        settings: machine_config::settings(&cfg),
        groups,
        events: events_tx,
        stopping: false,
        table: slots::SlotTable {
            slots: BTreeMap::new(),
            next_worker_id: prior.map_or(0, |h| h.next_worker_id),
            cgroups,
            dead_cgroups: prior.map_or_else(Vec::new, |h| {
                h.dead_cgroups
                    .iter()
                    .filter_map(|(dir, memory)| {
                        crate::os::cgroup::WorkerCgroup::resume(dir.clone(), *memory).ok()
                    })
                    .collect()
            }),
            fd_limit,
            output: match cfg.worker_output {
                WorkerOutput::Capture => Some(output::Hub::start(cfg.log_format)?),
                WorkerOutput::Inherit => None,
            },
        },
        inputs: inputs::Inputs {
            pacer: inputs::pace::Pacer::new(cfg.health.sample_interval),
            exit_watch: None,
            probe_ticker: None,
            adopt_hooks,
            foreign_seen: BTreeSet::new(),
            own_seen: BTreeSet::new(),
            not_serving_seen: BTreeSet::new(),
            backlog_seen: BTreeSet::new(),
            other_protocol_seen: BTreeSet::new(),
            // The health an earlier ck knew of each worker it hands over.
            healths: inputs::healths::Healths::restored(prior.into_iter().flat_map(|h| {
                h.slots.iter().filter_map(|s| {
                    let w = s.worker.as_ref()?;
                    Some((s.index, w.id, w.health))
                })
            })),
        },
        ops: operations::Operations {
            core: fleet::Core {
                roll: None,
                spares: fleet::spares::Pacing {
                    failures: prior.map_or(0, |h| h.spare_failures),
                    due: None,
                },
                // A fleet taken over (an upgrade, a take-back) is not booting.
                spread: match prior {
                    Some(_) => fleet::spread::Spread::closed(),
                    None => fleet::spread::Spread::default(),
                },
                ramps: fleet::slow_start::Ramps::default(),
            },
            roll_reply: None,
            canary_watch: None,
            rollbacks_waiting: Vec::new(),
            canaries: prior.map_or_else(Default::default, |h| metrics::CanaryCounts {
                promoted: h.canaries.0,
                withdrawn: h.canaries.1,
                share: None,
            }),
            reloads: prior.map_or_else(Default::default, |h| metrics::ReloadCounts {
                ok: h.reloads.0,
                aborted: h.reloads.1,
            }),
            config: command_line.map(|c| operations::reconfigure::ConfigSource::new(c, &cfg)),
            quiet: Default::default(),
            slow_start_due: false,
        },
        reports: reports::Reports {
            started: prior.map_or_else(Instant::now, |h| h.started),
            last_ready: Vec::new(),
            metrics_addr: metrics_server.as_ref().map(|m| m.local_addr()),
            systemd: reports::systemd::Notifier::from_env(),
            systemd_due: true,
            udp_rates: Default::default(),
        },
        continuity: continuity::Continuity {
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
        },
        cfg,
    };

    tasks::watch_signals(&sup.events)?;
    // An upgrade blocked these across the exec: the handlers are in place now.
    reexec::unblock_handled().context("unblocking signals")?;
    tasks::start_sampler(&sup.events, sup.inputs.pacer.next_tick.subscribe());
    tasks::start_idle_burn();
    sup.inputs.start_probe_ticker(&sup.cfg, &sup.events);
    // The once-a-second chores, each on its own ticker.
    tasks::start_ticker(&sup.events, groups::steering::CHECK_EVERY, || {
        Event::SteeringCheck
    });
    if sup.cfg.adopt {
        tasks::start_ticker(&sup.events, groups::steering::CHECK_EVERY, || {
            Event::AdoptScan
        });
    }
    tasks::start_ticker(&sup.events, groups::steering::CHECK_EVERY, || {
        Event::ListenScan
    });
    tasks::start_ticker(&sup.events, groups::steering::CHECK_EVERY, || {
        Event::CgroupReap
    });
    tasks::start_ticker(&sup.events, groups::steering::CHECK_EVERY, || {
        Event::RecycleCheck
    });
    if let Some(period) = sup
        .reports
        .systemd
        .as_ref()
        .and_then(|s| s.watchdog_period())
    {
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
            sup.continuity.exec_due() || (sup.stopping && sup.all_stopped() && !loading)
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
                Some(call) = metrics_calls.recv() => sup.reports.metrics_call(sup.view(), call),
            }
            let (reports, view) = sup.reporting();
            reports.tell_systemd(view);
            sup.save_state();
        }
        if !sup.continuity.exec_due() {
            break;
        }
        // `ck upgrade`: from here, on the main thread, with the answers given written.
        sup.finish_before_exec(&mut events, &mut calls, &mut metrics_calls)
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
    if let Some(output) = &sup.table.output {
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
    /// Every worker has exited.
    fn all_stopped(&self) -> bool {
        self.table.slots.values().all(|s| s.worker.is_none())
    }

    /// Opens slots 0..workers and starts a worker on each, then the spares.
    fn start_fleet(&mut self) -> anyhow::Result<()> {
        for _ in 0..self.cfg.workers {
            self.open_slot().map_err(anyhow::Error::msg)?;
        }
        self.replenish_spares();
        Ok(())
    }

    /// Releases what is left after the last worker exited: sockets, cgroups, pins.
    fn finish(&mut self) {
        continuity::survive::remove_state(&self.cfg.name);
        for slot in self.table.slots.values_mut() {
            slot.sockets.clear();
        }
        for cgroup in self.table.dead_cgroups.drain(..) {
            cgroup.remove();
        }
        self.table.cgroups = None;
        for group in &mut self.groups {
            group.bpf = None;
        }
        if let Err(e) = crate::bpf::pins::remove_instance(&self.cfg.name) {
            tracing::error!("{e}");
        }
    }
}
