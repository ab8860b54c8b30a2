//! Why the fleet is degraded, for `ck status`'s DEGRADED lines: one line per slot and reason,
//! each naming what the worker did and the fix. Every reason is read when asked: breakers from
//! the slots' crash memory, boot mistakes from what the kernel said as the worker exited
//! (`slots::boot_mistake::BootMistake`), workers that cannot serve the socket ck passed them from
//! the host's listeners and the workers' fds (`inputs::listens`), workers that leave requests
//! unread from the connections' receive queues (`inputs::unread`).
use crate::settings::{restart_policy::RestartPolicy, run_config::RunConfig};
use crate::supervisor::{
    groups::Groups,
    inputs::{listens::Listens, unread},
    lifecycle::{Settings, State, crash::Breaker},
    slots::SlotTable,
};

/// Why the fleet is degraded, one line per slot and reason (empty when it is not), given
/// the host's listeners at this look.
pub(super) fn degraded(
    cfg: &RunConfig,
    settings: &Settings,
    groups: &Groups,
    table: &SlotTable,
    listens: &Listens,
) -> Vec<String> {
    let mut lines = breakers(table, &cfg.restart, settings.min_workers);
    lines.extend(boot_mistakes(table));
    lines.extend(
        listens
            .not_serving(cfg, groups, table)
            .iter()
            .map(|n| n.describe()),
    );
    lines.extend(
        unread::unanswered(cfg, groups, table)
            .iter()
            .map(|u| u.describe()),
    );
    lines
}

/// Slots whose breaker is open or held half-open.
fn breakers(table: &SlotTable, policy: &RestartPolicy, min_workers: u32) -> Vec<String> {
    table
        .slots
        .values()
        .filter(|s| s.life.serving())
        .filter_map(|s| match s.life.crash.breaker() {
            Breaker::Closed => None,
            Breaker::Open => Some(format!(
                "slot {}: circuit breaker open after {} boot crashes within {:?} (last exit: {}); \
                 next try after the {:?} cool-down",
                s.index,
                policy.crash_limit,
                policy.window,
                s.last_exit.as_deref().unwrap_or("-"),
                policy.cooldown
            )),
            Breaker::HalfOpen => Some(format!(
                "slot {}: keeps crashing at start (last exit: {}); the breaker stays half-open \
                 to keep --min-workers {} slot(s) trying: retried every {:?}",
                s.index,
                s.last_exit.as_deref().unwrap_or("-"),
                min_workers,
                policy.max
            )),
        })
        .collect()
}

/// Slots whose last worker ended on its own while starting in a way ck can name (exited 0
/// at once, daemonized), while no worker of theirs is ready since.
fn boot_mistakes(table: &SlotTable) -> Vec<String> {
    table
        .slots
        .values()
        .filter(|s| s.life.serving() && !matches!(s.life.state, State::Ready(_)))
        .filter_map(|s| Some(s.boot_mistake.as_ref()?.describe(s.index)))
        .collect()
}
