//! Stop by observed traffic. On SIGTERM, SIGINT or `ck stop` (with `--metrics`), ck first
//! answers `/readyz` with 503 (stopping) while every worker keeps serving and stays selected,
//! and begins the stop only once the program has selected no new connection for
//! `--quiet-period` (its per-slot counters in the `stats` maps, summed over every group and
//! slot: the kernel's count), or at `--quiet-max` at the latest. A second SIGTERM or SIGINT, or
//! `ck stop --now`, skips the rest of the wait. Without `--metrics` nobody can be checking
//! readiness, so there is no wait.
//!
//! Also the time since each group's last new connection for `/metrics`, from the last change of
//! the same counters.
pub(in crate::supervisor) mod rule;

use std::{
    cell::RefCell,
    collections::VecDeque,
    time::{Duration, Instant},
};

use tokio::sync::mpsc::UnboundedSender;

use crate::control::QuietWaitReport;
use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    event::Event,
    groups::Group,
    groups::Groups,
    operations::quiet::rule::{Limits, Verdict, decide},
    slots::SlotTable,
    tasks,
};

/// How often the wait reads the counters: a modest pace (a handful of map reads each time).
const POLL: Duration = Duration::from_millis(100);
/// The window of the rate a wait that reached `--quiet-max` reports.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// The quiet wait's state and the traffic seen per group.
#[derive(Default)]
pub(in crate::supervisor) struct Quiet {
    wait: Option<Wait>,
    /// How the last wait ended (for `ck status` while the stop runs).
    ended: Option<Ended>,
    /// Per group: the new-connection count last read and when it last changed (read when
    /// asked, hence the cell: scrapes and status reports take the supervisor by reference).
    seen: RefCell<Vec<Option<Seen>>>,
}

/// `--quiet-period` and `--quiet-max`.
#[derive(Clone, Copy, Debug)]
pub(in crate::supervisor) struct Window {
    /// No new connection for this long: quiet.
    pub period: Duration,
    /// The wait ends at this at the latest.
    pub max: Duration,
}

impl Window {
    /// The window of `cfg`.
    pub(in crate::supervisor) fn of(cfg: &RunConfig) -> Window {
        Window {
            period: cfg.quiet_period,
            max: cfg.quiet_max,
        }
    }
}

/// A group's new-connection count as last read.
#[derive(Clone, Copy)]
struct Seen {
    total: u64,
    changed: Instant,
}

/// A wait under way.
struct Wait {
    started: Instant,
    /// What asked for the stop (`SIGTERM`, `ck stop`): the shutdown's reason once it ends.
    reason: &'static str,
    /// Every group's count summed when the wait began.
    first_total: u64,
    /// Recent (time, total) samples, for the rate reported at `--quiet-max`.
    samples: VecDeque<(Instant, u64)>,
    ticker: tokio::task::AbortHandle,
}

/// A wait that ended.
struct Ended {
    why: String,
    waited: Duration,
    quiet: Duration,
    new_connections: u64,
}

impl Quiet {
    /// Whether a wait is under way.
    pub(in crate::supervisor) fn waiting(&self) -> bool {
        self.wait.is_some()
    }

    /// New connections the program selected for `group`, summed over the slots in use (the
    /// kernel's `selected` less re-homed requests), or None without counters.
    fn new_connections(group: &Group, table: &SlotTable) -> Option<u64> {
        let stats = |slot: u32| match (&group.bpf, &group.pinned_stats) {
            (Some(bpf), _) => Some(bpf.stats(slot)),
            (None, Some(pinned)) => Some(pinned.stats(slot)),
            (None, None) => None,
        };
        let mut total = 0u64;
        for index in table.slots.keys() {
            let s = stats(*index)?;
            total = total.wrapping_add(s.selected.saturating_sub(s.migrated));
        }
        Some(total)
    }

