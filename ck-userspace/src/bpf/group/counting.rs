//! A group's open-connection counts, through its counter (`bpf::conns`): making a slot's
//! sockets count (a tag, its slot's cgroup, or with `--adopt` its worker's), reading the
//! counts, and writing them where `least-conn` reads samples.
use socket2::Socket;

use super::BpfGroup;
use crate::bpf::{
    bind_tags::BindTagger,
    conn_steering::ConnSteering,
    error::{BpfError, write_err},
};

impl BpfGroup {
    /// Writes each slot's kernel-counted open connections to `conn_samples`, for least-conn
    /// where the program cannot sum them ([`ConnSteering::Sampled`]); nothing otherwise.
    pub fn sample_connections(
        &mut self,
        slots: impl IntoIterator<Item = u32>,
    ) -> Result<(), BpfError> {
        if !matches!(self.conn_steering, Some(ConnSteering::Sampled(_))) {
            return Ok(());
        }
        let Ok(counter) = &self.conns else {
            return Ok(());
        };
        for slot in slots {
            let open = u32::try_from(counter.count(slot).max(0)).unwrap_or(u32::MAX);
            // Written only when it changed: one syscall per change, not per slot and sample.
            if self.conn_sampled.get(&slot) != Some(&open) {
                self.conn_samples
                    .set(slot, open, 0)
                    .map_err(write_err("conn_samples"))?;
                self.conn_sampled.insert(slot, open);
            }
        }
        Ok(())
    }

    /// Tags `socket` so the kernel counts its connections for `slot` (when it counts them).
    /// Tagged before it listens, every connection it takes counts; tagged later, those it
    /// took before count nowhere.
    pub fn tag(&mut self, slot: u32, socket: &Socket) {
        if let Ok(conns) = &mut self.conns
            && let Err(e) = conns.tag(&mut self.ebpf, slot, socket)
        {
            tracing::warn!(
                slot,
                "open connections of this socket will not be counted: {e:#}; ck status \
                 and /metrics undercount the slot (restart ck to tag it again)"
            );
        }
    }

    /// `--adopt`: the kernel counts the connections of the sockets that processes in cgroups
    /// under `dir` bind to `addr`'s port (of either family with `any_family`) from the first
    /// one: on the workers' cgroups (`worker_cgroups`), or, in an instance begun with tags, by
    /// tagging them as they bind (`bind_tags`; a failure leaves tagging to adoption). Only
    /// where the kernel counts connections.
    pub fn tag_binds(
        &mut self,
        dir: &std::path::Path,
        addr: std::net::SocketAddr,
        any_family: bool,
    ) {
        if let Some(workers) = self.conns.as_mut().ok().and_then(|c| c.workers()) {
            workers.watch(addr, any_family);
            return;
        }
        if self.conns.is_err() || self.bind_tagger.is_some() {
            return;
        }
        match BindTagger::attach(&mut self.ebpf, dir, addr, any_family) {
            Ok(tagger) => self.bind_tagger = Some(tagger),
            Err(e) => tracing::warn!(
                "adopted sockets are tagged for the connection counts when adopted, not when \
                 bound: {e:#}; connections they take before that are not counted"
            ),
        }
    }

    /// `--adopt`: sockets bound by the processes of the worker cgroup `dir` count for `slot`.
    pub fn bind_slot(&mut self, dir: &std::path::Path, slot: u32) {
        if let Some(workers) = self.conns.as_mut().ok().and_then(|c| c.workers()) {
            if let Err(e) = workers.count(&mut self.ebpf, dir, slot) {
                tracing::warn!(
                    slot,
                    "the connections of the worker's socket will not be counted: {e:#}; ck \
                     status and /metrics undercount the slot"
                );
            }
            return;
        }
        if let Some(tagger) = &mut self.bind_tagger
            && let Err(e) = tagger.add(dir, slot)
        {
            tracing::warn!(slot, "{e:#}; the worker's socket is tagged once adopted");
        }
    }

    /// `--adopt`: the worker cgroup `dir` is going.
    pub fn unbind_slot(&mut self, dir: &std::path::Path) {
        if let Some(workers) = self.conns.as_mut().ok().and_then(|c| c.workers()) {
            workers.forget(dir);
        }
        if let Some(tagger) = &mut self.bind_tagger {
            tagger.remove(dir);
        }
    }

    /// Open connections of `slot` counted by the kernel (None: it does not count them here,
    /// see [`BpfGroup::conn_count_fallback`]).
    pub fn connections(&self, slot: u32) -> Option<i64> {
        self.conns.as_ref().ok().map(|c| c.count(slot))
    }

    /// Why open connections are not counted by the kernel in this group (None: they are).
    pub fn conn_count_fallback(&self) -> Option<&str> {
        self.conns.as_ref().err().map(String::as_str)
    }
}
