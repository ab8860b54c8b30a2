//! `--ready auto` without a word from the worker: a starting worker that says nothing on
//! `NOTIFY_SOCKET` is ready as soon as it accepts on its socket, checked every sample interval
//! (1 ms) while such a worker starts (on the sampler's ticks, whatever the pace of queue
//! sampling: see `health`), so it is seen within about a millisecond. Two ways to see it:
//! - the accept probe (`accept_probe`): a connection ck leaves in the worker's accept queue,
//!   and the queue's length read at each tick; exact and nearly free, used wherever the program
//!   steers the probe port;
//! - the `/proc` scan (`os::readiness`): the socket in one of its epoll sets, or a thread of it
//!   in `accept`, `poll`, `ppoll`, `select` or `pselect6` on it; used until the probe is in the
//!   queue, and alone where the probe cannot work.
//!
//! A worker that speaks the notify protocol is left to say `READY=1` itself. The grace is no
//! answer on its own: when it is over, a silent worker is taken as ready only if ck cannot see
//! what it waits in (its `/proc` unreadable); else it stays starting until it accepts or
//! `--ready-timeout` ends it. With `--ready probe` the readiness probe alone decides (`health`).
use std::{net::SocketAddr, time::Instant};

use crate::os::probe::accept::{self as accept_probe, Step};
use crate::supervisor::{
    groups::Groups,
    inputs::Found,
    lifecycle::State,
    slots::{
        SlotTable,
        slot::{Slot, Worker},
    },
};
use crate::{
    os::{notify, probe, readiness, sock_diag, sockets},
    settings::run_config::{ReadyMode, RunConfig},
};

/// Whether some starting worker is watched for readiness (ticks stay fast meanwhile).
pub(in crate::supervisor) fn watching(cfg: &RunConfig, table: &SlotTable) -> bool {
    detects(cfg) && table.slots.values().any(is_silent_starter)
}

fn detects(cfg: &RunConfig) -> bool {
    cfg.ready == ReadyMode::Auto && !cfg.adopt
}

/// Where accept probes go, the probe port base and the position of the (first TCP) group
/// they go to, when the program steers them to their slot (attached and checked) and
/// `CK_READY_DETECT=proc` does not turn them off.
fn accept_probe_route(cfg: &RunConfig, groups: &Groups) -> Option<(SocketAddr, u16, usize)> {
    if cfg.no_bpf || !groups.steering_verified() || accept_probe::forced_off() {
        return None;
    }
    let (position, group) = groups.iter().enumerate().find(|(_, g)| !g.addr.is_udp())?;
    Some((
        probe::target_of(group.addr.addr),
        cfg.health.probe_port_base,
        position,
    ))
}

