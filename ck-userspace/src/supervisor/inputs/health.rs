//! Health: accept-queue sampling (stall detection, and `least-queue`'s sampled fallback where
//! its program cannot read the exact depth), watchdog heartbeats, probes through the slot's own
//! socket, and replacement of workers that stay unhealthy. An unhealthy worker leaves the active
//! set with its socket open, and comes back when healthy again.
//!
//! Pace: only the sampled fallback needs millisecond-fresh depths (`--sample-interval` under
//! traffic, [`IDLE_SAMPLING_FACTOR`] times slower idle). Otherwise queues are sampled every
//! `--stall-timeout` / [`STALL_SAMPLES`], at least [`MIN_STALL_PERIOD`], while connections
//! arrive or wait: a stall is then seen within a tenth of its timeout late. While nothing
//! arrives and nothing waits, once every [`quiet_period`] (a second by default): an idle ck
//! wakes about once a second. `--ready auto`'s detection of silent starting workers keeps its
//! own fast pace (every [`READY_CHECK_EVERY`] sample interval, 1 ms) while such a worker
//! boots, without sampling, so readiness is seen within about a millisecond of the worker's
//! first `accept`; so does the count of a leaving worker's connections (`leaving`).
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use tokio::sync::watch;

use crate::supervisor::{
    Supervisor,
    inputs::queue_motion,
    lifecycle::{Input, State},
};

/// How much slower queues are sampled while there is no traffic.
const IDLE_SAMPLING_FACTOR: u32 = 50;
/// Sampling stays fast this long after the last sign of traffic.
const BUSY_HOLD: Duration = Duration::from_secs(1);
/// While sampling fast, traffic (the program's `selected` counters) is checked every this many
/// ticks.
const TRAFFIC_CHECK_EVERY: u32 = 16;
/// Starting workers are checked for accepting (`detect`) every this many sample intervals: every
/// one (1 ms by default), since a replacement's readiness is part of a fleet's recovery time. The
/// check is one `TCP_INFO` read per worker once its accept probe is in the queue; until then
/// (or where the probe cannot work) ~0.1 ms of `/proc` reads, and only while a silent worker
/// starts.
const READY_CHECK_EVERY: u32 = 1;
/// Without the sampled fallback, queues are sampled this many times per `--stall-timeout`.
const STALL_SAMPLES: u32 = 10;
/// ... but never more often than this.
const MIN_STALL_PERIOD: Duration = Duration::from_millis(50);
/// The sampling period without the sampled fallback and without `--stall-timeout` (watchdog and
/// replacement checks still run on it).
const NO_STALL_PERIOD: Duration = Duration::from_millis(100);
/// The longest sampling period, while nothing is queued or sent (see [`quiet_period`]).
const QUIET_PERIOD: Duration = Duration::from_secs(1);

/// The sampling period when nothing steers by sampled depths: a tenth of the stall timeout, at
/// least [`MIN_STALL_PERIOD`].
pub(in crate::supervisor) fn stall_period(stall_timeout: Option<Duration>) -> Duration {
    stall_timeout.map_or(NO_STALL_PERIOD, |t| {
        (t / STALL_SAMPLES).max(MIN_STALL_PERIOD)
    })
}

/// The sampling period after a sample that found every queue empty and no connection sent
/// since the one before: the stall timeout, at most [`QUIET_PERIOD`] (and never faster than
/// [`stall_period`]). A queue cannot stall before a connection arrives, and the first sample
/// that sees one brings the pace back to [`stall_period`]: a stall that starts from quiet is
/// seen at most this much later. Each tick wakes ck (about 0.1 ms of CPU on a small VM), so a
/// quiet fleet costs ck about a wake-up a second.
pub(in crate::supervisor) fn quiet_period(stall_timeout: Option<Duration>) -> Duration {
    let quiet = stall_timeout.map_or(QUIET_PERIOD, |t| t.min(QUIET_PERIOD));
    quiet.max(stall_period(stall_timeout))
}

/// The pace of queue sampling, shared with the sampler task.
pub(in crate::supervisor) struct Pacer {
    /// When the sampler task sends the next tick: a deadline, not a period, so that a tick
    /// handled late never shortens the wait after it (see `tasks::start_sampler`).
    pub next_tick: watch::Sender<Instant>,
    busy_until: Instant,
    selected_seen: u64,
    ticks: u32,
    /// When queues are sampled next (ticks in between only check readiness).
    next_sample: Instant,
    /// When queues were last sampled: a queue that did not move since was still since then.
    last_sample: Option<Instant>,
    /// When silent starting workers are checked for readiness next.
    next_ready_check: Instant,
    /// Whether the last sample was for the sampled fallback (a change samples at once).
    fallback: bool,
}

