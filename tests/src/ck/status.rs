//! `ck status --json` as the harness reads it: ck's own [`StatusReport`] (every field reads
//! through), with helpers for what the tests ask of it (a slot, ready slots, worker pids,
//! connection counts, the metrics address).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use ::ck::control::{SlotReport, StatusReport};
use serde::Deserialize;

/// `ck status --json`: ck's own [`StatusReport`] (every field reads through), with helpers.
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct Status(
    /// The report as ck sent it.
    pub StatusReport,
);

impl std::ops::Deref for Status {
    type Target = StatusReport;

    fn deref(&self) -> &StatusReport {
        &self.0
    }
}

impl Status {
    /// Slot `index`.
    ///
    /// # Panics
    /// When there is no such slot.
    pub fn slot(&self, index: u32) -> &SlotReport {
        self.slots
            .iter()
            .find(|s| s.slot == index)
            .unwrap_or_else(|| panic!("no slot {index} in {self:#?}"))
    }

    /// The pid of slot `index`'s worker.
    ///
    /// # Panics
    /// When there is no such slot, or it has no worker.
    pub fn worker_pid(&self, index: u32) -> u32 {
        self.slot(index)
            .pid
            .unwrap_or_else(|| panic!("slot {index} has no worker: {self:#?}"))
    }

    /// The slots in state `ready`.
    pub fn ready(&self) -> impl Iterator<Item = &SlotReport> {
        self.slots.iter().filter(|s| s.state == "ready")
    }

    /// Number of slots in state `ready`.
    pub fn ready_count(&self) -> usize {
        self.ready().count()
    }

    /// Pids of every live worker.
    pub fn worker_pids(&self) -> BTreeSet<u32> {
        self.slots.iter().filter_map(|s| s.pid).collect()
    }

    /// Pids of the workers that serve (every live worker but the hot spares).
    pub fn serving_pids(&self) -> Vec<u32> {
        self.slots
            .iter()
            .filter(|s| !s.spare)
            .filter_map(|s| s.pid)
            .collect()
    }

    /// Where `--metrics` listens.
    ///
    /// # Panics
    /// When the instance has no metrics listener.
    pub fn metrics_addr(&self) -> SocketAddr {
        let addr = self
            .metrics
            .as_deref()
            .unwrap_or_else(|| panic!("`ck status` shows no metrics address: {self:#?}"));
        addr.parse()
            .unwrap_or_else(|e| panic!("metrics address {addr:?}: {e}"))
    }

    /// Sum of `migrated` over the slots.
    pub fn migrated(&self) -> u64 {
        self.slots.iter().map(|s| s.migrated).sum()
    }

    /// Each slot's open connections (`connections`).
    ///
    /// # Panics
    /// When a slot has no count.
    pub fn connections(&self) -> BTreeMap<u32, u64> {
        self.slots
            .iter()
            .map(|s| {
                let count = s.connections;
                (
                    s.slot,
                    count.unwrap_or_else(|| panic!("no count: {self:#?}")),
                )
            })
            .collect()
    }
}
