//! Health: accept-queue sampling (queue depth for status and stall detection, and for
//! `least-queue` only where its program cannot read the exact depth), watchdog heartbeats,
//! probes through the slot's own socket, and replacement of workers that stay unhealthy. An
//! unhealthy worker leaves the active set with its socket open, and comes back when healthy
//! again.
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    Event, Supervisor,
    lifecycle::{Input, State},
};
use crate::{
    os::probe::{self, ProbeAnswer},
    os::sockets,
    settings::run_config::ReadyMode,
};

/// How much slower queues are sampled while there is no traffic.
const IDLE_SAMPLING_FACTOR: u32 = 50;
/// Sampling stays fast this long after the last sign of traffic.
const BUSY_HOLD: Duration = Duration::from_secs(1);
/// While sampling fast, traffic (the program's `selected` counters) is checked every this many
/// ticks.
const TRAFFIC_CHECK_EVERY: u32 = 16;
/// Starting workers are checked for accepting (`detect`) every this many ticks.
const READY_CHECK_EVERY: u32 = 3;

/// The pace of queue sampling, shared with the sampler task.
pub(super) struct Pacer {
    /// Current period in microseconds, read by the sampler task.
    pub period: Arc<AtomicU64>,
    busy_until: Instant,
    selected_seen: u64,
    ticks: u32,
}

impl Pacer {
    /// Starts fast (`interval`), as if traffic had just been seen.
    pub fn new(interval: Duration) -> Pacer {
        Pacer {
            period: Arc::new(AtomicU64::new(interval.as_micros() as u64)),
            busy_until: Instant::now() + BUSY_HOLD,
            selected_seen: 0,
            ticks: 0,
        }
    }
}

/// A worker's health as the supervisor sees it.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Health {
    /// Missed its watchdog heartbeat.
    pub watchdog: bool,
    /// Failed `--probe-fails` probes in a row.
    pub probe: bool,
    /// Its accept queue stopped moving.
    pub stalled: bool,
    /// When it became unhealthy.
    #[serde(with = "crate::supervisor::continuity::instant_age::option")]
    pub since: Option<Instant>,
    /// Last `WATCHDOG=1`.
    #[serde(with = "crate::supervisor::continuity::instant_age::option")]
    pub last_watchdog: Option<Instant>,
    /// Consecutive failed probes.
    pub probe_fails: u32,
    /// Consecutive passed probes.
    pub probe_passes: u32,
    /// A probe is under way.
    pub probing: bool,
}

impl Health {
    /// No health signal says otherwise.
    pub fn is_healthy(&self) -> bool {
        !self.watchdog && !self.probe && !self.stalled
    }

    /// Why it is unhealthy, for logs and status.
    pub fn reasons(&self) -> String {
        let mut reasons = Vec::new();
        if self.watchdog {
            reasons.push("watchdog");
        }
        if self.probe {
            reasons.push("probe");
        }
        if self.stalled {
            reasons.push("stalled");
        }
        reasons.join("+")
    }
}

/// Which signal changed.
#[derive(Clone, Copy, Debug)]
enum Signal {
    Watchdog,
    Probe,
    Stall,
}

impl Supervisor {
    /// Sets or clears one health signal of `index`'s worker; tells the lifecycle when the
    /// worker's verdict (healthy or not) changes.
    fn set_health(&mut self, index: u32, signal: Signal, bad: bool, detail: &str) {
        let Some(worker) = self.slots.get_mut(&index).and_then(|s| s.worker.as_mut()) else {
            return;
        };
        let was_healthy = worker.health.is_healthy();
        let flag = match signal {
            Signal::Watchdog => &mut worker.health.watchdog,
            Signal::Probe => &mut worker.health.probe,
            Signal::Stall => &mut worker.health.stalled,
        };
        if *flag == bad {
            return;
        }
        *flag = bad;
        let healthy = worker.health.is_healthy();
        if bad {
            worker.health.since.get_or_insert_with(Instant::now);
        } else if healthy {
            worker.health.since = None;
        }
        if healthy != was_healthy {
            let why = format!("{signal:?}: {detail}");
            self.apply(index, Input::Health { healthy, why });
        }
    }

    /// Samples every slot's accept queue; detects stalls and missed heartbeats; replaces workers
    /// unhealthy for too long.
    pub(super) fn on_tick(&mut self) {
        let now = Instant::now();
        let stall_timeout = self.cfg.health.stall_timeout;
        let watchdog = self.cfg.health.watchdog;
        let mut depth_changed = Vec::new();
        let mut changes = Vec::new();
        for slot in self.slots.values_mut() {
            let depth: u32 = slot
                .sockets
                .iter()
                .map(|s| sockets::accept_queue_len(s).unwrap_or(0))
                .sum();
            let previous = slot.queue_depth;
            if depth != previous {
                slot.queue_depth = depth;
                depth_changed.push(slot.index);
            }
            let Some(worker) = &slot.worker else {
                slot.queue_rising_since = None;
                continue;
            };
            if let Some(timeout) = stall_timeout {
                if depth > 0 && depth >= previous {
                    let since = *slot.queue_rising_since.get_or_insert(now);
                    if !worker.health.stalled && now.duration_since(since) >= timeout {
                        changes.push((
                            slot.index,
                            Signal::Stall,
                            true,
                            format!(
                                "{depth} connection(s) queued and not accepted for {timeout:?}"
                            ),
                        ));
                    }
                } else {
                    slot.queue_rising_since = None;
                    if worker.health.stalled {
                        changes.push((
                            slot.index,
                            Signal::Stall,
                            false,
                            format!("queue moving ({previous} -> {depth})"),
                        ));
                    }
                }
            }
            if let (Some(limit), Some(last)) = (watchdog, worker.health.last_watchdog)
                && !worker.health.watchdog
                && now.duration_since(last) > limit
            {
                changes.push((
                    slot.index,
                    Signal::Watchdog,
                    true,
                    format!("no WATCHDOG=1 for {limit:?}"),
                ));
            }
        }
        for (index, signal, bad, detail) in changes {
            self.set_health(index, signal, bad, &detail);
        }
        self.write_depths(&depth_changed);
        self.replace_long_unhealthy(now);
        // Reading /proc costs ~0.1 ms a worker: every few fast ticks is soon enough.
        if self.pacer.ticks.is_multiple_of(READY_CHECK_EVERY) {
            self.detect_ready();
        }
        self.pace_sampling(now);
    }

