//! Probes through each worker's own socket (`--probe`): one probe per worker per tick, its
//! answer turned into a health signal (or readiness, for a silent starter with an HTTP probe).
//! The answer is sent as soon as it is known; the probe's connection is then ended politely in
//! the same task (`os::probe::conn`), so no verdict waits for a worker to close.
use tokio::sync::mpsc::UnboundedSender;

use crate::supervisor::{
    event::Event,
    groups::Groups,
    inputs::Found,
    inputs::health::Signal,
    inputs::healths::{self, Healths},
    lifecycle::State,
    slots::SlotTable,
};
use crate::{
    os::probe::{self, ProbeAnswer},
    settings::{
        health::ProbeKind,
        run_config::{ReadyMode, RunConfig},
    },
};

/// Starts one probe of every worker that is not already being probed; each answer comes back
/// as [`Event::ProbeResult`].
pub(in crate::supervisor) fn start(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
    healths: &mut Healths,
    events: &UnboundedSender<Event>,
) {
    let Some(kind) = cfg.health.probe.clone() else {
        return;
    };
    // Until the program is attached nothing steers a probe to its slot: the kernel would
    // hash it to any worker, and another worker's answer would count for this one (a
    // starting worker taken as ready by a probe it never saw).
    if !cfg.no_bpf && !groups.bpf_loaded() {
        return;
    }
    // Probes go through the slot's TCP socket (a fleet without one has no probes).
    let Some(group) = groups.tcp().next() else {
        return;
    };
    let target = probe::target_of(group.addr.addr);
    let timeout = cfg.health.probe_timeout;
    let base = cfg.health.probe_port_base;
    for slot in table.slots.values() {
        let Some(id) = healths::running(slot) else {
            continue;
        };
        let stopping = matches!(slot.life.state, State::Stopping(..));
        // A roll's starting replacement (a standby) is probed too: it is ready at a pass.
        let starting = matches!(slot.life.state, State::Starting(_));
        if !(slot.life.serving() || starting) || stopping || healths.of(slot.index, id).probing {
            continue;
        }
        let Some(source) = probe::source_of(target, base, slot.index) else {
            continue;
        };
        healths.of_mut(slot.index, id).probing = true;
        let index = slot.index;
        let events = events.clone();
        let kind = kind.clone();
        tokio::spawn(async move {
            let probed = probe::probe_once(target, source, &kind, timeout).await;
            let _ = events.send(Event::ProbeResult {
                slot: index,
                worker: id,
                result: probed.answer,
            });
            if let Some(stream) = probed.conn {
                probe::conn::finish(stream).await;
            }
        });
    }
}

/// Counts a probe result; `--probe-fails` failures in a row make the worker unhealthy,
/// `--probe-passes` passes make it healthy again (and a pass may make a starting worker ready):
/// what it found, in order.
pub(in crate::supervisor) fn answered(
    cfg: &RunConfig,
    table: &mut SlotTable,
    healths: &mut Healths,
    index: u32,
    id: u64,
    result: Result<ProbeAnswer, String>,
) -> Vec<Found> {
    let mut found = Vec::new();
    let (fails, passes) = (cfg.health.probe_fails, cfg.health.probe_passes);
    // A passing HTTP probe makes a starting worker ready: always with --ready probe, and
    // with auto if it said nothing on NOTIFY_SOCKET (a TCP probe proves nothing: the kernel
    // completes the handshake on ck's socket before the worker accepts).
    let http = matches!(cfg.health.probe, Some(ProbeKind::Http(_)));
    let mode = cfg.ready;
    let Some(slot) = table.slots.get_mut(&index) else {
        return found;
    };
    let starting = matches!(slot.life.state, State::Starting(_));
    // The slot's fields are borrowed one by one below: not through `worker_of_mut`.
    let current = slot.worker_id() == Some(id);
    let Some(worker) = slot.worker.as_mut().filter(|_| current) else {
        return found;
    };
    let health = healths.of_mut(index, id);
    health.probing = false;
    match result {
        Ok(_) => {
            health.probe_fails = 0;
            health.probe_passes += 1;
            let recovered = health.probe && health.probe_passes >= passes;
            let ready_now = starting
                && match mode {
                    ReadyMode::Probe => true,
                    ReadyMode::Auto => http && !worker.spoke_notify,
                    ReadyMode::Notify | ReadyMode::Spawn => false,
                };
            if recovered {
                found.push(Found::Health {
                    signal: Signal::Probe,
                    bad: false,
                    detail: "probes pass".into(),
                });
            }
            if ready_now {
                found.push(Found::Ready("the readiness probe passed".into()));
            }
        }
        Err(why) => {
            health.probe_passes = 0;
            // A starting worker's failed probe only says it is not up yet: it counts
            // neither in the metric nor in the streak that makes a worker unhealthy.
            if starting {
                return found;
            }
            slot.probe_failures += 1;
            health.probe_fails += 1;
            if !health.probe && health.probe_fails >= fails {
                let detail = format!("{fails} probe(s) failed in a row; last: {why}");
                found.push(Found::Health {
                    signal: Signal::Probe,
                    bad: true,
                    detail,
                });
            }
        }
    }
    found
}
