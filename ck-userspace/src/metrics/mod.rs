//! `--metrics ADDR`: Prometheus metrics (`GET /metrics`) and health endpoints for probes and
//! load balancers (`GET /healthz`, `GET /readyz`) on one small HTTP listener.
//!
//! The event loop answers every request ([`Call`]): a scrape is a [`Scrape`] of what the
//! kernel and the BPF maps hold at that moment (counters, active set, slot records, queue
//! depths) plus what the supervisor counts itself (restarts, reloads, probe failures). The
//! slower reads (sock_diag and `/proc` for open connections where the kernel does not count
//! them, ck's own process) then run off the loop, and [`families`] encodes it all with
//! `prometheus-client`.
pub mod connections;
pub mod families;
pub mod process;
mod releases;
pub mod server;

use std::collections::BTreeMap;

use ck_common::SlotStats;
use tokio::sync::oneshot;

/// A question for the event loop from the metrics listener.
#[derive(Debug)]
pub enum Call {
    /// `/metrics`: everything the loop reads for a scrape.
    Scrape(oneshot::Sender<Scrape>),
    /// `/healthz`: answered by the loop itself, so an answer proves it turns.
    Alive(oneshot::Sender<()>),
    /// `/readyz`: `Ok(why)` while every group has a worker in its active set, else
    /// `Err(reason)`.
    Ready(oneshot::Sender<Result<String, String>>),
}

/// What the event loop reads for one scrape.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    /// Every listen group.
    pub groups: Vec<GroupScrape>,
    /// Every slot in use.
    pub slots: Vec<SlotScrape>,
    /// Rolling restarts (`ck reload`, SIGHUP) that ended, by result.
    pub reloads: ReloadCounts,
    /// Canaries judged to the end, by verdict, and the share of the one judged now.
    pub canaries: CanaryCounts,
    /// Upgrades in place (`ck upgrade`, SIGUSR2) since the instance started.
    pub upgrades: u64,
    /// The groups' ports (connections accepted on them count in `ck_worker_connections`).
    pub ports: Vec<u16>,
    /// The first port of the probe range: ck's own probes from it count apart
    /// (`ck_connections_probe`), never in `ck_worker_connections`.
    pub probe_base: u16,
    /// Open connections per slot counted by the kernel (None: it does not count them here, and
    /// the sock_diag scan of [`connections`] does).
    pub connections: Option<BTreeMap<u32, u64>>,
    /// Each UDP group's datagrams by slot and route and its flow table (as `ck status` shows).
    pub udp: Vec<crate::control::UdpGroupReport>,
}

/// One group in a [`Scrape`].
#[derive(Clone, Debug, Default)]
pub struct GroupScrape {
    /// Its name (`tcp4-8080`).
    pub name: String,
    /// Its listen address (`0.0.0.0:8080`).
    pub listen: String,
    /// Seconds since the program last selected a new connection for it (since ck first read
    /// its counters, if none came since), from the counters' last change; None: no counters.
    pub since_last_connection: Option<f64>,
    /// Connections its program dropped for want of a slot (None: no program loaded).
    pub dropped: Option<u64>,
    /// Its slots' counters and queues.
    pub slots: Vec<GroupSlot>,
}

/// One slot of one group in a [`Scrape`].
#[derive(Clone, Debug, Default)]
pub struct GroupSlot {
    /// Slot index.
    pub slot: u32,
    /// The program's counters for the slot in this group, summed over CPUs (None: no program).
    pub stats: Option<SlotStats>,
    /// Connections waiting in the slot's accept queue in this group (None: socket closed).
    pub queue_depth: Option<u32>,
    /// Resets its connections sent in this group, their own side aborting them (None: not
    /// counted here).
    pub resets: Option<u64>,
    /// Connections its listening socket in this group dropped (`SO_MEMINFO`; None: no TCP
    /// socket).
    pub listen_drops: Option<u64>,
}

/// One slot in a [`Scrape`].
#[derive(Clone, Debug, Default)]
pub struct SlotScrape {
    /// Slot index.
    pub slot: u32,
    /// Its state word, as `ck status` shows it.
    pub state: String,
    /// In the active set (selected for new connections).
    pub ready: bool,
    /// Its circuit breaker is open or held half-open.
    pub breaker_open: bool,
    /// Times its worker was restarted.
    pub restarts: u32,
    /// Probes of its workers that failed (not counting those of a starting worker).
    pub probe_failures: u64,
    /// Lines of its workers' output dropped because ck's own output could not keep up.
    pub output_dropped: u64,
    /// Memory of its worker's tree, when it has a cgroup.
    pub memory_bytes: Option<u64>,
    /// CPU time of its worker's tree in microseconds, when it has a cgroup.
    pub cpu_usec: Option<u64>,
    /// The processes of its worker's tree (empty: no worker).
    pub pids: Vec<u32>,
}

/// Canary rolls (`ck reload --canary`) by verdict, and the one judged now.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CanaryCounts {
    /// Promoted at the end of their window.
    pub promoted: u64,
    /// Withdrawn (a worker failed, or a limit was crossed).
    pub withdrawn: u64,
    /// The share of new connections of the canary judged now (0 to 1; None: none judged).
    pub share: Option<f64>,
}

/// Rolling restarts that ended, by result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReloadCounts {
    /// Every worker replaced.
    pub ok: u64,
    /// Aborted: a replacement failed, or ck began to stop.
    pub aborted: u64,
}
