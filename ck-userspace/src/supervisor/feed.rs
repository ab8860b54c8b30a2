//! What the input sources found, fed to the lifecycle machine: each source (`inputs`) turns an
//! event of the OS into inputs or findings about one slot's worker; this applies them, in the
//! order the source gave them, each as a batch of its own (a worker's exit goes from the event
//! loop to the fleet executor, not through here). Nothing here decides: the machine and the
//! fleet core do.
use std::time::Instant;

use super::{
    event_loop::Supervisor,
    groups::held,
    inputs::{self, Found, adopt::Copied},
    lifecycle::{Input, Timer},
};
use crate::{os::notify::NotifyMsg, settings::run_config::ReadyMode};

impl Supervisor {
    /// Feeds what a source found about slot `index`'s worker.
    pub(super) fn found(&mut self, index: u32, found: Found) {
        let input = match found {
            Found::Input(input) => Some(input),
            Found::Ready(why) => inputs::notify::ready(
                &mut self.table,
                &self.inputs.healths,
                self.cfg.adopt,
                index,
                why,
            ),
            Found::Health {
                signal,
                bad,
                detail,
            } => inputs::health::set(
                &mut self.inputs.healths,
                &self.table,
                index,
                signal,
                bad,
                &detail,
            ),
        };
        if let Some(input) = input {
            self.apply(index, input);
        }
    }

    /// The worker of `index` is ready for `why` (a roll waiting for it may flip: see the
    /// executor).
    pub(super) fn mark_ready(&mut self, index: u32, why: String) {
        self.found(index, Found::Ready(why));
    }

    /// Notify messages from worker `id` of slot `index`, one at a time.
    pub(super) fn on_notify(&mut self, index: u32, id: u64, msgs: Vec<NotifyMsg>) {
        for msg in msgs {
            if self.table.worker_of_mut(index, id).is_none() {
                return;
            }
            if let Some(found) = inputs::notify::heard(
                &mut self.table,
                &mut self.inputs.healths,
                &self.cfg,
                index,
                id,
                msg,
            ) {
                self.found(index, found);
            }
        }
    }

    /// A lifecycle timer fired (`--ready-grace`'s is the readiness detection's).
    pub(super) fn on_timer(&mut self, index: u32, epoch: u64, timer: Timer) {
        if timer != Timer::ReadyGrace {
            self.apply(index, Input::Timer(timer, epoch));
        } else if let Some(found) =
            inputs::detect::grace_over(&self.cfg, &self.groups, &self.table, index, epoch)
        {
            self.found(index, found);
        }
    }

    /// A probe's answer.
    pub(super) fn on_probe_result(
        &mut self,
        index: u32,
        id: u64,
        result: Result<crate::os::probe::ProbeAnswer, String>,
    ) {
        for found in inputs::probes::answered(
            &self.cfg,
            &mut self.table,
            &mut self.inputs.healths,
            index,
            id,
            result,
        ) {
            self.found(index, found);
        }
    }

    /// A tick: when sampling is due, samples every slot's accept queue, detects stalls and
    /// missed heartbeats and replaces workers unhealthy for too long; checks silent starting
    /// workers for readiness; counts what leaving and lingering workers still hold; sets the
    /// next tick's period.
    pub(super) fn on_tick(&mut self) {
        let now = Instant::now();
        let fallback = self.groups.steers_by_samples();
        let watching = inputs::detect::watching(&self.cfg, &self.table);
        if self.inputs.pacer.sample_due(now, fallback) {
            self.sample(now, fallback);
        }
        // Reading /proc costs ~0.1 ms a starting worker, paid only while one starts.
        let interval = self.cfg.health.sample_interval;
        if self.inputs.pacer.ready_check_due(now, watching, interval) {
            let ready = inputs::detect::ready_now(&self.cfg, &self.groups, &mut self.table);
            for (index, found) in ready {
                self.found(index, found);
            }
        }
        let leaving = self.table.any_leaving();
        if leaving {
            let done = held::leavers_done(&mut self.table, &self.groups, now);
            if !done.is_empty() {
                self.apply_all(done);
            }
        }
        let lingering =
            !self.cfg.udp_linger.is_zero() && self.groups.any_udp() && self.table.any_stopping();
        if lingering {
            let linger = self.cfg.udp_linger;
            let quiet = held::lingerers_quiet(&mut self.table, &self.groups, linger, now);
            if !quiet.is_empty() {
                self.apply_all(quiet);
            }
        }
        let count_every = match (leaving, lingering) {
            (true, _) => Some(held::CHECK_EVERY),
            (false, true) => Some(held::LINGER_CHECK_EVERY),
            (false, false) => None,
        };
        self.inputs.pacer.pace(now, watching, count_every);
    }

