//! The canary's watch (`--canary-max-resets`, `--canary-max-drops`,
//! `--canary-max-queue-age`): when a canary goes in, what the kernel has counted for its
//! slots so far is noted (and their queues watched, for the queue-age limit); every
//! [`CHECK_EVERY`] the counts since are compared with the limits (`fleet::canary::crossed`),
//! and the first slot past one withdraws the canary, with the count as its reason. The watch
//! ends with the canary's verdict.
//!
//! The queue ages are read by the program at each new connection to the group. A canary that
//! stopped accepting may get none: clients that wait on it (wrk's, a pool's) send nothing
//! more. So when a canary's queue holds connections and none was sent to it since the last
//! check, ck sends one probe connection to a worker of the current release ([`nudge`]): its
//! selection reads the canary's queue like any other.
use std::{collections::BTreeMap, time::Duration};

use crate::os::probe::{self, conn::ProbeConn};
use crate::settings::choices::CanaryLimits;
use crate::supervisor::{
    fleet::canary::{Counted, crossed},
    groups::Groups,
    inputs::healths::Healths,
    slots::SlotTable,
};

/// How often a watched canary's counts are read: a withdrawal comes at most this late after
/// the kernel counted past a limit.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A canary being watched.
pub(in crate::supervisor) struct CanaryWatch {
    limits: CanaryLimits,
    /// Each canary slot's counts when it went in.
    before: BTreeMap<u32, Counted>,
    /// Each canary slot's connections sent, at the last check.
    sent: BTreeMap<u32, u64>,
}

impl CanaryWatch {
    /// Starts watching the canary `slots` against `limits` (None: no limit set).
    pub fn start(
        limits: CanaryLimits,
        slots: &[u32],
        groups: &mut Groups,
        table: &SlotTable,
    ) -> Option<CanaryWatch> {
        if !limits.any() {
            return None;
        }
        if limits.max_queue_age_ms.is_some() {
            groups.watch_queues(slots);
        }
        let before = slots
            .iter()
            .map(|&slot| (slot, groups.counted(table, slot)))
            .collect();
        tracing::info!(
            slots = ?slots,
            limits = %limits.describe(),
            reason = "ck reload --canary",
            "canary watched: withdrawn past a limit the kernel counts"
        );
        Some(CanaryWatch {
            limits,
            before,
            sent: BTreeMap::new(),
        })
    }

    /// Whether it watches exactly `slots`.
    pub fn watches(&self, slots: &[u32]) -> bool {
        self.before.keys().copied().eq(slots.iter().copied())
    }

    /// The first canary slot past a limit now, and why (the withdrawal adds how many new
    /// connections it was sent, once it is out of the active set).
    pub fn crossed(&self, groups: &Groups, table: &SlotTable) -> Option<(u32, String)> {
        self.before.iter().find_map(|(&slot, before)| {
            let now = groups.counted(table, slot);
            Some((slot, crossed(&self.limits, before, &now)?))
        })
    }

    /// What the kernel counted for the canary since it went in, over its slots: `resets 0,
    /// drops 0, longest queue wait 3 ms` (the counts its limits name).
    pub fn so_far(&self, groups: &Groups, table: &SlotTable) -> String {
        let (mut resets, mut drops, mut age) = (0, 0, Duration::ZERO);
        for (&slot, before) in &self.before {
            let now = groups.counted(table, slot);
            let since = |now: Option<u64>, before: Option<u64>| {
                now.unwrap_or(0).saturating_sub(before.unwrap_or(0))
            };
            resets += since(now.resets, before.resets);
            drops += since(now.drops, before.drops);
            age = age.max(now.queue_age.unwrap_or_default());
        }
        let mut parts = Vec::new();
        if self.limits.max_resets.is_some() {
            parts.push(format!("resets {resets}"));
        }
        if self.limits.max_drops.is_some() {
            parts.push(format!("drops {drops}"));
        }
        if self.limits.max_queue_age_ms.is_some() {
            parts.push(format!("longest queue wait {} ms", age.as_millis()));
        }
        parts.join(", ")
    }

    /// Sends a probe connection to a worker of the current release (one not probed now) when
    /// a canary slot's queue holds connections and none was sent to it since the last check:
    /// its selection reads the canary's queue (see the module's comment). Probes start from
    /// `probe_base`.
    pub fn nudge(
        &mut self,
        groups: &Groups,
        table: &SlotTable,
        healths: &Healths,
        probe_base: u16,
    ) {
        if self.limits.max_queue_age_ms.is_none() {
            return;
        }
        let Some((position, group)) = groups.iter().enumerate().find(|(_, g)| !g.addr.is_udp())
        else {
            return;
        };
        let mut stuck = false;
        for &slot in self.before.keys() {
            let sent = groups.slot_stats(slot).selected;
            let moved = self.sent.insert(slot, sent) != Some(sent);
            let socket = table.slots.get(&slot).and_then(|s| s.sockets.get(position));
            let queued = socket.and_then(|s| crate::os::sockets::accept_queue_len(s).ok());
            stuck |= !moved && queued.is_some_and(|n| n > 0);
        }
        if !stuck {
            return;
        }
        let current = table.slots.values().find(|s| {
            !self.before.contains_key(&s.index)
                && s.life.serving()
                && healths.of_worker(s).is_some_and(|h| !h.probing)
        });
        let target = probe::target_of(group.addr.addr);
        let source = current.and_then(|s| probe::source_of(target, probe_base, s.index));
        // Dropped at once: ended politely in the background. A port still held by an earlier
        // probe refuses it; the next check tries again.
        if let Some(source) = source
            && let Err(e) = ProbeConn::connect(target, source)
        {
            tracing::debug!("the canary's queue watch: a probe connection: {e}");
        }
    }

    /// Ends the watch: the queues are no longer watched.
    pub fn end(self, groups: &mut Groups) {
        if self.limits.max_queue_age_ms.is_some() {
            groups.watch_queues(&[]);
        }
    }
}
