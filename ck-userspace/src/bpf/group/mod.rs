//! One group's loaded program and maps: attach to the group, insert and remove slot sockets,
//! publish the active set (fill the idle half, then flip; with `--policy sticky` the Maglev
//! table beside it), write slot records, read counters.
use std::os::fd::AsRawFd;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, MapData, ReusePortSockArray},
    programs::SkReuseport,
};
use ck_common::{ActiveSet, Config, SlotInfo, SlotStats, config_flags, policy};
use socket2::Socket;

use super::{
    bind_tags::BindTagger,
    conn_steering::ConnSteering,
    conns::ConnCounter,
    error::{BpfError, load_err, write_err},
    queue_depth::QueueDepth,
    stats,
    sticky::Sticky,
};

/// The program and maps of one group.
pub struct BpfGroup {
    ebpf: Ebpf,
    sockets: ReusePortSockArray<MapData>,
    slots: Array<MapData, SlotInfo>,
    active: Array<MapData, ActiveSet>,
    config_map: Array<MapData, Config>,
    /// `stats` and `selected`.
    counters: stats::Counters,
    /// slot -> generation of its `sockets` entry, bumped after each write of it: the program
    /// keeps each socket's kernel address while the generation stays (its `sock_addr.rs`).
    sock_gens: Array<MapData, u32>,
    /// The last generation written to `sock_gens` (each write takes the next one).
    sock_gen: u32,
    config: Config,
    sticky: Sticky,
    /// Why `least-queue` steers by sampled depths, when it does.
    sampled_why: String,
    /// Open connections counted by the kernel, or why the kernel does not count them here.
    conns: Result<ConnCounter, String>,
    /// slot -> open connections as last sampled: what least-conn compares when the program
    /// cannot sum the kernel's counts.
    conn_samples: Array<MapData, u32>,
    /// What this group last wrote to `conn_samples`, per slot.
    conn_sampled: std::collections::BTreeMap<u32, u32>,
    /// What least-conn steers by (None: another policy).
    conn_steering: Option<ConnSteering>,
    /// `--adopt`: the tagger of workers' own sockets, once attached.
    bind_tagger: Option<BindTagger>,
    /// A UDP group's own maps (None: a TCP group).
    udp: Option<super::udp::UdpMaps>,
    /// The flip that took each slot out of the ready list.
    flips: super::flips::Flips,
    /// A canary by client is judged: the program steers by the consistent table, weighted.
    by_client: bool,
    /// The canary's kernel counters: resets sent, the queue watch.
    watch: super::canary_watch::CanaryWatch,
}

impl BpfGroup {
    /// Whether the supervisor must sample for this group's policy: least-queue loaded without
    /// the exact depth reads, or least-conn without the sum of the kernel's counts. From what
    /// this group wrote to `config` at load (set once), so that the sampler's pace needs no map
    /// read at every tick; `ck status` reads the map ([`BpfGroup::queue_depth`],
    /// [`BpfGroup::conn_steering`]).
    pub fn steers_by_samples(&self) -> bool {
        match self.config.policy {
            policy::LEAST_QUEUE => self.config.flags & config_flags::EXACT_QUEUE == 0,
            policy::LEAST_CONN => matches!(self.conn_steering, Some(ConnSteering::Sampled(_))),
            _ => false,
        }
    }

    /// `least-queue`'s patience as the kernel's `config` map holds it (None: unreadable).
    pub fn queue_patience(&self) -> Option<std::time::Duration> {
        let config = self.config_map.get(&0, 0).ok()?;
        Some(std::time::Duration::from_micros(
            config.queue_patience_us.into(),
        ))
    }

    /// What `least-queue` steers by, read back from the kernel's `config` map: exact only when
    /// the loaded program was set up to read the depths.
    pub fn queue_depth(&self) -> QueueDepth {
        match self.config_map.get(&0, 0) {
            Ok(config) if config.flags & config_flags::EXACT_QUEUE != 0 => QueueDepth::Exact,
            Ok(_) => QueueDepth::Sampled(self.sampled_why.clone()),
            Err(e) => QueueDepth::Sampled(format!("the config map could not be read: {e}")),
        }
    }

    /// What `least-conn` steers by (None under another policy): the kernel's counts, summed by
    /// the program, only when `config` says so.
    pub fn conn_steering(&self) -> Option<ConnSteering> {
        let steering = self.conn_steering.clone()?;
        Some(match (&steering, self.config_map.get(&0, 0)) {
            (ConnSteering::Kernel, Ok(c)) if c.flags & config_flags::KERNEL_CONNS == 0 => {
                ConnSteering::Sampled("the config map says so".into())
            }
            (_, Err(e)) => ConnSteering::Sampled(format!("the config map could not be read: {e}")),
            _ => steering,
        })
    }

    /// The canary's kernel counters in this group.
    pub fn canary_watch(&self) -> &super::canary_watch::CanaryWatch {
        &self.watch
    }

