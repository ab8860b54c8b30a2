//! Where a run starts from: nothing (a new fleet), the state an upgrade handed over (this image
//! replaced another with `ck upgrade`), or the state file of a ck that died with
//! `--survive-supervisor`; and the run's own resources (instance lock, metrics and control
//! listeners, cgroup, open-file limit) taken from that state or made anew.
use anyhow::Context as _;
use tokio::sync::mpsc;

use crate::supervisor::{continuity::handover::Handover, continuity::resume, continuity::survive};
use crate::{
    bpf::pins,
    control::{self, server::ControlCall, server::ControlServer},
    metrics::{self, server::MetricsServer},
    os::cgroup::InstanceCgroup,
    os::fd_limit::FdLimit,
    os::instance::{self, InstanceLock},
    os::reexec,
    os::sockets,
    settings::run_config::RunConfig,
};

/// What a run starts from.
pub(in crate::supervisor) enum Origin {
    /// Nothing: a new fleet.
    Fresh,
    /// `ck upgrade`: the state (and descriptors) the image before this one handed over.
    Upgrade(Handover),
    /// `--survive-supervisor`: the state file of a ck of the same name that died.
    Orphans(Handover),
}

impl Origin {
    /// Takes the instance lock (inherited after an upgrade) and finds where the run starts.
    pub(in crate::supervisor) fn find(cfg: &RunConfig) -> anyhow::Result<(Origin, InstanceLock)> {
        if let Some(handover) = resume::take_handover()? {
            let lock = InstanceLock::inherit(&cfg.name, reexec::inherited(handover.lock_fd)?)?;
            return Ok((Origin::Upgrade(handover), lock));
        }
        let lock = InstanceLock::acquire(&cfg.name)?;
        // The lock is ours: a ck that wrote a state file is gone, its fleet may run on.
        let origin = match survive::read_state(&cfg.name)? {
            Some(state) => Origin::Orphans(state),
            None => Origin::Fresh,
        };
        Ok((origin, lock))
    }

    /// The state an earlier ck left (its counters go on), if any.
    pub(in crate::supervisor) fn prior(&self) -> Option<&Handover> {
        match self {
            Origin::Fresh => None,
            Origin::Upgrade(h) | Origin::Orphans(h) => Some(h),
        }
    }

    /// This image replaced another (`ck upgrade`).
    pub(in crate::supervisor) fn upgraded(&self) -> bool {
        matches!(self, Origin::Upgrade(_))
    }

    /// The program is to be loaded on the maps an earlier ck pinned (and filled).
    pub(in crate::supervisor) fn reuse_maps(&self, name: &str) -> bool {
        match self {
            Origin::Fresh => false,
            Origin::Upgrade(_) => true,
            Origin::Orphans(_) => pins::instance_dir(name).exists(),
        }
    }

    /// A new fleet's ports must be free; an earlier fleet's workers hold them.
    pub(in crate::supervisor) fn check_ports(&self, cfg: &RunConfig) -> anyhow::Result<()> {
        if matches!(self, Origin::Fresh) {
            for addr in &cfg.listen {
                sockets::ensure_free(*addr)?;
            }
        }
        Ok(())
    }

    /// The open-file limit to give workers: the one the first ck was started with.
    pub(in crate::supervisor) fn fd_limit(&self) -> Option<FdLimit> {
        let raised = crate::os::fd_limit::raise();
        self.prior().map_or(raised, |h| h.fd_limit)
    }

    /// `--metrics`: the listener handed over, or a new one.
    pub(in crate::supervisor) fn metrics(
        &self,
        cfg: &RunConfig,
        calls: mpsc::UnboundedSender<metrics::Call>,
    ) -> anyhow::Result<Option<MetricsServer>> {
        Ok(match self {
            Origin::Upgrade(h) => match h.metrics_fd {
                Some(fd) => {
                    let listener = std::net::TcpListener::from(reexec::inherited(fd)?);
                    Some(metrics::server::serve(listener, calls)?)
                }
                None => None,
            },
            _ => cfg
                .metrics
                .map(|addr| metrics::server::start(addr, calls))
                .transpose()?,
        })
    }

    /// The control socket: the listener handed over, or a new one.
    pub(in crate::supervisor) fn control(
        &self,
        cfg: &RunConfig,
        calls: mpsc::UnboundedSender<ControlCall>,
    ) -> anyhow::Result<ControlServer> {
        match self {
            Origin::Upgrade(h) => control::server::serve_listener(
                std::os::unix::net::UnixListener::from(reexec::inherited(h.control_fd)?),
                calls,
            ),
            _ => control::server::start(&instance::control_path(&cfg.name), calls),
        }
    }

    /// The instance's cgroup: the earlier ck's, where it is still there, or a new one.
    pub(in crate::supervisor) fn cgroups(
        &self,
        cfg: &RunConfig,
    ) -> anyhow::Result<Option<InstanceCgroup>> {
        match self.prior().and_then(|p| p.cgroup.clone()) {
            Some((dir, memory)) if dir.exists() => Ok(Some(InstanceCgroup::resume(dir, memory))),
            _ => crate::supervisor::slots::cgroups::create(cfg).context("the instance's cgroup"),
        }
    }
}
