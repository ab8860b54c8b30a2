//! The pace of the health tick. Only the sampled fallback needs millisecond-fresh depths
//! (`--sample-interval` under traffic, [`IDLE_SAMPLING_FACTOR`] times slower idle). Otherwise
//! queues are sampled every `--stall-timeout` / [`STALL_SAMPLES`], at least
//! [`MIN_STALL_PERIOD`], while connections arrive or wait: a stall is then seen within a tenth
//! of its timeout late. While nothing arrives and nothing waits, once every [`quiet_period`] (a
//! second by default): an idle ck wakes about once a second. `--ready auto`'s detection of
//! silent starting workers keeps its own fast pace (every [`READY_CHECK_EVERY`] sample
//! interval, 1 ms) while such a worker boots, without sampling, so readiness is seen within
//! about a millisecond of the worker's first `accept`; so does the count of a leaving worker's
//! connections (`leaving`).
use std::time::{Duration, Instant};

use tokio::sync::watch;

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

impl Pacer {
    /// Whether queues are sampled on this tick: their time came, or the sampled fallback was
    /// switched on or off (a change samples at once).
    pub fn sample_due(&mut self, now: Instant, fallback: bool) -> bool {
        let due = now >= self.next_sample || fallback != self.fallback;
        self.fallback = fallback;
        due
    }

    /// Whether silent starting workers are checked for readiness on this tick (while `watching`
    /// them, every [`READY_CHECK_EVERY`] `interval`).
    pub fn ready_check_due(&mut self, now: Instant, watching: bool, interval: Duration) -> bool {
        if !watching || now < self.next_ready_check {
            return false;
        }
        self.next_ready_check = now + interval * READY_CHECK_EVERY;
        true
    }

    /// A sample at `now`: returns since when a queue that did not move has been still (the
    /// sample before, or now for the first).
    pub fn sampled(&mut self, now: Instant) -> Instant {
        self.last_sample.replace(now).unwrap_or(now)
    }

    /// Sets when queues are sampled next, after a sample at `now`: the fallback's period (see
    /// [`Pacer::fallback_period`]), else [`stall_period`], or [`quiet_period`] if the sample
    /// found nothing queued and nothing sent.
    pub fn next_sample_after(
        &mut self,
        now: Instant,
        fallback: Option<Duration>,
        quiet: bool,
        stall_timeout: Option<Duration>,
    ) {
        let period = match (fallback, quiet) {
            (Some(period), _) => period,
            (None, false) => stall_period(stall_timeout),
            (None, true) => quiet_period(stall_timeout),
        };
        self.next_sample = now + period;
    }

    /// The next tick: at the next sample, or while a silent worker boots, at its next
    /// readiness check if sooner, or while a worker leaves or a UDP worker stops, at its next
    /// count (`count_every`). The sampler is told only when the deadline moves.
    pub fn pace(&self, now: Instant, watching: bool, count_every: Option<Duration>) {
        let mut next = self.next_sample;
        if watching {
            next = next.min(self.next_ready_check);
        }
        if let Some(every) = count_every {
            next = next.min(now + every);
        }
        self.tick_at(next.max(now + Duration::from_micros(1)));
    }

    /// The sampled fallback's period: every `interval` (`--sample-interval`) while there is
    /// traffic (connections selected by the program, or a non-empty queue (`queued`), in the
    /// last [`BUSY_HOLD`], or a silent worker booting (`watching`)), since least-queue on
    /// sampled depths needs fresh ones; idle, [`IDLE_SAMPLING_FACTOR`] times less often, so that
    /// an idle supervisor stays idle. `selected` sums the program's `selected` counters; it is
    /// read every [`TRAFFIC_CHECK_EVERY`] ticks while fast.
    pub fn fallback_period(
        &mut self,
        now: Instant,
        queued: bool,
        watching: bool,
        selected: impl FnOnce() -> u64,
        interval: Duration,
    ) -> Duration {
        self.ticks = self.ticks.wrapping_add(1);
        let fast = now < self.busy_until;
        let mut busy = queued;
        if !fast || self.ticks.is_multiple_of(TRAFFIC_CHECK_EVERY) {
            let selected = selected();
            busy |= selected != self.selected_seen;
            self.selected_seen = selected;
        }
        if busy || watching {
            self.busy_until = now + BUSY_HOLD;
        }
        if now < self.busy_until {
            interval
        } else {
            interval * IDLE_SAMPLING_FACTOR
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

    #[test]
    fn the_fallback_samples_fast_under_traffic_and_slowly_once_idle() {
        let mut pacer = Pacer::new(Duration::from_millis(1));
        let now = Instant::now();
        let interval = Duration::from_millis(1);
        assert_eq!(
            pacer.fallback_period(now, false, false, || 0, interval),
            interval
        );
        let later = now + BUSY_HOLD * 2;
        assert_eq!(
            pacer.fallback_period(later, false, false, || 0, interval),
            interval * IDLE_SAMPLING_FACTOR
        );
        assert_eq!(
            pacer.fallback_period(later, false, false, || 5, interval),
            interval
        );
    }
}
