//! Taking the loaded BPF programs into use, a step that spans the parts: the groups take the
//! programs, the executor publishes every slot on the fresh maps, every slot's socket joins its
//! group (the program attached through the first), `--adopt`'s hooks are pinned beside the
//! maps, and a canary checks the result; then the exit watch starts.
use std::time::Instant;

use anyhow::Context as _;

use super::{
    event_loop::Supervisor,
    groups::{Join, steering::Loaded},
    lifecycle::Input,
};
use crate::bpf::pins;

impl Supervisor {
    /// Takes the loaded programs into use ([`Supervisor::use_loaded_bpf`]), then starts the exit
    /// watch: after steering, not beside it, since its load takes CPU the first workers'
    /// readiness checks need on a small machine.
    pub(super) fn steer_with(&mut self, loaded: Loaded) -> anyhow::Result<()> {
        self.use_loaded_bpf(loaded)?;
        super::inputs::exits::start(&self.events);
        Ok(())
    }

    /// Takes the loaded programs into use: maps first (slot records, active set, every open
    /// socket), then the program is attached to each group, and a canary checks it.
    fn use_loaded_bpf(&mut self, loaded: Loaded) -> anyhow::Result<()> {
        let started = Instant::now();
        let loaded = loaded.context("the BPF loading thread ended without an answer")??;
        self.groups.take_loaded(loaded, self.cfg.bpf_log)?;
        // Fresh (or resumed) maps: every record and the active set written again.
        let republish = self
            .table
            .slots
            .keys()
            .map(|i| (*i, Input::Republish))
            .collect();
        self.apply_all(republish);
        // After an upgrade or a take-over the pinned `sockets` map holds the earlier ck's
        // already.
        let how = match self.continuity.bpf_resumed {
            true => Join::Resumed,
            false => Join::Fresh,
        };
        self.groups.join_all(&self.table, how)?;
        self.continuity.bpf_resumed = false;
        // `ck rollback`s asked meanwhile: their flip now takes effect as they are answered.
        for reply in std::mem::take(&mut self.ops.rollbacks_waiting) {
            let answer = match self.rollback() {
                Ok(msg) => crate::control::Response::Ok(msg),
                Err(msg) => crate::control::Response::Error(msg),
            };
            let _ = reply.send(answer);
        }
        self.groups.tag_binds(&self.table, self.cfg.adopt);
        // `--adopt`: the hooks outlive this image (an upgrade, a crash) beside the maps.
        if let Some(hooks) = self.inputs.adopt_hooks.as_mut()
            && let Err(e) = hooks.pin(&pins::instance_dir(&self.cfg.name))
        {
            tracing::warn!(
                "{e}; the --adopt hooks detach for the moment ck re-executes or while a dead \
                 ck is away"
            );
        }
        self.groups.warn_if_scanned();
        tracing::info!(
            pins = %pins::instance_dir(&self.cfg.name).display(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF program loaded and attached; checking it with a canary"
        );
        self.check_steering_soon();
        Ok(())
    }

    /// Sends a canary to every group that has a member and no canary out (see
    /// [`super::groups::Groups::check_steering_soon`]).
    pub(super) fn check_steering_soon(&mut self) {
        let base = self.cfg.health.probe_port_base;
        self.groups
            .check_steering_soon(&self.table, base, &self.events);
    }
}
