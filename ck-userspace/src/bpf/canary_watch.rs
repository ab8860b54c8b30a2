//! The kernel's counters a canary is judged by (`--canary-max-resets`,
//! `--canary-max-queue-age`), in one group's program:
//! - `resets`: connections of a slot that its own side aborted, which sends the client a reset
//!   (the connection counter's programs count them as they see the close: see the program's
//!   `conns.rs`). Always counted where the connection counter runs; never zeroed (the watch
//!   reads a baseline).
//! - `queue_ages`: while a canary is watched (`config_flags::WATCH_QUEUES`, its slots listed in
//!   `watched`), the longest time the oldest queued connection had waited, as the select
//!   program read it from kernel memory at each new connection to the group (the program's
//!   `watch.rs`), per CPU. Zeroed for the slots a watch starts on.
//!
//! The third limit, `--canary-max-drops`, needs no program: the kernel counts the connections
//! a listening socket drops (`SO_MEMINFO`, `os::sockets::listen_drops`).
use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, PerCpuValues},
};
use ck_common::{MAX_SLOTS, MAX_WATCHED};

use super::{error::BpfError, object::take};

/// One group's canary counters.
pub struct CanaryWatch {
    watched: Array<MapData, u32>,
    ages: PerCpuArray<MapData, u64>,
    resets: PerCpuArray<MapData, u64>,
    /// Ok when the program reads kernel memory (the queue watch works), else why not.
    reads: Result<(), String>,
    /// The connection counter runs (and so counts resets).
    counted: bool,
}

impl CanaryWatch {
    /// Takes the maps out of `ebpf`; `reads`: whether the loaded program reads kernel memory;
    /// `counted`: whether the connection counter was attached.
    pub(super) fn take(
        ebpf: &mut Ebpf,
        reads: Result<(), String>,
        counted: bool,
    ) -> Result<CanaryWatch, BpfError> {
        Ok(CanaryWatch {
            watched: take(ebpf, "watched")?,
            ages: take(ebpf, "queue_ages")?,
            resets: take(ebpf, "resets")?,
            reads,
            counted,
        })
    }

    /// Why the queue watch cannot work in this group, if it cannot.
    pub fn queue_watch_refused(&self) -> Option<&str> {
        self.reads.as_ref().err().map(String::as_str)
    }

    /// Whether resets are counted here (the connection counter runs, and the kernel's BTF
    /// said where a socket's error lies).
    pub fn counts_resets(&self) -> bool {
        self.counted && super::conns::sk_err_offset() != 0
    }

    /// Lists exactly `slots` (the first [`MAX_WATCHED`]) as watched, their longest waits
    /// zeroed first (none: the watch ends).
    pub(super) fn mark(&mut self, slots: &[u32]) -> Result<(), BpfError> {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        let listed = &slots[..slots.len().min(MAX_WATCHED as usize)];
        for &slot in listed.iter().filter(|s| **s < MAX_SLOTS) {
            let zero =
                PerCpuValues::try_from(vec![0u64; cpus]).map_err(|e| BpfError::MapWrite {
                    map: "queue_ages",
                    error: e.into(),
                })?;
            self.ages
                .set(slot, zero, 0)
                .map_err(super::error::write_err("queue_ages"))?;
        }
        for i in 0..MAX_WATCHED {
            let slot = listed.get(i as usize).copied().unwrap_or(MAX_SLOTS);
            self.watched
                .set(i, slot, 0)
                .map_err(super::error::write_err("watched"))?;
        }
        Ok(())
    }

    /// Resets `slot`'s connections sent, summed over CPUs (None: not counted here).
    pub fn resets(&self, slot: u32) -> Option<u64> {
        if !self.counts_resets() || slot >= MAX_SLOTS {
            return None;
        }
        let values = self.resets.get(&slot, 0).ok()?;
        Some(values.iter().sum())
    }

    /// The longest wait at the head of `slot`'s accept queue seen since its watch started,
    /// over CPUs (None: not watched here).
    pub fn queue_age(&self, slot: u32) -> Option<std::time::Duration> {
        if self.reads.is_err() || slot >= MAX_SLOTS {
            return None;
        }
        let values = self.ages.get(&slot, 0).ok()?;
        let longest = values.iter().copied().max().unwrap_or(0);
        Some(std::time::Duration::from_nanos(longest))
    }
}