    /// Samples every `--sample-interval` while there is traffic (connections selected by the
    /// program, or a non-empty queue, in the last [`BUSY_HOLD`]): a stall must be seen within
    /// milliseconds, and least-queue on sampled depths needs fresh ones. Idle, it samples
    /// [`IDLE_SAMPLING_FACTOR`] times less often, so that an idle supervisor stays idle.
    fn pace_sampling(&mut self, now: Instant) {
        let watching = self.watching_readiness();
        let pacer = &mut self.pacer;
        pacer.ticks = pacer.ticks.wrapping_add(1);
        let fast = now < pacer.busy_until;
        let mut busy = self.slots.values().any(|s| s.queue_depth > 0);
        if !fast || pacer.ticks.is_multiple_of(TRAFFIC_CHECK_EVERY) {
            let selected: u64 = self
                .slots
                .keys()
                .map(|index| self.slot_stats(*index).selected)
                .sum();
            let pacer = &mut self.pacer;
            busy |= selected != pacer.selected_seen;
            pacer.selected_seen = selected;
        }
        let pacer = &mut self.pacer;
        if busy || watching {
            pacer.busy_until = now + BUSY_HOLD;
        }
        let interval = self.cfg.health.sample_interval;
        let period = if now < pacer.busy_until {
            interval
        } else {
            interval * IDLE_SAMPLING_FACTOR
        };
        pacer
            .period
            .store(period.as_micros() as u64, Ordering::Relaxed);
    }

    /// Starts a graceful replacement of a worker unhealthy for longer than
    /// `--unhealthy-replace-after` (one at a time, never during a rolling restart).
    fn replace_long_unhealthy(&mut self, now: Instant) {
        let Some(after) = self.cfg.health.unhealthy_replace_after else {
            return;
        };
        if self.roll.is_some() || self.stopping {
            return;
        }
        let overdue = self.slots.values().find(|s| {
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

    /// `WATCHDOG=1` from a worker.
    pub(super) fn on_watchdog(&mut self, index: u32) {
        let Some(worker) = self.slots.get_mut(&index).and_then(|s| s.worker.as_mut()) else {
            return;
        };
        worker.health.last_watchdog = Some(Instant::now());
        if worker.health.watchdog {
            self.set_health(index, Signal::Watchdog, false, "WATCHDOG=1 again");
        }
    }

    /// Starts one probe of every worker that is not already being probed.
    pub(super) fn on_probe_tick(&mut self) {
        let Some(kind) = self.cfg.health.probe.clone() else {
            return;
        };
        let Some(group) = self.groups.first() else {
            return;
        };
        let target = probe::target_of(group.addr.addr);
        let timeout = self.cfg.health.probe_timeout;
        let base = self.cfg.health.probe_port_base;
        for slot in self.slots.values_mut() {
            let Some(worker) = slot.worker.as_mut() else {
                continue;
            };
            let stopping = matches!(slot.life.state, State::Stopping(..));
            if !slot.life.serving() || stopping || worker.health.probing {
                continue;
            }
            let Some(source) = probe::source_of(target, base, slot.index) else {
                continue;
            };
            worker.health.probing = true;
            let (index, id) = (slot.index, worker.id);
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
    pub(super) fn on_probe_result(
        &mut self,
        index: u32,
        id: u64,
        result: Result<ProbeAnswer, String>,
    ) {
        let (fails, passes) = (self.cfg.health.probe_fails, self.cfg.health.probe_passes);
        let auto = self.cfg.ready == ReadyMode::Auto;
        let Some(slot) = self.slots.get_mut(&index) else {
            return;
        };
        let starting = matches!(slot.life.state, State::Starting(_));
        let Some(worker) = slot.worker.as_mut().filter(|w| w.id == id) else {
            return;
        };
        let health = &mut worker.health;
        health.probing = false;
        match result {
            Ok(_) => {
                health.probe_fails = 0;
                health.probe_passes += 1;
                let recovered = health.probe && health.probe_passes >= passes;
                let silent_starter = auto && starting && !worker.spoke_notify;
                if recovered {
                    self.set_health(index, Signal::Probe, false, "probes pass");
                }
                if silent_starter {
                    self.mark_ready(index, "first probe passed".into());
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
