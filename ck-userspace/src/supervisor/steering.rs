//! Setting up BPF steering: loading the program and its maps for every group on a thread of its
//! own while the first workers start, then adopting them into the running supervisor: maps
//! filled (slot records, active set, sockets) before the program is attached, so that its first
//! run finds a complete picture. Until then the group is a plain `SO_REUSEPORT` group, as it
//! would be anyway while every worker is still starting.
use std::time::Instant;

use anyhow::Context as _;
use tokio::sync::oneshot;

use super::Supervisor;
use crate::{
    bpf::{BpfGroup, pins},
    config::RunConfig,
};

/// A load under way; resolves to the groups' programs in group order.
pub(super) type Loading = oneshot::Receiver<anyhow::Result<Vec<BpfGroup>>>;

/// Starts loading the program of every group of `cfg` on its own thread.
pub(super) fn load_in_background(cfg: &RunConfig) -> Loading {
    let (tx, rx) = oneshot::channel();
    let cfg = cfg.clone();
    std::thread::spawn(move || {
        let _ = tx.send(load(&cfg));
    });
    rx
}

/// Mounts bpffs if needed, removes stale pins of the same name, and loads and pins one program
/// per group. On failure nothing is left pinned.
fn load(cfg: &RunConfig) -> anyhow::Result<Vec<BpfGroup>> {
    pins::ensure_bpffs()?;
    if pins::remove_stale(&cfg.name)? {
        tracing::warn!(
            name = %cfg.name,
            dir = %pins::instance_dir(&cfg.name).display(),
            "removed stale pins left by an earlier instance that did not stop cleanly"
        );
    }
    let mut loaded = Vec::new();
    for addr in &cfg.listen {
        match BpfGroup::load(
            &cfg.name,
            &addr.group_name(),
            cfg.policy.code(),
            cfg.health.probe_port_base,
        ) {
            Ok(bpf) => loaded.push(bpf),
            Err(e) => {
                drop(loaded);
                let _ = pins::remove_instance(&cfg.name);
                return Err(e.into());
            }
        }
    }
    Ok(loaded)
}

impl Supervisor {
    /// Takes the loaded programs into use: maps first (slot records, active set, every open
    /// socket), then the program is attached to each group.
    pub(super) fn adopt_bpf(
        &mut self,
        loaded: Result<anyhow::Result<Vec<BpfGroup>>, oneshot::error::RecvError>,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        let loaded = loaded.context("the BPF loading thread ended without an answer")??;
        for (group, mut bpf) in self.groups.iter_mut().zip(loaded) {
            if self.cfg.bpf_log {
                bpf.forward_logs()?;
            }
            group.bpf = Some(bpf);
        }
        self.publish();
        for (position, group) in self.groups.iter_mut().enumerate() {
            let Some(bpf) = group.bpf.as_mut() else {
                continue;
            };
            let mut first = None;
            for slot in self.slots.values() {
                if let Some(socket) = slot.sockets.get(position) {
                    bpf.insert(slot.index, socket)?;
                    first.get_or_insert(socket);
                }
            }
            if let Some(socket) = first {
                bpf.attach(socket)?;
            }
        }
        tracing::info!(
            pins = %pins::instance_dir(&self.cfg.name).display(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF steering on"
        );
        Ok(())
    }
}