/// Marks ready every silent starting worker that accepts on its socket: seen by its accept
/// probe, or by the `/proc` scan while the probe is not in its queue: the slots found ready,
/// with why.
pub(in crate::supervisor) fn ready_now(
    cfg: &RunConfig,
    groups: &Groups,
    table: &mut SlotTable,
) -> Vec<(u32, Found)> {
    if !detects(cfg) {
        return Vec::new();
    }
    let route = accept_probe_route(cfg, groups);
    let now = Instant::now();
    let mut ready: Vec<(u32, &'static str)> = Vec::new();
    for slot in table.slots.values_mut() {
        if !is_silent_starter(slot) {
            // It spoke on NOTIFY_SOCKET: READY=1 decides, the probe has nothing to add.
            if let Some(worker) = slot.worker.as_mut() {
                worker.accept_probe.end();
            }
            continue;
        }
        let queue = route
            .and_then(|(_, _, position)| slot.sockets.get(position))
            .and_then(|s| sockets::accept_queue_len(s).ok());
        let index = slot.index;
        let Some(worker) = slot.worker.as_mut() else {
            continue;
        };
        let probe = &mut worker.accept_probe;
        if let (Some((target, base, _)), Some(queue)) = (route, queue) {
            // The previous worker's probe, still queued, is this one's if nothing took it.
            let sent = probe.take_over(slot.queued_probe.take(), queue)
                || probe::source_of(target, base, index)
                    .is_some_and(|source| probe.send(target, source, queue, now));
            // The queue is read again at the next tick, with the probe in it.
            if !sent && probe.step(queue, now) == Step::Accepted {
                ready.push((index, accept_probe::REASON));
                continue;
            }
        }
        if probe.armed() {
            continue;
        }
        let inodes: Vec<u64> = slot
            .sockets
            .iter()
            .filter_map(|s| sock_diag::inode_of(s).ok())
            .collect();
        if let Some(how) = readiness::accepting(&processes(worker), &inodes) {
            ready.push((index, how.reason()));
        }
    }
    ready
        .into_iter()
        .map(|(index, why)| (index, Found::Ready(why.to_string())))
        .collect()
}

/// `--ready-grace` is over for the worker of run `epoch` on `index`: if it is still a silent
/// starter, it is taken as ready only if ck cannot see whether it accepts; else it keeps
/// starting (one log line says so), watched until it accepts or its ready timeout. Why it is
/// ready, if it is.
pub(in crate::supervisor) fn grace_over(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
    index: u32,
    epoch: u64,
) -> Option<Found> {
    let slot = table.slots.get(&index)?;
    if !matches!(slot.life.state, State::Starting(run) if run.id == epoch) {
        return None;
    }
    if !is_silent_starter(slot) {
        return None;
    }
    let worker = slot.worker.as_ref()?;
    let pid = worker.pid;
    let grace = cfg.ready_grace;
    // The accept probe sees an accept without reading /proc.
    let probe_sees = accept_probe_route(cfg, groups).is_some() && !worker.accept_probe.off();
    let cannot = match probe_sees {
        true => None,
        false => readiness::undetectable(&processes(worker)),
    };
    match cannot {
        Some(cannot) => Some(Found::Ready(format!(
            "sent nothing on NOTIFY_SOCKET within --ready-grace {grace:?}, and {cannot}; \
             taken as ready (use --ready notify or --ready probe to wait for a sign)"
        ))),
        None => {
            tracing::info!(
                slot = index,
                pid,
                reason = %format!(
                    "silent for --ready-grace {grace:?} and not waiting for connections yet"
                ),
                timeout = ?cfg.ready_timeout,
                "worker still starting: ready once it accepts (or READY=1), else stopped at \
                 --ready-timeout"
            );
            None
        }
    }
}

/// Whether the readiness probe alone makes the worker of `index` ready (`--ready probe`,
/// while it starts): a `READY=1` then changes nothing.
pub(in crate::supervisor) fn probe_decides(cfg: &RunConfig, table: &SlotTable, index: u32) -> bool {
    cfg.ready == ReadyMode::Probe
        && table
            .slots
            .get(&index)
            .is_some_and(|s| matches!(s.life.state, State::Starting(_)))
}

/// Whether the slot's worker is starting and has said nothing on `NOTIFY_SOCKET` (nor has a
/// message waiting there, or one its reader took but the supervisor has not handled yet).
fn is_silent_starter(slot: &Slot) -> bool {
    let Some(worker) = slot.worker.as_ref() else {
        return false;
    };
    // The notify socket is peeked last: only for a silent worker that is starting.
    matches!(slot.life.state, State::Starting(_))
        && !worker.spoke_notify
        && !worker
            .notify_heard
            .load(std::sync::atomic::Ordering::Acquire)
        && !worker.notify.as_deref().is_some_and(notify::pending)
}

/// The processes of `worker` (its cgroup's, else its own pid).
fn processes(worker: &Worker) -> Vec<u32> {
    worker
        .cgroup
        .as_ref()
        .map(|c| c.pids())
        .unwrap_or_else(|| vec![worker.pid])
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::settings::restart_policy::RestartPolicy;
    use crate::supervisor::lifecycle::{Context, Input, Life, Settings, step};
    use crate::supervisor::slots::slot::Worker;

    /// A slot whose worker (this process, for a real pidfd) was spawned and has not spoken.
    fn starting_slot() -> Slot {
        let settings = Settings {
            ready_on_spawn: false,
            ready_grace: Some(Duration::from_secs(1)),
            ready_timeout: Duration::from_secs(30),
            stop_timeout: Duration::from_secs(10),
            restart: RestartPolicy::DEFAULT,
            min_workers: 1,
            adopt: false,
            linger: None,
        };
        let context = Context {
            now: Instant::now(),
            random: 0.0,
            stopping: false,
            others_open: 0,
            others_trying: 0,
            maps_pending: false,
        };
        let mut life = Life::new(RestartPolicy::DEFAULT, false);
        step(&mut life, Input::Start, &context, &settings);
        step(&mut life, Input::Spawned { id: 1 }, &context, &settings);
        let pid = std::process::id();
        let pidfd = crate::os::pidfd::open(pid).unwrap();
        let mut slot = Slot::new(0, life);
        slot.worker = Some(Worker::spawned(pid, pidfd, 0, false));
        slot
    }

    #[test]
    fn a_worker_whose_message_was_read_but_not_handled_yet_is_not_silent() {
        let slot = starting_slot();
        assert!(is_silent_starter(&slot));
        // Its notify reader took a message off the socket; the event is still queued.
        let heard = slot.worker.as_ref().unwrap().notify_heard.clone();
        heard.store(true, std::sync::atomic::Ordering::Release);
        assert!(!is_silent_starter(&slot));
    }
}
