//! `ck drain` / `ck undrain`: one slot, or with `--all` the whole host, out of the active set
//! and back. A drained slot keeps its socket open and its worker serving; with every slot
//! drained the program still chooses among them (the fallback tier of the active set: live
//! slots that are not ready), so connections that still arrive while a balancer has not yet
//! noticed `/readyz`'s 503 are served, never refused.
use crate::control::Response;
use crate::supervisor::{Supervisor, lifecycle::Input};

impl Supervisor {
    /// Why a drain cannot be done now (no BPF steering yet, or none at all), if so.
    fn drain_refused(&self) -> Option<Response> {
        if !self.groups.bpf_loaded() && !self.cfg.no_bpf {
            return Some(Response::Error(
                "BPF steering is still being set up (ck started a moment ago); try again".into(),
            ));
        }
        if !self.groups.bpf_loaded() {
            return Some(Response::Error(
                "draining without closing the socket needs BPF steering, which is off (--no-bpf); \
                 restart ck without --no-bpf"
                    .into(),
            ));
        }
        None
    }

    /// `ck drain SLOT` / `ck undrain SLOT`.
    pub(in crate::supervisor) fn set_drained(&mut self, index: u32, drained: bool) -> Response {
        if let Some(refused) = self.drain_refused() {
            return refused;
        }
        let Some(slot) = self.table.slots.get(&index) else {
            let known: Vec<u32> = self.table.slots.keys().copied().collect();
            return Response::Error(format!(
                "no slot {index}; slots in use: {known:?} (see `ck status`)"
            ));
        };
        if slot.life.drained == drained {
            let word = if drained { "drained" } else { "not drained" };
            return Response::Ok(format!("slot {index} is already {word}"));
        }
        self.apply(index, Input::Drain(drained));
        let word = if drained { "drained" } else { "undrained" };
        Response::Ok(format!("slot {index} {word}"))
    }

    /// `ck drain --all` / `ck undrain --all`: every slot in one batch (one publish), so the
    /// host leaves or rejoins rotation at once.
    pub(in crate::supervisor) fn set_all_drained(&mut self, drained: bool) -> Response {
        if let Some(refused) = self.drain_refused() {
            return refused;
        }
        let changed: Vec<u32> = self
            .table
            .slots
            .values()
            .filter(|s| s.life.drained != drained)
            .map(|s| s.index)
            .collect();
        let word = if drained { "drained" } else { "undrained" };
        if !changed.is_empty() {
            self.apply_all(
                changed
                    .iter()
                    .map(|i| (*i, Input::Drain(drained)))
                    .collect(),
            );
        }
        match drained {
            true => tracing::info!(
                slots = ?changed,
                "host drained (ck drain --all): /readyz answers 503, every socket stays open and \
                 connections that still arrive are served"
            ),
            false => tracing::info!(slots = ?changed, "host undrained (ck undrain --all)"),
        }
        Response::Ok(format!(
            "every slot {word} ({} changed: {changed:?})",
            changed.len()
        ))
    }
}