    /// Reads every group's count; returns the sum and the latest change over all groups.
    pub(in crate::supervisor) fn observe_traffic(
        &self,
        groups: &Groups,
        table: &SlotTable,
    ) -> Option<(u64, Instant)> {
        let now = Instant::now();
        let mut seen = self.seen.borrow_mut();
        seen.resize(groups.len(), None);
        let mut sum = 0u64;
        let mut latest: Option<Instant> = None;
        for (group, seen) in groups.iter().zip(seen.iter_mut()) {
            let total = Quiet::new_connections(group, table)?;
            let entry = match seen {
                // A slot forgotten or reset changes the sum too: any change counts as traffic.
                Some(s) if s.total == total => *s,
                _ => Seen {
                    total,
                    changed: now,
                },
            };
            *seen = Some(entry);
            sum = sum.wrapping_add(total);
            latest = Some(latest.map_or(entry.changed, |l| l.max(entry.changed)));
        }
        Some((sum, latest.unwrap_or(now)))
    }

    /// `/metrics`: per group, the seconds since the program last selected a new connection
    /// for it (since ck first read its counters, if none came since); None without counters.
    pub(in crate::supervisor) fn seconds_since_last_connection(
        &self,
        groups: &Groups,
        table: &SlotTable,
    ) -> Vec<Option<f64>> {
        self.observe_traffic(groups, table);
        let seen = self.seen.borrow();
        (0..groups.len())
            .map(|i| {
                seen.get(i)
                    .copied()
                    .flatten()
                    .map(|s| s.changed.elapsed().as_secs_f64())
            })
            .collect()
    }

    /// `/readyz` during the wait: not ready, with where the wait stands.
    pub(in crate::supervisor) fn readiness(
        &self,
        cfg: &RunConfig,
        groups: &Groups,
        table: &SlotTable,
    ) -> Option<String> {
        let report = self.report(cfg, groups, table).filter(|r| r.waiting)?;
        Some(format!("stopping: {}", report.words()))
    }

    /// The wait for `ck status`: while it lasts, or how the last one ended.
    pub(in crate::supervisor) fn report(
        &self,
        cfg: &RunConfig,
        groups: &Groups,
        table: &SlotTable,
    ) -> Option<QuietWaitReport> {
        let ms = |d: Duration| d.as_millis() as u64;
        let base = QuietWaitReport {
            quiet_period_ms: ms(cfg.quiet_period),
            quiet_max_ms: ms(cfg.quiet_max),
            ..Default::default()
        };
        if let Some(wait) = &self.wait {
            let (total, changed) = self
                .observe_traffic(groups, table)
                .unwrap_or((wait.first_total, wait.started));
            return Some(QuietWaitReport {
                waiting: true,
                quiet_ms: ms(changed.max(wait.started).elapsed()),
                waited_ms: ms(wait.started.elapsed()),
                new_connections: total.wrapping_sub(wait.first_total),
                ..base
            });
        }
        let ended = self.ended.as_ref()?;
        Some(QuietWaitReport {
            quiet_ms: ms(ended.quiet),
            waited_ms: ms(ended.waited),
            new_connections: ended.new_connections,
            ended: Some(ended.why.clone()),
            ..base
        })
    }
}

