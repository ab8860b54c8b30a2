//! The operations as the supervisor runs them: each plans from the fleet's state (`operations`,
//! the fleet core) and this applies the plan through the executor and answers.
//!
//! - Scaling (`ck scale N`, `SIGTTIN` +1, `SIGTTOU` -1) and slot opening, by the fleet core's
//!   decisions ([`super::fleet::scale`]) through the fleet executor. Workers scaled away leave
//!   gracefully (SIGTERM, then SIGKILL only after the stop timeout), never killed outright.
//! - Hot spares (`--spares N`): N extra workers booted and ready but never selected (standby
//!   slots). When a serving worker dies, a ready spare takes its place in the same publish, so
//!   the fleet has its full capacity again at once rather than after a boot, and a new spare
//!   boots in the background. A spare that dies before it is used is replaced after a growing
//!   delay (100 ms doubling to 10 s). The decisions are the fleet core's
//!   ([`super::fleet::spares`], [`super::fleet::death`]).
//! - Rolls (`fleet::roll`, answered by `Operations::roll_ended`), recycling (`operations::recycle`), reloads with `--config`
//!   (`operations::reconfigure`), drains (`operations::drain`) and the stop's quiet wait
//!   (`operations::quiet`), the canary's watch against its limits (`operations::canary_watch`).
//! - Slow start's steps: each ramping slot's load read from the kernel, a ramp that keeps up
//!   ends early (`fleet::slow_start::Ramps`).
use std::{collections::VecDeque, time::Duration, time::Instant};

use tokio::sync::oneshot;

use super::{
    event::Event,
    event_loop::Supervisor,
    executor::decisions,
    fleet,
    lifecycle::Input,
    operations::{canary_watch, drain, quiet, quiet::Window, reconfigure, recycle},
};
use crate::{
    control::Response,
    settings::{choices::CanaryAsk, run_config::RunConfig},
};

impl Supervisor {
    /// Opens a new serving slot and starts its worker. Errors when no slot is free or the
    /// worker could not be started.
    pub(super) fn open_slot(&mut self) -> Result<u32, String> {
        decisions::open_slot(self).map_err(|e| e.to_string())
    }

    /// Changes the fleet to `target` workers: new slots start workers; the slots that keep the
    /// least open leave first (see [`super::lifecycle::retire_order`]).
    pub(super) fn scale_to(&mut self, target: u32) -> Result<String, String> {
        let rolling = self.ops.core.roll.is_some();
        let shape = super::machine_config::shape(&self.cfg);
        if let Some(why) = fleet::scale::refusal(target, self.stopping, rolling, &shape) {
            return Err(why);
        }
        let current = self.table.serving().len() as u32;
        tracing::info!(from = current, to = target, "scaling");
        decisions::scale_to(self, target).map_err(|e| match e {
            Ok(why) => why,
            Err(e) => e.to_string(),
        })?;
        self.cfg.workers = target;
        Ok(format!("scaling from {current} to {target} worker(s)"))
    }

    /// `ck rollback`: the release the last reload replaced back in, the current one leaving,
    /// in one publish (see [`fleet::rollback`]); why not, naming what to run instead.
    pub(super) fn rollback(&mut self) -> Result<String, String> {
        let plan = decisions::rollback(self).inspect_err(|why| {
            tracing::warn!(reason = why.as_str(), "rollback refused");
        })?;
        let pids = |slots: &[u32]| -> Vec<u32> {
            let pid = |i: &u32| self.table.slots.get(i).map_or(0, |s| s.pid());
            slots.iter().map(pid).collect()
        };
        let (back, leaving) = (pids(&plan.back), pids(&plan.leaving));
        tracing::info!(
            back = ?plan.back,
            leaving = ?plan.leaving,
            reason = "ck rollback",
            "rolled back: the kept release serves again, the current one leaves"
        );
        Ok(format!(
            "rolled back: {} worker(s) of the previous release serve again (pids {back:?}); \
             {} worker(s) of the release it replaced leave once their connections are done \
             (pids {leaving:?})",
            back.len(),
            leaving.len(),
        ))
    }

    /// Boots spares until there are `--spares` (not while stopping, rolling, or backing off).
    pub(super) fn replenish_spares(&mut self) {
        decisions::replenish_spares(self);
    }

    /// The boot window ended: the active set published again, without the starting workers.
    pub(super) fn republish(&mut self) {
        if let Some(index) = self.table.slots.keys().next().copied() {
            self.apply(index, Input::Republish);
        }
    }

    /// `--slow-start`: one step of the ramps, each slot's load read from the kernel now
    /// (connections in its accept queues and open; a ramp past half its window that holds no
    /// more than a warm worker goes faster). Returns whether one ended early.
    pub(super) fn step_ramps(&mut self) -> bool {
        let Some(window) = self.cfg.slow_start else {
            return false;
        };
        let (table, groups) = (&self.table, &self.groups);
        let load = |index| {
            let queued = table.slots.get(&index)?.live_queue_depth();
            Some(u64::from(queued) + groups.kernel_connections_of(index)?)
        };
        let lives = super::fleet::lives(table.lives());
        let ended = (self.ops.core.ramps).step(&lives, Instant::now(), window, load);
        for slot in &ended {
            tracing::info!(
                slot,
                pid = table.worker(*slot).map_or(0, |w| w.pid),
                reason = "it held no more connections per unit of its share than a warm worker",
                "slow start ended early: the worker keeps up"
            );
        }
        !ended.is_empty()
    }