    /// Watches the queues of exactly `slots` (at most `MAX_WATCHED`), a canary's (none: no
    /// watch): each new connection to the group records how long their oldest queued
    /// connections have waited. Nothing where the program cannot read kernel memory.
    pub fn watch_queues(&mut self, slots: &[u32]) -> Result<(), BpfError> {
        if self.watch.queue_watch_refused().is_some() {
            return Ok(());
        }
        self.watch.mark(slots)?;
        let flags = match slots.is_empty() {
            true => self.config.flags & !config_flags::WATCH_QUEUES,
            false => self.config.flags | config_flags::WATCH_QUEUES,
        };
        if flags != self.config.flags {
            self.config.flags = flags;
            self.write_config()?;
        }
        Ok(())
    }

    /// Starts forwarding the program's aya-log records to the `log` crate (and so to tracing).
    pub fn forward_logs(&mut self) -> anyhow::Result<()> {
        let logger = aya_log::EbpfLogger::init(&mut self.ebpf).context("starting aya-log")?;
        super::ring::read_when_ready(logger, |logger| {
            logger.flush();
            true
        })
    }

    /// Attaches the program to the group `socket` belongs to (`SO_ATTACH_REUSEPORT_EBPF`): from
    /// then on it chooses for every member, until the group dies (its last socket closes).
    /// Call it after the maps hold the group's sockets and active set, so that the program's
    /// first run finds them. Attaching again replaces the program with itself.
    pub fn attach(&mut self, socket: &Socket) -> Result<(), BpfError> {
        let name = super::load::program_name(self.udp.is_some());
        let program: &SkReuseport = self
            .ebpf
            .program(name)
            .with_context(|| format!("program {name} missing"))
            .and_then(|p| p.try_into().context("not an sk_reuseport program"))
            .map_err(load_err("attaching the program"))?;
        program
            .attach(socket)
            .context("SO_ATTACH_REUSEPORT_EBPF")
            .map_err(load_err("attaching the program"))
    }

    /// Puts `socket` in the group's `sockets` map at `slot` (and tags it for counting).
    pub fn insert(&mut self, slot: u32, socket: &Socket) -> Result<(), BpfError> {
        self.place(slot, socket)?;
        self.tag(slot, socket);
        Ok(())
    }

    /// Puts a listening `socket`, tagged (see [`BpfGroup::tag`]) before it listened, in
    /// `slot`'s place in the `sockets` map.
    pub fn place(&mut self, slot: u32, socket: &Socket) -> Result<(), BpfError> {
        self.sockets
            .set(slot, &socket.as_raw_fd(), 0)
            .map_err(write_err("sockets"))?;
        self.bump_generation(slot)
    }

    /// Gives `slot`'s `sockets` entry, just written, a new generation: the program finds the
    /// entry's socket again instead of reading the one it knew. A failed write would leave it
    /// reading the earlier socket's queue, so it is an error.
    fn bump_generation(&mut self, slot: u32) -> Result<(), BpfError> {
        self.sock_gen = self.sock_gen.wrapping_add(1);
        self.sock_gens
            .set(slot, self.sock_gen, 0)
            .map_err(write_err("sock_gens"))
    }

