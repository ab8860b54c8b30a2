//! Recycling, made safe by steering: a worker whose memory stays above `--max-memory` for
//! [`OVER_FOR`] samples in a row (one a second), or that has been sent about `--max-requests`
//! new connections (each worker's own limit drawn within ±10 %, so that workers started together
//! do not all recycle together), is replaced through the graceful one-worker roll: its
//! replacement is ready first, then it leaves. gunicorn's `max_requests` and pm2's
//! `max_memory_restart` kill the requests in flight; this loses none.
use std::time::{Duration, Instant};

use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    groups::Groups, inputs::healths::Healths, lifecycle::State, slots::SlotTable,
};

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

/// Once a second: the one worker that needs recycling, if any, and why (the memory samples
/// counted on the way).
pub(in crate::supervisor) fn due(
    cfg: &RunConfig,
    groups: &Groups,
    table: &mut SlotTable,
) -> Option<(u32, String)> {
    if cfg.max_memory.is_none() && cfg.max_requests.is_none() {
        return None;
    }
    let mut due = None;
    let indices: Vec<u32> = table.slots.keys().copied().collect();
    for index in indices {
        let selected = groups.slot_stats(index).selected;
        let memory = table.usage(index).map(|u| u.memory_bytes);
        let Some(slot) = table.slots.get_mut(&index) else {
            continue;
        };
        if !slot.life.serving() || !matches!(slot.life.state, State::Ready(_)) {
            continue;
        }
        let Some(worker) = slot.worker.as_mut() else {
            continue;
        };
        if let (Some(max), Some(memory)) = (cfg.max_memory, memory) {
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
    due
}

/// The first serving worker unhealthy for at least `after` (`--unhealthy-replace-after`).
pub(in crate::supervisor) fn overdue(
    table: &SlotTable,
    healths: &Healths,
    after: Duration,
    now: Instant,
) -> Option<u32> {
    let slot = table.slots.values().find(|s| {
        s.life.serving()
            && healths
                .of_worker(s)
                .and_then(|h| h.since)
                .is_some_and(|since| now.duration_since(since) >= after)
    })?;
    Some(slot.index)
}