    /// A spare died before it was used (or could not start): the next after `delay`.
    pub(super) fn spare_lost(&mut self, delay: Duration) {
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            "a spare died before it was used: next spare after a delay"
        );
        super::tasks::send_after(&self.events, delay, Event::SpareDue);
    }

    /// The canary a reload starts with: `ck reload`'s (its limits completed by `ck run`'s),
    /// else `ck run --canary`'s, if any.
    fn canary_asked(&self, asked: Option<CanaryAsk>) -> Option<CanaryAsk> {
        let mut canary = asked.or(self.cfg.canary)?;
        canary.limits = canary.limits.or(self.cfg.canary_limits);
        Some(canary)
    }

    /// The canary's slots while it is judged, and its limits.
    fn canary_judged(&self) -> Option<(Vec<u32>, crate::settings::choices::CanaryLimits)> {
        let canary = self.ops.core.roll.as_ref()?.canary.as_ref()?;
        let slots = canary.pairs.iter().map(|(_, new)| *new).collect();
        canary.judging().then_some((slots, canary.ask.limits))
    }

    /// A canary went in: watched against its limits, if it has any (checked every
    /// [`canary_watch::CHECK_EVERY`]).
    pub(super) fn watch_canary(&mut self) {
        if let Some(watch) = self.ops.canary_watch.take() {
            watch.end(&mut self.groups);
        }
        let Some((slots, limits)) = self.canary_judged() else {
            return;
        };
        let watch = canary_watch::CanaryWatch::start(limits, &slots, &mut self.groups, &self.table);
        if watch.is_some() {
            super::tasks::send_after(&self.events, canary_watch::CHECK_EVERY, Event::CanaryCheck);
        }
        self.ops.canary_watch = watch;
    }

    /// The watched canary's counts against its limits: past one, it is withdrawn; after its
    /// verdict, the watch ends.
    pub(super) fn check_canary(&mut self) {
        let Some(watch) = self.ops.canary_watch.take() else {
            return;
        };
        let judged = self.canary_judged().map(|(slots, _)| slots);
        if !judged.is_some_and(|slots| watch.watches(&slots)) {
            return watch.end(&mut self.groups);
        }
        if let Some((slot, why)) = watch.crossed(&self.groups, &self.table) {
            watch.end(&mut self.groups);
            return decisions::on_faltered(self, slot, why);
        }
        let mut watch = watch;
        let base = self.cfg.health.probe_port_base;
        watch.nudge(&self.groups, &self.table, &self.inputs.healths, base);
        self.ops.canary_watch = Some(watch);
        super::tasks::send_after(&self.events, canary_watch::CHECK_EVERY, Event::CanaryCheck);
    }

    /// Starts a rolling restart of every current worker.
    fn begin_reload(
        &mut self,
        reply: Option<oneshot::Sender<Response>>,
        canary: Option<CanaryAsk>,
    ) {
        let all = fleet::roll::reload_targets(&fleet::lives(self.table.lives()));
        let canary = self.canary_asked(canary);
        self.begin_roll(all, reply, canary, true);
    }

    /// Starts a rolling restart of the workers of `pending` slots (`reload`: of the whole
    /// fleet, by `ck reload` or SIGHUP); `reply` is answered when it ends.
    fn begin_roll(
        &mut self,
        pending: VecDeque<u32>,
        reply: Option<oneshot::Sender<Response>>,
        canary: Option<CanaryAsk>,
        reload: bool,
    ) {
        let limits = canary.map(|c| c.limits).unwrap_or_default();
        if let Some(why) = self.groups.canary_limits_refused(&limits) {
            tracing::warn!("reload refused: {why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(why));
            }
            return;
        }
        if self.ops.roll_may_start(self.stopping, reply) {
            let _ = decisions::begin_roll(self, pending, reload, canary);
        }
    }

    /// Once a second: starts the replacement of one worker that needs recycling (never during
    /// a roll or a shutdown).
    pub(super) fn check_recycling(&mut self) {
        let Some((index, why)) = recycle::due(&self.cfg, &self.groups, &mut self.table) else {
            return;
        };
        if self.ops.core.roll.is_some() || self.stopping {
            return;
        }
        let pid = self.table.slots.get(&index).map_or(0, |s| s.pid());
        tracing::info!(
            slot = index,
            pid,
            reason = why.as_str(),
            "recycling worker: replacing it gracefully"
        );
        self.begin_roll([index].into(), None, None, false);
    }

    /// Starts a graceful replacement of a worker unhealthy for longer than
    /// `--unhealthy-replace-after` (one at a time, never during a rolling restart).
    pub(super) fn replace_long_unhealthy(&mut self, now: Instant) {
        let Some(after) = self.cfg.health.unhealthy_replace_after else {
            return;
        };
        if self.ops.core.roll.is_some() || self.stopping {
            return;
        }
        if let Some(index) = recycle::overdue(&self.table, &self.inputs.healths, after, now) {
            tracing::warn!(slot = index, after = ?after, "worker unhealthy too long: replacing it");
            self.begin_roll([index].into(), None, None, false);
        }
    }

    /// `ck reload` / SIGHUP: with a config file, reads it again and applies the changes, then
    /// the rolling restart of every worker (which starts the new app); `reply` gets the changes
    /// and the roll's result.
    pub(super) fn reload(
        &mut self,
        reply: Option<oneshot::Sender<Response>>,
        canary: Option<CanaryAsk>,
    ) {
        // Refused before the file is read when a roll could not start (the roll says why).
        let source = match self.ops.config.as_mut() {
            Some(source) if !self.stopping && self.ops.core.roll.is_none() => source,
            _ => return self.begin_reload(reply, canary),
        };
        let reread = match source.reread() {
            Ok(reread) => reread,
            Err(why) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Response::Error(why));
                }
                return;
            }
        };
        // The workers to replace: those running now (new slots start the new app anyway).
        let running = self
            .table
            .slots
            .values()
            .filter(|s| s.life.serving() && s.worker.is_some())
            .map(|s| s.index)
            .collect();
        let workers = reread.next.workers;
        self.take_settings(reread.next);
        if reread.workers_changed
            && let Err(why) = self.scale_to(workers)
        {
            tracing::error!("{why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(format!("{}; {why}", reread.summary)));
            }
            return;
        }
        let reply = reply.map(|reply| reconfigure::prefixed(reply, reread.summary));
        let canary = self.canary_asked(canary);
        self.begin_roll(running, reply, canary, true);
    }

    /// Runs with `next` from now on (all but the worker count, which `scale_to` changes):
    /// lifecycle settings recomputed, the probe ticker restarted if probes changed.
    fn take_settings(&mut self, next: RunConfig) {
        let probes_changed = next.health.probe != self.cfg.health.probe
            || next.health.probe_interval != self.cfg.health.probe_interval;
        self.cfg = RunConfig {
            workers: self.cfg.workers,
            ..next
        };
        self.settings = super::machine_config::settings(&self.cfg);
        // The state file carries settings the orphan guard uses (`--stop-signal`).
        self.continuity.state_dirty = true;
        if probes_changed {
            self.inputs.start_probe_ticker(&self.cfg, &self.events);
        }
    }

    /// `ck drain SLOT` / `ck undrain SLOT`.
    pub(super) fn set_drained(&mut self, index: u32, drained: bool) -> Response {
        let (answer, inputs) =
            drain::one(&self.groups, &self.table, self.cfg.no_bpf, index, drained);
        if !inputs.is_empty() {
            self.apply_all(inputs);
        }
        answer
    }

    /// `ck drain --all` / `ck undrain --all`: every slot in one batch (one publish).
    pub(super) fn set_all_drained(&mut self, drained: bool) -> Response {
        let (answer, inputs) = drain::all(&self.groups, &self.table, self.cfg.no_bpf, drained);
        if !inputs.is_empty() {
            self.apply_all(inputs);
        }
        answer
    }

    /// A stop signal (SIGTERM, SIGINT): the quiet wait, then the stop; during the wait, a
    /// second one skips the rest of it; once stopping, SIGINT kills every worker now.
    pub(super) fn on_stop_signal(&mut self, name: &'static str) {
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
    pub(super) fn stop_requested(&mut self, now: bool) -> Response {
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
        let skip = quiet::rule::skip(
            self.cfg.quiet_period,
            self.reports.metrics_addr.is_some(),
            !self.cfg.no_bpf,
        );
        let traffic = self.ops.quiet.observe_traffic(&self.groups, &self.table);
        match self
            .ops
            .quiet
            .begin(reason, skip, traffic, Window::of(&self.cfg), &self.events)
        {
            Some(now) => self.begin_shutdown(now),
            None => self.reports.systemd_due = true,
        }
    }

    /// Reads the counters during the wait; ends it once quiet, or at `--quiet-max`.
    pub(super) fn on_quiet_tick(&mut self) {
        let traffic = self.ops.quiet.observe_traffic(&self.groups, &self.table);
        if let Some((why, warn)) = self.ops.quiet.tick(traffic, Window::of(&self.cfg)) {
            self.end_wait(why, warn);
        }
    }

    /// Ends the wait (`why` for the log and `ck status`) and begins the stop.
    fn end_wait(&mut self, why: String, warn: bool) {
        let traffic = self.ops.quiet.observe_traffic(&self.groups, &self.table);
        if let Some(reason) = self.ops.quiet.end(why, warn, traffic) {
            self.begin_shutdown(reason);
        }
    }

    /// Starts the shutdown (after the quiet wait, if any: see `quiet`): nothing new is steered anywhere, every worker gets SIGTERM, and
    /// SIGKILL after the stop timeout (`--drain-timeout`).
    pub(super) fn begin_shutdown(&mut self, reason: &'static str) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        decisions::shutdown(self, reason);
    }
}
