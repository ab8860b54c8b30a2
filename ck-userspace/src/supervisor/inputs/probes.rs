//! Probes through each worker's own socket (`--probe`): one probe per worker per tick, its
//! answer turned into a health signal (or readiness, for a silent starter with an HTTP probe).
use crate::supervisor::{Event, Supervisor, inputs::health::Signal, lifecycle::State};
use crate::{
    os::probe::{self, ProbeAnswer},
    settings::{health::ProbeKind, run_config::ReadyMode},
};

impl Supervisor {
    /// Starts one probe of every worker that is not already being probed.
    pub(in crate::supervisor) fn on_probe_tick(&mut self) {
        let Some(kind) = self.cfg.health.probe.clone() else {
            return;
        };
        // Until the program is attached nothing steers a probe to its slot: the kernel would
        // hash it to any worker, and another worker's answer would count for this one (a
        // starting worker taken as ready by a probe it never saw).
        if !self.cfg.no_bpf && !self.groups.bpf_loaded() {
            return;
        }
        // Probes go through the slot's TCP socket (a fleet without one has no probes).
        let Some(group) = self.groups.tcp().next() else {
            return;
        };
        let target = probe::target_of(group.addr.addr);
        let timeout = self.cfg.health.probe_timeout;
        let base = self.cfg.health.probe_port_base;
        for slot in self.table.slots.values_mut() {
            let Some(worker) = slot.worker.as_mut() else {
                continue;
            };
            let stopping = matches!(slot.life.state, State::Stopping(..));
            // A roll's starting replacement (a standby) is probed too: it is ready at a pass.
            let starting = matches!(slot.life.state, State::Starting(_));
            if !(slot.life.serving() || starting) || stopping || worker.health.probing {
                continue;
            }
            let Some(source) = probe::source_of(target, base, slot.index) else {
                continue;
            };
            worker.health.probing = true;
            let (index, id) = (slot.index, slot.life.state.run().map_or(0, |r| r.id));
            let events = self.events.clone();
            let kind = kind.clone();
            tokio::spawn(async move {
                let result = probe::probe(target, source, &kind, timeout).await;
                let _ = events.send(Event::ProbeResult {
                    slot: index,
                    worker: id,
                    result,
                });
            });
        }
    }

    /// Counts a probe result; `--probe-fails` failures in a row make the worker unhealthy,
    /// `--probe-passes` passes make it healthy again.
    pub(in crate::supervisor) fn on_probe_result(
        &mut self,
        index: u32,
        id: u64,
        result: Result<ProbeAnswer, String>,
    ) {
        let (fails, passes) = (self.cfg.health.probe_fails, self.cfg.health.probe_passes);
        // A passing HTTP probe makes a starting worker ready: always with --ready probe, and
        // with auto if it said nothing on NOTIFY_SOCKET (a TCP probe proves nothing: the kernel
        // completes the handshake on ck's socket before the worker accepts).
        let http = matches!(self.cfg.health.probe, Some(ProbeKind::Http(_)));
        let mode = self.cfg.ready;
        let Some(slot) = self.table.slots.get_mut(&index) else {
            return;
        };
        let starting = matches!(slot.life.state, State::Starting(_));
        // The slot's fields are borrowed one by one below: not through `worker_of_mut`.
        let current = slot.worker_id() == Some(id);
        let Some(worker) = slot.worker.as_mut().filter(|_| current) else {
            return;
        };
        let health = &mut worker.health;
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
                    self.set_health(index, Signal::Probe, false, "probes pass");
                }
                if ready_now {
                    self.mark_ready(index, "the readiness probe passed".into());
                }
            }
            Err(why) => {
                health.probe_passes = 0;
                // A starting worker's failed probe only says it is not up yet: it counts
                // neither in the metric nor in the streak that makes a worker unhealthy.
                if starting {
                    return;
                }
                slot.probe_failures += 1;
                health.probe_fails += 1;
                if !health.probe && health.probe_fails >= fails {
                    let detail = format!("{fails} probe(s) failed in a row; last: {why}");
                    self.set_health(index, Signal::Probe, true, &detail);
                }
            }
        }
    }
}