impl Quiet {
    /// Begins a stop for `reason`: the quiet wait where it can run (`skip` says why not, see
    /// [`rule::skip`]; `traffic`: every group's count now, None
    /// without counters). The shutdown's reason when it is to begin at once (no wait).
    pub(in crate::supervisor) fn begin(
        &mut self,
        reason: &'static str,
        skip: Option<&'static str>,
        traffic: Option<(u64, Instant)>,
        limits: Window,
        events: &UnboundedSender<Event>,
    ) -> Option<&'static str> {
        let total = match (skip, traffic) {
            (None, Some((total, _))) => total,
            (why, _) => {
                let why = why.unwrap_or("the BPF program is still being set up");
                tracing::info!(
                    signal = reason,
                    "stopping every worker (no quiet wait: {why})"
                );
                return Some(reason);
            }
        };
        let now = Instant::now();
        let ticker = tasks::start_ticker(events, POLL, || Event::QuietTick);
        self.wait = Some(Wait {
            started: now,
            reason,
            first_total: total,
            samples: VecDeque::from([(now, total)]),
            ticker,
        });
        self.ended = None;
        tracing::info!(
            signal = reason,
            quiet_period = ?limits.period,
            quiet_max = ?limits.max,
            "stopping: /readyz answers 503 and every worker keeps serving; waiting until no new \
             connection comes for the quiet period, then stopping every worker"
        );
        None
    }

    /// The counters read during the wait (`traffic`: None once they are gone): why the wait
    /// ends now (and whether that is worth a warning), if it does.
    pub(in crate::supervisor) fn tick(
        &mut self,
        traffic: Option<(u64, Instant)>,
        window: Window,
    ) -> Option<(String, bool)> {
        let Some((total, changed)) = traffic else {
            return Some(("the program's counters are gone".into(), false));
        };
        let wait = self.wait.as_mut()?;
        let now = Instant::now();
        wait.samples.push_back((now, total));
        while wait.samples.len() > 2 && now - wait.samples[1].0 >= RATE_WINDOW {
            wait.samples.pop_front();
        }
        let limits = Limits {
            period: window.period,
            max: window.max,
            min_span: POLL,
        };
        match decide(limits, wait.started, changed, now, wait.samples[0], total) {
            Verdict::Wait => None,
            Verdict::Quiet(quiet) => {
                Some((format!("quiet for {quiet:.1?}: no new connection"), false))
            }
            Verdict::TooLong(rate) => Some((
                format!(
                    "reached --quiet-max {:?} while still receiving {rate:.1} new connections/s: \
                     the balancer never stopped sending (check that its health check reads /readyz)",
                    window.max
                ),
                true,
            )),
        }
    }

    /// Ends the wait (`why` for the log and `ck status`; `traffic`: the counters now): the
    /// reason of the stop it asked for, for the shutdown that follows (None: no wait).
    pub(in crate::supervisor) fn end(
        &mut self,
        why: String,
        warn: bool,
        traffic: Option<(u64, Instant)>,
    ) -> Option<&'static str> {
        let wait = self.wait.take()?;
        wait.ticker.abort();
        let (total, changed) = traffic.unwrap_or((wait.first_total, wait.started));
        let ended = Ended {
            why,
            waited: wait.started.elapsed(),
            quiet: changed.max(wait.started).elapsed(),
            new_connections: total.wrapping_sub(wait.first_total),
        };
        let (waited, new_connections) = (ended.waited, ended.new_connections);
        match warn {
            true => tracing::warn!(
                waited = ?waited,
                new_connections,
                "quiet wait ended after {waited:.1?}: {}; stopping every worker",
                ended.why
            ),
            false => tracing::info!(
                waited = ?waited,
                new_connections,
                "quiet wait ended after {waited:.1?}: {}; stopping every worker",
                ended.why
            ),
        }
        self.ended = Some(ended);
        Some(wait.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Window = Window {
        period: Duration::from_secs(2),
        max: Duration::from_secs(30),
    };

    #[tokio::test]
    async fn a_stop_that_cannot_wait_begins_the_shutdown_at_once_with_its_reason() {
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut quiet = Quiet::default();
        let traffic = Some((5, Instant::now()));
        let skipped = quiet.begin("SIGTERM", Some("no --metrics"), traffic, WINDOW, &events);
        assert_eq!(skipped, Some("SIGTERM"));
        // No counters yet (the program is loading): no wait either.
        assert_eq!(
            quiet.begin("ck stop", None, None, WINDOW, &events),
            Some("ck stop")
        );
        assert!(!quiet.waiting());
        assert!(quiet.ended.is_none());
    }

    #[tokio::test]
    async fn a_wait_ends_once_with_the_reason_of_the_stop_that_began_it() {
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut quiet = Quiet::default();
        let started = Instant::now();
        let traffic = Some((100, started));
        assert_eq!(quiet.begin("SIGTERM", None, traffic, WINDOW, &events), None);
        assert!(quiet.waiting());
        // Counters that vanish end the wait, without a warning.
        let gone = quiet.tick(None, WINDOW);
        assert_eq!(
            gone,
            Some(("the program's counters are gone".to_string(), false))
        );
        // 7 new connections since it began, counted in how it ended.
        let reason = quiet.end("ck stop --now".into(), false, Some((107, started)));
        assert_eq!(reason, Some("SIGTERM"));
        assert!(!quiet.waiting());
        let ended = quiet.ended.as_ref().expect("ended");
        assert_eq!(
            (ended.why.as_str(), ended.new_connections),
            ("ck stop --now", 7)
        );
        // Ended once: a second end and a tick find no wait.
        assert_eq!(quiet.end("again".into(), false, None), None);
        assert_eq!(quiet.tick(Some((107, started)), WINDOW), None);
    }
}