impl Pacer {
    /// Starts fast (`interval`), as if traffic had just been seen.
    pub fn new(interval: Duration) -> Pacer {
        Pacer {
            next_tick: watch::Sender::new(Instant::now() + interval),
            busy_until: Instant::now() + BUSY_HOLD,
            selected_seen: 0,
            ticks: 0,
            next_sample: Instant::now(),
            last_sample: None,
            next_ready_check: Instant::now(),
            fallback: false,
        }
    }

    /// Sets the next tick's deadline (the sampler is woken only when it changes).
    pub fn tick_at(&self, at: Instant) {
        self.next_tick.send_if_modified(|deadline| {
            let moved = *deadline != at;
            *deadline = at;
            moved
        });
    }

    /// The next tick comes now (a worker was spawned: its readiness checks start).
    pub fn tick_now(&self) {
        self.tick_at(Instant::now());
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
pub(in crate::supervisor) enum Signal {
    Watchdog,
    Probe,
    Stall,
}

impl Supervisor {
    /// Sets or clears one health signal of `index`'s worker; tells the lifecycle when the
    /// worker's verdict (healthy or not) changes.
    pub(in crate::supervisor) fn set_health(
        &mut self,
        index: u32,
        signal: Signal,
        bad: bool,
        detail: &str,
    ) {
        let Some(worker) = self.table.worker_mut(index) else {
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

    /// A tick: when sampling is due, samples every slot's accept queue, detects stalls and
    /// missed heartbeats and replaces workers unhealthy for too long; checks silent starting
    /// workers for readiness; sets the next tick's period.
    pub(in crate::supervisor) fn on_tick(&mut self) {
        let now = Instant::now();
        let fallback = self.sampled_steering();
        let watching = self.watching_readiness();
        if now >= self.inputs.pacer.next_sample || fallback != self.inputs.pacer.fallback {
            self.inputs.pacer.fallback = fallback;
            self.sample(now, fallback);
        }
        // Reading /proc costs ~0.1 ms a starting worker, paid only while one starts.
        let ready_every = self.cfg.health.sample_interval * READY_CHECK_EVERY;
        if watching && now >= self.inputs.pacer.next_ready_check {
            self.inputs.pacer.next_ready_check = now + ready_every;
            self.detect_ready();
        }
        let leaving = self.watching_leavers();
        if leaving {
            self.check_leavers(now);
        }
        self.pace(now, watching, leaving);
    }

    /// Whether some group steers by samples: least-queue by sampled depths (its program cannot
    /// read the exact ones) or least-conn by sampled counts (its program cannot sum them): only
    /// then must queues (and counts) be sampled every `--sample-interval`.
    fn sampled_steering(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.bpf.as_ref().is_some_and(|b| b.steers_by_samples()))
    }

    /// Samples every slot's accept queue (`TCP_INFO` of ck's copy of each socket), detects
    /// stalls and missed heartbeats, replaces workers unhealthy for too long.
    fn sample(&mut self, now: Instant, fallback: bool) {
        let stall_timeout = self.cfg.health.stall_timeout;
        let watchdog = self.cfg.health.watchdog;
        let mut depth_changed = Vec::new();
        let mut changes = Vec::new();
        // Nothing queued anywhere and no connection sent since the last sample.
        let mut quiet = true;
        // A queue that did not move since the last sample has been still since that sample.
        let still_since = self.inputs.pacer.last_sample.unwrap_or(now);
        self.inputs.pacer.last_sample = Some(now);
        // Connections the program sent each slot so far: with the depths, how many left its
        // queue since the last sample (`queue_motion`).
        // Read only where stall detection runs and the program counts.
        let counted = stall_timeout.is_some() && !self.cfg.no_bpf;
        let sent: BTreeMap<u32, u64> = match counted {
            true => self
                .table
                .slots
                .keys()
                .map(|&index| {
                    let stats = self.slot_stats(index);
                    (index, stats.selected + stats.probe_hits)
                })
                .collect(),
            false => BTreeMap::new(),
        };
        for slot in self.table.slots.values_mut() {
            let sent = sent.get(&slot.index).copied();
            let depth = slot.live_queue_depth();
            let previous = slot.queue_depth;
            let arrivals = sent.map(|sent| sent.saturating_sub(slot.sent_seen.unwrap_or(sent)));
            slot.sent_seen = sent;
            quiet &= depth == 0 && arrivals.unwrap_or(0) == 0;
            if depth != previous {
                slot.queue_depth = depth;
                depth_changed.push(slot.index);
            }
            let Some(worker) = &slot.worker else {
                slot.queue_rising_since = None;
                continue;
            };
            // A starting worker is not expected to accept yet (its accept probe, or a
            // connection the fallback queued, waits for its boot): its stall clock starts when
            // it is ready.
            let starting = matches!(slot.life.state, State::Starting(_));
            if let Some(timeout) = stall_timeout {
                if depth > 0 && !queue_motion::moved(previous, depth, arrivals) && !starting {
                    let from = queue_motion::still_since(previous, still_since, now);
                    let since = *slot.queue_rising_since.get_or_insert(from);
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
        let indices: Vec<u32> = self.table.slots.keys().copied().collect();
        for group in &mut self.groups {
            if let Some(bpf) = &mut group.bpf
                && let Err(e) = bpf.sample_connections(indices.iter().copied())
            {
                tracing::warn!(group = %group.addr, "writing least-conn's sampled counts: {e}");
            }
        }
        self.replace_long_unhealthy(now);
        let period = match (fallback, quiet) {
            (true, _) => self.fallback_period(now),
            (false, false) => stall_period(stall_timeout),
            (false, true) => quiet_period(stall_timeout),
        };
        self.inputs.pacer.next_sample = now + period;
    }

    /// The next tick: at the next sample, or while a silent worker boots, at its next
    /// readiness check if sooner, or while a worker leaves, at its next count (`leaving`).
    /// The sampler is told only when the deadline moves.
    fn pace(&mut self, now: Instant, watching: bool, leaving: bool) {
        let pacer = &self.inputs.pacer;
        let mut next = pacer.next_sample;
        if watching {
            next = next.min(pacer.next_ready_check);
        }
        if leaving {
            next = next.min(now + crate::supervisor::operations::leaving::CHECK_EVERY);
        }
        pacer.tick_at(next.max(now + Duration::from_micros(1)));
    }

    /// The sampled fallback's period: every `--sample-interval` while there is traffic
    /// (connections selected by the program, or a non-empty queue, in the last [`BUSY_HOLD`],
    /// or a silent worker booting), since least-queue on sampled depths needs fresh ones; idle,
    /// [`IDLE_SAMPLING_FACTOR`] times less often, so that an idle supervisor stays idle.
    fn fallback_period(&mut self, now: Instant) -> Duration {
        let watching = self.watching_readiness();
        let pacer = &mut self.inputs.pacer;
        pacer.ticks = pacer.ticks.wrapping_add(1);
        let fast = now < pacer.busy_until;
        let mut busy = self.table.slots.values().any(|s| s.queue_depth > 0);
        if !fast || pacer.ticks.is_multiple_of(TRAFFIC_CHECK_EVERY) {
            let selected: u64 = self
                .table
                .slots
                .keys()
                .map(|index| self.slot_stats(*index).selected)
                .sum();
            let pacer = &mut self.inputs.pacer;
            busy |= selected != pacer.selected_seen;
            pacer.selected_seen = selected;
        }
        let pacer = &mut self.inputs.pacer;
        if busy || watching {
            pacer.busy_until = now + BUSY_HOLD;
        }
        let interval = self.cfg.health.sample_interval;
        if now < pacer.busy_until {
            interval
        } else {
            interval * IDLE_SAMPLING_FACTOR
        }
    }

    /// `WATCHDOG=1` from a worker.
    pub(in crate::supervisor) fn on_watchdog(&mut self, index: u32) {
        let Some(worker) = self.table.worker_mut(index) else {
            return;
        };
        worker.health.last_watchdog = Some(Instant::now());
        if worker.health.watchdog {
            self.set_health(index, Signal::Watchdog, false, "WATCHDOG=1 again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_detection_samples_ten_times_per_timeout_at_most_every_50_ms() {
        let ms = Duration::from_millis;
        assert_eq!(stall_period(Some(Duration::from_secs(1))), ms(100));
        assert_eq!(stall_period(Some(Duration::from_secs(3))), ms(300));
        assert_eq!(stall_period(Some(ms(200))), ms(50));
        assert_eq!(stall_period(None), ms(100));
    }
}
