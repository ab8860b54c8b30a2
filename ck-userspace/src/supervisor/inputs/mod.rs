//! The input sources: exits, notify and health signals, readiness detection, the accept
//! probe, `--adopt`'s hooks and members, foreign listeners and what workers listen on by
//! themselves, connections workers leave unread. The rule: they turn what the OS
//! says into lifecycle inputs and findings ([`Found`]) and return them; the supervisor's top
//! (`feed`) feeds them to the machine. They decide nothing about the fleet (the fleet core
//! does), never apply an input, and take the parts they read as arguments, never the
//! supervisor.

pub(super) mod adopt;
pub(super) mod detect;
pub(super) mod exits;
pub(super) mod foreign;
pub(super) mod health;
pub(super) mod healths;
pub(super) mod listens;
pub(super) mod members;
pub(super) mod notify;
pub(super) mod pace;
pub(super) mod probes;
pub(super) mod queue_motion;
pub(super) mod unread;

use std::collections::BTreeSet;

use crate::supervisor::slots::SlotTable;

/// What an input source found about one slot's worker, in the words the supervisor feeds to the
/// lifecycle machine: an input as it is, readiness (which `notify::ready` turns into one), or
/// a health signal (which `health::set` turns into one when the verdict changes).
pub(in crate::supervisor) enum Found {
    /// An input for the machine.
    Input(crate::supervisor::lifecycle::Input),
    /// The worker is ready, for this reason.
    Ready(String),
    /// One health signal set (`bad`) or cleared.
    Health {
        signal: health::Signal,
        bad: bool,
        detail: String,
    },
}

/// The sources of inputs.
pub(in crate::supervisor) struct Inputs {
    /// Pace of queue sampling (see `pace::Pacer`).
    pub pacer: pace::Pacer,
    /// The exit watch, where the kernel allows it.
    pub exit_watch: Option<crate::bpf::exits::ExitWatch>,
    /// The task that sends `ProbeTick`s, while probes are on.
    pub probe_ticker: Option<tokio::task::AbortHandle>,
    /// `--adopt`: the hooks on the instance's cgroup (kept alive: dropping them detaches them
    /// unless pinned, see `steering`).
    pub adopt_hooks: Option<crate::bpf::adopt::AdoptHooks>,
    /// Inodes of foreign listeners already logged.
    pub foreign_seen: BTreeSet<u64>,
    /// Inodes of the workers' own listeners on ports of no group already logged.
    pub own_seen: BTreeSet<u64>,
    /// Pids of the workers that cannot serve the socket ck passed them, already warned of.
    pub not_serving_seen: BTreeSet<u32>,
    /// Pids of the workers that lowered their socket's backlog, already warned of.
    pub backlog_seen: BTreeSet<u32>,
    /// `--adopt`: ports (and whether UDP) that workers bound in a protocol the instance has no
    /// group for, already logged (once per instance, not once per worker).
    pub other_protocol_seen: BTreeSet<(u16, bool)>,
    /// Each slot's current worker's health signals.
    pub healths: healths::Healths,
}

impl Inputs {
    /// The exit watch is loaded: it watches every worker from now on, the running ones first.
    pub fn start_exit_watch(&mut self, mut watch: crate::bpf::exits::ExitWatch, table: &SlotTable) {
        // Member slots (`--adopt`'s further listeners) are left to their own watcher.
        for (index, slot) in table
            .slots
            .iter()
            .filter(|(_, s)| s.life.member_of.is_none())
        {
            if let Some(worker) = &slot.worker {
                watch.watch(worker.pid, *index);
            }
        }
        self.exit_watch = Some(watch);
    }

    /// Starts (again) the ticker that probes every worker at `--probe-interval`, when probes
    /// are on; stops the old one.
    pub fn start_probe_ticker(
        &mut self,
        cfg: &crate::settings::run_config::RunConfig,
        events: &tokio::sync::mpsc::UnboundedSender<crate::supervisor::event::Event>,
    ) {
        if let Some(ticker) = self.probe_ticker.take() {
            ticker.abort();
        }
        if cfg.health.probe.is_some() {
            let period = cfg.health.probe_interval;
            self.probe_ticker = Some(crate::supervisor::tasks::start_ticker(
                events,
                period,
                || crate::supervisor::event::Event::ProbeTick,
            ));
        }
    }

    /// Watches slot `index`'s new worker `pid`.
    pub fn watch_exit(&mut self, index: u32, pid: u32) {
        if let Some(watch) = &mut self.exit_watch {
            watch.watch(pid, index);
        }
    }
}
