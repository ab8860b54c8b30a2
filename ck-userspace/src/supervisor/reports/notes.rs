//! The lifecycle machine's notes as log lines: one line per lifecycle event, with the slot,
//! the worker's pid and the reason.
use crate::supervisor::{lifecycle::Note, slots::SlotTable};

/// The lines' target, as the log has always named it (people filter on it): the executor's
/// world, which writes them.
const TARGET: &str = "ck::supervisor::world";

/// Writes the machine's note as one lifecycle log line with the slot and pid (`stop_signal`:
/// the signal a stopping worker was sent, for its line).
pub(in crate::supervisor) fn log(table: &SlotTable, index: u32, note: Note, stop_signal: &str) {
    let Some(slot) = table.slots.get(&index) else {
        return;
    };
    let pid = slot.pid();
    let generation = slot.life.generation;
    match note {
        Note::Started => {
            tracing::info!(target: TARGET, slot = index, pid, generation, "worker started")
        }
        Note::Ready(reason) => {
            let boot_ms = slot.uptime().map_or(0, |d| d.as_millis() as u64);
            tracing::info!(target: TARGET,
                slot = index,
                pid,
                boot_ms,
                reason = reason.as_str(),
                "worker ready"
            );
        }
        Note::Draining(reason) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = reason.as_str(),
            "worker draining"
        ),
        Note::Undrained => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = "ck undrain",
            "worker back in the active set"
        ),
        Note::Unhealthy(reason) => tracing::warn!(target: TARGET,
            slot = index,
            pid,
            reason = reason.as_str(),
            "worker unhealthy: out of the active set, socket open"
        ),
        Note::Healthy(reason) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = reason.as_str(),
            "worker healthy again"
        ),
        Note::FlippedIn => {
            tracing::info!(target: TARGET, slot = index, pid, "replacement flipped in")
        }
        Note::CanaryIn => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = "ck reload --canary",
            "canary in: a share of new connections beside the current release"
        ),
        Note::Promoted => tracing::info!(target: TARGET, slot = index, pid, "canary promoted"),
        Note::Kept(window) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            keep_ms = window.as_millis() as u64,
            reason = "--keep-previous",
            "worker of the previous release kept: out of the active set, alive for `ck rollback`"
        ),
        Note::Leaving(reason) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = reason.as_str(),
            "worker leaving: out of the active set, stopped once what it was given is done"
        ),
        Note::Stopping(reason) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = reason.as_str(),
            signal = stop_signal,
            "worker stopping"
        ),
        Note::NotReadyInTime(timeout) => tracing::warn!(target: TARGET,
            slot = index,
            pid,
            reason = %format!("not ready within --ready-timeout {timeout:?}"),
            "worker replaced (SIGKILL)"
        ),
        Note::KilledAtStopTimeout => tracing::warn!(target: TARGET,
            slot = index,
            pid,
            reason = "drain timeout",
            "worker killed (SIGKILL)"
        ),
        Note::KilledQuiet(reason) => tracing::info!(target: TARGET,
            slot = index,
            pid,
            reason = %reason,
            "worker killed (SIGKILL)"
        ),
        Note::RestartNow => tracing::info!(target: TARGET,
            slot = index,
            reason = "it had been serving: replaced at once",
            "worker restarting"
        ),
        Note::RestartIn(delay) => tracing::info!(target: TARGET,
            slot = index,
            delay_ms = delay.as_millis() as u64,
            reason = "exited before it was ready or right after: boot-crash backoff",
            "restart scheduled"
        ),
        Note::Restarting => tracing::info!(target: TARGET,
            slot = index,
            restart = slot.life.restarts,
            "worker restarting"
        ),
        Note::Revived => tracing::info!(target: TARGET,
            slot = index,
            restart = slot.life.restarts,
            reason = "ck reload: a fresh worker now, no backoff or cool-down waited",
            "worker restarting"
        ),
        Note::BreakerOpen { crashes, cooldown } => tracing::error!(target: TARGET,
            slot = index,
            crashes,
            cooldown_s = cooldown.as_secs_f64(),
            "circuit breaker open: the worker keeps crashing at start; next try after the cool-down"
        ),
        Note::HalfOpen { every, min_workers } => tracing::error!(target: TARGET,
            slot = index,
            every_s = every.as_secs_f64(),
            min_workers,
            "fleet degraded: the worker keeps crashing at start, but the breaker stays half-open \
             (--min-workers): retrying at the maximum backoff"
        ),
        Note::Held => tracing::info!(target: TARGET,
            slot = index,
            "last socket of its group kept open: connections queue for the replacement"
        ),
        Note::Retired => tracing::info!(target: TARGET, slot = index, pid, "slot retired"),
        Note::Adopted => tracing::info!(target: TARGET,
            slot = index,
            pid,
            listen_to_adopted_us = slot.worker.as_ref().and_then(|w| w.adopt_latency_us),
            "worker's listening socket adopted"
        ),
        Note::StandbyFailed => {
            tracing::warn!(target: TARGET, slot = index, pid, "replacement failed: not restarted")
        }
    }
}