    /// Samples every slot's accept queue and feeds what it found; writes the depths that
    /// changed and least-conn's sampled counts, records the UDP rates, replaces workers
    /// unhealthy for too long, and paces the next sample.
    fn sample(&mut self, now: Instant, fallback: bool) {
        let sampled = self
            .inputs
            .sample(&mut self.table, &self.groups, &self.cfg, now);
        for (index, found) in sampled.found {
            self.found(index, found);
        }
        self.groups
            .write_depths(&self.table, &sampled.depth_changed);
        let indices: Vec<u32> = self.table.slots.keys().copied().collect();
        self.groups.sample_connections(&indices);
        self.reports.udp_rates.record(&self.groups, &indices, now);
        self.replace_long_unhealthy(now);
        let fallback = fallback.then(|| {
            self.inputs
                .fallback_period(&self.table, &self.groups, &self.cfg, now)
        });
        let stall_timeout = self.cfg.health.stall_timeout;
        self.inputs
            .pacer
            .next_sample_after(now, fallback, sampled.quiet, stall_timeout);
    }

    /// `--adopt`: a process of the instance's cgroup started to listen.
    pub(super) fn on_listened(&mut self, event: ck_common::ListenEvent) {
        let listened = self.inputs.listened(&self.groups, &self.table, event);
        if let Some((position, inode, latency)) = listened {
            self.adopt_listener(position, inode, Some(latency));
        }
    }

    /// `--adopt`: adopts listeners of the instance's ports held by workers and not adopted yet
    /// (in case a listen event was lost).
    pub(super) fn scan_unadopted(&mut self) {
        for position in 0..self.groups.len() {
            for inode in inputs::adopt::unadopted(&self.groups, &self.table, position) {
                self.adopt_listener(position, inode, None);
            }
        }
    }

    /// Copies socket `inode` into its slot for group `position`; once every group has one, the
    /// slot's adoption is complete (or the socket is a member slot of its own).
    fn adopt_listener(&mut self, position: usize, inode: u64, latency_us: Option<u64>) {
        match inputs::adopt::copy(&self.groups, &mut self.table, position, inode, latency_us) {
            Copied::Nothing => {}
            Copied::Member {
                root,
                pid,
                socket,
                latency_us,
            } => self.adopt_member(root, pid, socket, latency_us),
            Copied::Complete {
                index,
                holder,
                said_ready,
            } => self.commit_adoption(index, holder, said_ready),
        }
    }

    /// Every group has the worker's socket: the lifecycle's `Adopted` installs them (into the
    /// maps, then as the slot's sockets: see the executor), then the worker's readiness.
    fn commit_adoption(&mut self, index: u32, holder: u32, said_ready: bool) {
        self.apply(index, Input::Adopted);
        if self.groups.len() == 1 {
            inputs::members::watch_holder(&mut self.table, &self.events, index, holder);
        }
        self.check_steering_soon();
        let why = match self.cfg.ready {
            ReadyMode::Notify | ReadyMode::Probe if !said_ready => return,
            ReadyMode::Notify => "READY=1, and listening (adopted)",
            ReadyMode::Probe => "the readiness probe passed, and listening (adopted)",
            ReadyMode::Auto | ReadyMode::Spawn => "listening on the instance's port (adopted)",
        };
        self.mark_ready(index, why.into());
    }

    /// Steers `socket`, held by `pid` in `root`'s process tree, as a member slot of `root`.
    fn adopt_member(
        &mut self,
        root: u32,
        pid: u32,
        socket: socket2::Socket,
        latency_us: Option<u64>,
    ) {
        let member = (root, pid, socket, latency_us);
        let Some((index, id)) = inputs::members::member_slot(
            &mut self.table,
            &self.groups,
            &self.cfg,
            &self.events,
            member,
        ) else {
            return;
        };
        self.apply(index, Input::Spawned { id });
        self.apply(index, Input::Adopted);
        self.mark_ready(index, format!("a listener of slot {root}'s process tree"));
    }

    /// `--adopt`: the process of a member slot exited.
    pub(super) fn on_member_exit(&mut self, index: u32, id: u64) {
        if let Some(input) = inputs::members::member_exited(&mut self.table, index, id) {
            self.apply(index, input);
        }
    }

    /// `--adopt`: the process holding a root slot's socket (not the worker) exited.
    pub(super) fn on_holder_exit(&mut self, index: u32, id: u64) {
        if let Some(input) = inputs::members::holder_exited(&mut self.table, index, id) {
            self.apply(index, input);
        }
    }

    /// Retires the members of every root in `roots` (their root is stopping).
    pub(super) fn retire_members(&mut self, roots: &[u32]) {
        let members = inputs::members::retirements(&self.table, roots);
        if !members.is_empty() {
            self.apply_all(members);
        }
    }
}