    /// Puts `socket` in the `sockets` map at `slot` unless it is in the map already (the
    /// kernel answers EBUSY then): after an upgrade or a take-over, the pinned map holds the
    /// sockets the earlier ck put there. A socket already there keeps its generation: the
    /// flows and QUIC handshakes a UDP group remembered under it stay its.
    pub fn insert_if_absent(&mut self, slot: u32, socket: &Socket) -> Result<(), BpfError> {
        let placed = match self.sockets.set(slot, &socket.as_raw_fd(), 0) {
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::EBUSY) =>
            {
                false
            }
            other => other.map(|()| true).map_err(write_err("sockets"))?,
        };
        // The pinned storage keeps the tag; writing it again also refills `listeners`' cookies.
        self.tag(slot, socket);
        match placed {
            true => self.bump_generation(slot),
            false => Ok(()),
        }
    }

    /// Removes `slot` from the `sockets` map (closing the socket does this too).
    pub fn remove(&mut self, slot: u32) {
        // A socket that already closed has left the map by itself; nothing to report then.
        let _ = self.sockets.clear_index(&slot);
        if let Err(e) = self.bump_generation(slot) {
            tracing::warn!(
                slot,
                "least-queue may read the removed socket's queue for this slot: {e}"
            );
        }
    }

    /// Publishes a new active set: writes the idle half (with `--policy sticky`, the idle half
    /// of `sticky` too: the Maglev table of the set's ready slots), then flips
    /// `config.live_half` (the flip counter: one more, so its low bit names the idle half), so
    /// the program never reads a half-written set or table. `listed` is the set as the program
    /// reads it: `set` with its ready slots listed by weight (`--slow-start`), or `set` itself.
    ///
    /// `by_client`: a canary by client is judged: the table is built from `listed` (its weights)
    /// and the program steers by it, whatever the policy, until a publish without it.
    pub fn publish(
        &mut self,
        set: &ActiveSet,
        listed: &ActiveSet,
        by_client: bool,
    ) -> Result<(), BpfError> {
        let flip = super::flips::Flips::next(self.config.live_half);
        let idle = flip & 1;
        self.by_client = by_client;
        // A UDP group's new flows take the Maglev table, whatever the policy: built from the
        // weighted list, so a canary (by connection too) and a ramping slot get their share of
        // new flows (a held flow or a QUIC cookie keeps its worker whatever the table says).
        if by_client || self.udp.is_some() {
            self.sticky.write(idle, listed, true)?;
        } else if self.config.policy == policy::STICKY {
            self.sticky.write(idle, set, false)?;
        }
        self.active
            .set(idle, listed, 0)
            .map_err(write_err("active"))?;
        // least-conn and least-queue compare loads per unit of weight while a slot has one.
        let weighted = listed.ready_len != set.ready_len;
        self.config.flags = match weighted {
            true => self.config.flags | config_flags::WEIGHTED,
            false => self.config.flags & !config_flags::WEIGHTED,
        };
        self.config.live_half = flip;
        self.write_config()?;
        self.flips.published(flip, set);
        Ok(())
    }

    /// `quic` mode: when the last datagram came (`CLOCK_MONOTONIC` ns) of the QUIC handshakes
    /// `slot`'s worker was given before the flip that took it out of the ready list (all of
    /// those given to its socket when this ck has not seen that flip); None when it was given
    /// none, or in another mode.
    pub fn handshakes_before_flip(&self, slot: u32) -> Option<u64> {
        let udp = self.udp.as_ref()?;
        let generation = self.sock_gens.get(&slot, 0).ok()?;
        udp.last_handshake(slot, generation, self.flips.out_at(slot))
    }

    /// Sets `least-queue`'s patience ([`Config::queue_patience_us`], whole microseconds, at most
    /// `u32::MAX`) in the `config` map.
    pub fn set_queue_patience(&mut self, patience: std::time::Duration) -> Result<(), BpfError> {
        self.config.queue_patience_us = u32::try_from(patience.as_micros()).unwrap_or(u32::MAX);
        self.write_config()
    }

    fn write_config(&mut self) -> Result<(), BpfError> {
        let config = match self.by_client {
            true => Config {
                policy: policy::STICKY,
                ..self.config
            },
            false => self.config,
        };
        self.config_map
            .set(0, config, 0)
            .map_err(write_err("config"))
    }

    /// Writes one slot's record in the `slots` map.
    pub fn write_slot(&mut self, slot: u32, info: &SlotInfo) -> Result<(), BpfError> {
        self.slots.set(slot, info, 0).map_err(write_err("slots"))
    }

    /// The slot record the kernel holds for `slot`.
    pub fn read_slot(&self, slot: u32) -> Option<SlotInfo> {
        self.slots.get(&slot, 0).ok()
    }

    /// The live half of the active set as the kernel holds it, each chosen slot told ready or
    /// booting by its record in the `slots` map.
    pub fn read_active(&self) -> Option<super::active::ActiveLists> {
        let config = self.config_map.get(&0, 0).ok()?;
        let set = self.active.get(&(config.live_half & 1), 0).ok()?;
        let state = |slot| self.read_slot(slot).map(|info| info.state);
        Some(super::active::ActiveLists::of(&set, state))
    }

    /// Zeroes a slot's counters (a slot index used again starts from zero).
    pub fn reset_stats(&mut self, slot: u32) {
        self.counters.reset(slot);
        if let Some(udp) = &mut self.udp {
            udp.reset(slot);
        }
    }

    /// A slot's counters summed over CPUs.
    pub fn stats(&self, slot: u32) -> SlotStats {
        self.counters.sum(slot)
    }

    /// Probes the program dropped because `slot` has no socket: the steering canary's count (it
    /// asks for slot 127, which never has one). A UDP group counts them at `STATS_NO_SLOT` under
    /// the `probe` route.
    pub fn canary_count(&self, slot: u32) -> u64 {
        match &self.udp {
            Some(udp) => udp.stats(ck_common::STATS_NO_SLOT).routes[ck_common::udp::route::PROBE],
            None => self.stats(slot).errors,
        }
    }

    /// A UDP group's own maps (None: a TCP group).
    pub fn udp(&self) -> Option<&super::udp::UdpMaps> {
        self.udp.as_ref()
    }
}

mod counting;
mod open;
mod share;

pub use open::GroupSpec;

#[cfg(test)]
mod conns_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod watch_tests;
#[cfg(test)]
mod weights_tests;
