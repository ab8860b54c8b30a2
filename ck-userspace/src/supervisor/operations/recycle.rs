//! Recycling, made safe by steering: a worker whose memory stays above `--max-memory` for
//! [`OVER_FOR`] samples in a row (one a second), or that has been sent about `--max-requests`
//! new connections (each worker's own limit drawn within ±10 %, so that workers started together
//! do not all recycle together), is replaced through the graceful one-worker roll: its
//! replacement is ready first, then it leaves. gunicorn's `max_requests` and pm2's
//! `max_memory_restart` kill the requests in flight; this loses none.
use std::time::Instant;

use crate::supervisor::{Supervisor, lifecycle::State};

/// Samples above `--max-memory` in a row before a worker is recycled.
pub(in crate::supervisor) const OVER_FOR: u32 = 3;

/// Each worker's own `--max-requests` limit: the limit scaled by 0.9 to 1.1 (`random` in
/// [0, 1)).
pub(in crate::supervisor) fn requests_limit(max_requests: Option<u64>, random: f64) -> Option<u64> {
    let max = max_requests?;
    Some(
        ((max as f64) * (0.9 + 0.2 * random.clamp(0.0, 1.0)))
            .round()
            .max(1.0) as u64,
    )
}

impl Supervisor {
    /// Once a second: starts the replacement of one worker that needs recycling (never during
    /// a roll or a shutdown).
    pub(in crate::supervisor) fn check_recycling(&mut self) {
        if self.cfg.max_memory.is_none() && self.cfg.max_requests.is_none() {
            return;
        }
        let mut due = None;
        let indices: Vec<u32> = self.table.slots.keys().copied().collect();
        for index in indices {
            let selected = self.groups.slot_stats(index).selected;
            let memory = self.table.usage(index).map(|u| u.memory_bytes);
            let Some(slot) = self.table.slots.get_mut(&index) else {
                continue;
            };
            if !slot.life.serving() || !matches!(slot.life.state, State::Ready(_)) {
                continue;
            }
            let Some(worker) = slot.worker.as_mut() else {
                continue;
            };
            if let (Some(max), Some(memory)) = (self.cfg.max_memory, memory) {
                worker.over_memory = if memory > max {
                    worker.over_memory + 1
                } else {
                    0
                };
                if worker.over_memory >= OVER_FOR && due.is_none() {
                    due = Some((
                        index,
                        format!("memory {memory} bytes above --max-memory {max} for {OVER_FOR} s"),
                    ));
                }
            }
            let served = selected.saturating_sub(worker.selected_base);
            if let Some(limit) = worker.requests_limit
                && served >= limit
                && due.is_none()
            {
                due = Some((
                    index,
                    format!("{served} connections (--max-requests: {limit} for this worker)"),
                ));
            }
        }
        let Some((index, why)) = due else { return };
        if self.ops.core.roll.is_some() || self.stopping {
            return;
        }
        let pid = self.table.slots.get(&index).map_or(0, |s| s.pid());
        tracing::info!(
            slot = index,
            pid,
            reason = why.as_str(),
            "recycling worker: replacing it gracefully"
        );
        self.begin_roll([index].into(), None, false);
    }

    /// Starts a graceful replacement of a worker unhealthy for longer than
    /// `--unhealthy-replace-after` (one at a time, never during a rolling restart).
    pub(in crate::supervisor) fn replace_long_unhealthy(&mut self, now: Instant) {
        let Some(after) = self.cfg.health.unhealthy_replace_after else {
            return;
        };
        if self.ops.core.roll.is_some() || self.stopping {
            return;
        }
        let overdue = self.table.slots.values().find(|s| {
            s.life.serving()
                && s.worker
                    .as_ref()
                    .and_then(|w| w.health.since)
                    .is_some_and(|since| now.duration_since(since) >= after)
        });
        if let Some(slot) = overdue {
            let index = slot.index;
            tracing::warn!(slot = index, after = ?after, "worker unhealthy too long: replacing it");
            self.begin_roll([index].into(), None, false);
        }
    }
}
