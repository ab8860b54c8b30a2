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
use std::{
    cell::RefCell,
    collections::VecDeque,
    time::{Duration, Instant},
};

use crate::control::{QuietWaitReport, Response};
use crate::supervisor::{
    Event, Group, Supervisor,
    fleet::quiet::{Limits, Verdict, decide},
    groups::Groups,
    lifecycle::Input,
    reports::View,
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
    fn observe_traffic(&self, groups: &Groups, table: &SlotTable) -> Option<(u64, Instant)> {
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
    pub(in crate::supervisor) fn readiness(&self, view: View<'_>) -> Option<String> {
        let report = self.report(view).filter(|r| r.waiting)?;
        Some(format!("stopping: {}", report.words()))
    }

    /// The wait for `ck status`: while it lasts, or how the last one ended.
    pub(in crate::supervisor) fn report(&self, view: View<'_>) -> Option<QuietWaitReport> {
        let ms = |d: Duration| d.as_millis() as u64;
        let base = QuietWaitReport {
            quiet_period_ms: ms(view.cfg.quiet_period),
            quiet_max_ms: ms(view.cfg.quiet_max),
            ..Default::default()
        };
        if let Some(wait) = &self.wait {
            let (total, changed) = self
                .observe_traffic(view.groups, view.table)
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

impl Supervisor {
    /// A stop signal (SIGTERM, SIGINT): the quiet wait, then the stop; during the wait, a
    /// second one skips the rest of it; once stopping, SIGINT kills every worker now.
    pub(in crate::supervisor) fn on_stop_signal(&mut self, name: &'static str) {
        if self.ops.quiet.waiting() {
            tracing::warn!(
                signal = name,
                "second stop signal: skipping the rest of the quiet wait"
            );
            self.end_wait(format!("{name} again during the wait"), false);
        } else if !self.stopping {
            self.stop(name);
        } else if name == "SIGINT" {
            // A second Ctrl-C once stopping: the person at the terminal does not want to wait.
            tracing::warn!(signal = name, "second interrupt: killing every worker now");
            let all = self.table.slots.keys().map(|i| (*i, Input::KillNow));
            self.apply_all(all.collect());
        } else {
            tracing::info!(signal = name, "already stopping; send SIGINT to kill now");
        }
    }

    /// `ck stop` (`now`: `ck stop --now`) on the control socket.
    pub(in crate::supervisor) fn stop_requested(&mut self, now: bool) -> Response {
        if self.ops.quiet.waiting() {
            if !now {
                return Response::Ok(
                    "already stopping: waiting for traffic to stop (`ck stop --now` stops at once)"
                        .into(),
                );
            }
            tracing::info!("ck stop --now: skipping the rest of the quiet wait");
            self.end_wait("ck stop --now".into(), false);
            return Response::Ok("stopping: stopping every worker now".into());
        }
        if self.stopping {
            return Response::Ok("already stopping: stopping every worker".into());
        }
        match now {
            true => {
                tracing::info!("ck stop --now: stopping every worker (no quiet wait)");
                self.begin_shutdown("ck stop --now");
            }
            false => self.stop("ck stop"),
        }
        match self.ops.quiet.waiting() {
            true => Response::Ok(
                "stopping: waiting for traffic to stop, then stopping every worker".into(),
            ),
            false => Response::Ok("stopping".into()),
        }
    }

    /// Begins a stop: the quiet wait where it can run, else the stop at once.
    fn stop(&mut self, reason: &'static str) {
        let skip = crate::supervisor::fleet::quiet::skip(
            self.cfg.quiet_period,
            self.reports.metrics_addr.is_some(),
            !self.cfg.no_bpf,
        );
        let total = match (
            skip,
            self.ops.quiet.observe_traffic(&self.groups, &self.table),
        ) {
            (None, Some((total, _))) => total,
            (why, _) => {
                let why = why.unwrap_or("the BPF program is still being set up");
                tracing::info!(
                    signal = reason,
                    "stopping every worker (no quiet wait: {why})"
                );
                return self.begin_shutdown(reason);
            }
        };
        let now = Instant::now();
        let ticker = tasks::start_ticker(&self.events, POLL, || Event::QuietTick);
        self.ops.quiet.wait = Some(Wait {
            started: now,
            reason,
            first_total: total,
            samples: VecDeque::from([(now, total)]),
            ticker,
        });
        self.ops.quiet.ended = None;
        self.reports.systemd_due = true;
        tracing::info!(
            signal = reason,
            quiet_period = ?self.cfg.quiet_period,
            quiet_max = ?self.cfg.quiet_max,
            "stopping: /readyz answers 503 and every worker keeps serving; waiting until no new \
             connection comes for the quiet period, then stopping every worker"
        );
    }

    /// Reads the counters during the wait; ends it once quiet, or at `--quiet-max`.
    pub(in crate::supervisor) fn on_quiet_tick(&mut self) {
        let Some((total, changed)) = self.ops.quiet.observe_traffic(&self.groups, &self.table)
        else {
            return self.end_wait("the program's counters are gone".into(), false);
        };
        let Some(wait) = self.ops.quiet.wait.as_mut() else {
            return;
        };
        let now = Instant::now();
        wait.samples.push_back((now, total));
        while wait.samples.len() > 2 && now - wait.samples[1].0 >= RATE_WINDOW {
            wait.samples.pop_front();
        }
        let limits = Limits {
            period: self.cfg.quiet_period,
            max: self.cfg.quiet_max,
            min_span: POLL,
        };
        match decide(limits, wait.started, changed, now, wait.samples[0], total) {
            Verdict::Wait => {}
            Verdict::Quiet(quiet) => {
                let why = format!("quiet for {quiet:.1?}: no new connection");
                self.end_wait(why, false);
            }
            Verdict::TooLong(rate) => {
                let why = format!(
                    "reached --quiet-max {:?} while still receiving {rate:.1} new connections/s: \
                     the balancer never stopped sending (check that its health check reads /readyz)",
                    self.cfg.quiet_max
                );
                self.end_wait(why, true);
            }
        }
    }

    /// Ends the wait (`why` for the log and `ck status`) and begins the stop.
    fn end_wait(&mut self, why: String, warn: bool) {
        let Some(wait) = self.ops.quiet.wait.take() else {
            return;
        };
        wait.ticker.abort();
        let (total, changed) = self
            .ops
            .quiet
            .observe_traffic(&self.groups, &self.table)
            .unwrap_or((wait.first_total, wait.started));
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
        self.ops.quiet.ended = Some(ended);
        self.begin_shutdown(wait.reason);
    }
}
