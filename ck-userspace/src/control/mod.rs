//! The control channel: a unix socket (`/run/ck/<name>.sock`, mode 0600, peer uid checked)
//! carrying one JSON request and one JSON response per line. `ck status`, `ck drain`, ... are
//! its clients; the supervisor answers.
pub mod client;
pub mod compat;
pub mod instances;
pub mod server;

use serde::{Deserialize, Serialize};

/// A request to a running instance.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Report the fleet.
    Status,
    /// Take a slot out of the active set; its socket stays open.
    Drain {
        /// The slot.
        slot: u32,
    },
    /// Put a drained slot back.
    Undrain {
        /// The slot.
        slot: u32,
    },
    /// Drain and stop every worker, then exit (with `--metrics`, after the quiet wait).
    Stop,
    /// Like [`Request::Stop`], but without the quiet wait (or skipping the rest of it).
    StopNow,
    /// `ck drain --all`: take the whole host out of rotation (`/readyz` 503, every socket open,
    /// connections that still arrive served).
    DrainAll,
    /// `ck undrain --all`: put every drained slot back.
    UndrainAll,
    /// Rolling restart of every worker; answered when the roll ends.
    Reload {
        /// Start it as a canary (else as `--canary` says).
        #[serde(default)]
        canary: Option<crate::settings::choices::CanaryAsk>,
    },
    /// Put the release the last reload replaced (kept by `--keep-previous`) back, retiring
    /// the current one, in one publish.
    Rollback,
    /// Change the number of workers.
    Scale {
        /// The new worker count.
        workers: u32,
    },
    /// Re-execute ck in place (same pid, workers kept) from `binary`, or from the binary it
    /// was started from; answered once the new binary is checked.
    Upgrade {
        /// The new binary (an absolute path).
        #[serde(default)]
        binary: Option<std::path::PathBuf>,
    },
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Response {
    /// Done, with a short message.
    Ok(String),
    /// The fleet's state.
    Status(Box<StatusReport>),
    /// Refused, with the reason and what to do.
    Error(String),
}

/// What `ck status` shows.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusReport {
    /// Instance name.
    pub name: String,
    /// Supervisor pid.
    pub pid: u32,
    /// Whether BPF steering is on: the last canary of every group was steered by the program
    /// (read from the kernel, see `steering`).
    pub bpf: bool,
    /// Started with `--no-bpf`: no program, no maps.
    #[serde(default)]
    pub no_bpf: bool,
    /// Each group's steering as the kernel last showed it.
    pub steering: Vec<GroupSteering>,
    /// Selection policy.
    pub policy: crate::settings::run_config::Policy,
    /// Listen groups (`tcp4-8080`, ...).
    pub groups: Vec<String>,
    /// Their addresses (`0.0.0.0:8080`, ...), in the same order.
    pub listen: Vec<String>,
    /// The periodic probe (`tcp`, `http:/healthz`), if any.
    pub probe: Option<String>,
    /// Slot S is probed from source port `probe_port_base + S`.
    pub probe_port_base: u16,
    /// Pin directory of the maps, when BPF is on.
    pub pins: Option<String>,
    /// Supervisor uptime.
    pub uptime_ms: u64,
    /// Ready slots in the active set, in order (read from the `active` map when BPF is on).
    pub active: Vec<u32>,
    /// Starting slots chosen for new connections beside the active ones while the fleet boots
    /// (for 2 s at most after the first turned ready), in order.
    #[serde(default)]
    pub booting: Vec<u32>,
    /// Slots chosen only while the active set is empty (live workers not ready, else held
    /// sockets), in order.
    pub fallback: Vec<u32>,
    /// Why the fleet is degraded (breakers open or held half-open), empty when it is not.
    pub degraded: Vec<String>,
    /// Listeners on the groups' ports that are not ck's (they joined the `SO_REUSEPORT` group;
    /// ck never steers to them).
    pub foreign: Vec<ForeignListener>,
    /// `--min-workers`.
    pub min_workers: u32,
    /// The instance's cgroup directory (workers each have one under it), if any.
    pub cgroup: Option<String>,
    /// `--worker-memory-max` and whether it is applied.
    pub memory_limit: Option<String>,
    /// `--adopt`: workers bind the port themselves and ck adopts their sockets.
    pub adopt: bool,
    /// Connections the program dropped because no slot could take them.
    pub dropped: u64,
    /// Whether the supervisor is stopping.
    pub stopping: bool,
    /// Whether a rolling restart is in progress.
    pub reloading: bool,
    /// Whether the kernel re-homes a closing listener's queue (Linux >= 5.14 with BPF on).
    pub migration: bool,
    /// With `least-queue`: what it steers by, read back from the loaded program's `config`:
    /// `exact (BPF)`, or `sampled (why)` (no BTF, the kernel refused the read,
    /// `CK_QUEUE_DEPTH=sampled`).
    #[serde(default)]
    pub queue_depth: Option<String>,
    /// With `least-queue`: its `--queue-patience` in microseconds, read back from the first
    /// group's `config` map (None with another policy, or before the program is loaded).
    #[serde(default)]
    pub queue_patience_us: Option<u64>,
    /// With `least-conn`: what it compares, read back from the loaded program's `config`:
    /// `kernel (BPF)` (the program sums the kernel's counts), `sampled (why)` (the supervisor
    /// writes them: Linux < 5.19, `CK_LEAST_CONN=sampled`) or `round-robin (why)` (the kernel
    /// does not count connections).
    #[serde(default)]
    pub conn_steering: Option<String>,
    /// The pids whose exit the kernel's `sched_process_exit` reports to ck as it begins, read
    /// from the exit watch's map (None: no exit watch, exits are seen from the pidfds alone).
    #[serde(default)]
    pub exits_watched: Option<Vec<u32>>,
    /// ck's own nice value: the fleet's CPU priority (the rest of the fleet steps back from it
    /// while a replacement boots: see `--boot-boost`).
    #[serde(default)]
    pub nice: i32,
    /// Target worker count.
    pub workers: u32,
    /// `--stop-signal` (`SIGTERM`, `SIGQUIT`, ...): what stops a worker gracefully.
    #[serde(default)]
    pub stop_signal: String,
    /// `--drain-timeout` in milliseconds: when SIGKILL follows the stop signal.
    #[serde(default)]
    pub drain_timeout_ms: u64,
    /// `--keep-previous` in milliseconds: how long a reload's old workers are kept (state
    /// `kept`) for `ck rollback` (None: off).
    #[serde(default)]
    pub keep_previous_ms: Option<u64>,
    /// The canary of the reload in progress (`judged: 1 worker(s), 25 % of new connections by
    /// client (25.0 % in the maps, the current release 75.0 %), for 60 s`: the share asked,
    /// then the shares the program's maps give each release; `starting: ...` while its workers
    /// boot), if there is one.
    #[serde(default)]
    pub canary: Option<String>,
    /// Where `--metrics` serves `/metrics`, `/healthz` and `/readyz` (`127.0.0.1:9100`), if
    /// it does.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Every slot in use.
    pub slots: Vec<SlotReport>,
    /// The running binary's version.
    #[serde(default)]
    pub version: String,
    /// Upgrades in place (`ck upgrade`, SIGUSR2) since the instance started.
    #[serde(default)]
    pub upgrades: u32,
    /// How the last upgrade went (`ok: ...`, `refused: ...`, `failed: ...`), if there was one.
    #[serde(default)]
    pub last_upgrade: Option<String>,
    /// How the slots' open `connections` are counted: `kernel` (the `ck_conns` program, exact)
    /// or `scan (WHY)` (sock_diag matched to the workers' sockets: the fallback).
    #[serde(default)]
    pub connection_count: String,
    /// Where the kernel counts them (`kernel`), read from the pins of the counter (its links,
    /// or the program attached to the workers' cgroups): `cgroup` (a `sock_ops` program on each
    /// slot's cgroup, or on each worker's with `--adopt`: the fleet's sockets only) or `host` (a
    /// tracepoint every TCP state change of the host runs).
    #[serde(default)]
    pub connection_hook: Option<String>,
    /// The quiet wait of a stop (`--quiet-period`): while it lasts, or how it ended.
    #[serde(default)]
    pub quiet_wait: Option<QuietWaitReport>,
    /// The whole host is out of rotation (`ck drain --all`): no group's `active` map lists a
    /// ready slot and every worker's slot is drained.
    #[serde(default)]
    pub host_drained: bool,
    /// Each UDP group's datagrams by route and remembered flows, read from its maps.
    #[serde(default)]
    pub udp: Vec<UdpGroupReport>,
}

/// One UDP group in [`StatusReport`]: what its program did with the datagrams it saw.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpGroupReport {
    /// The group (`udp4-443`).
    pub group: String,
    /// `--udp-mode`: `flow`, `quic` or `stateless`.
    pub mode: String,
    /// Datagrams by route (`probe`, `flow`, `new`, `stale`, `stateless`, `malformed`), every
    /// slot and the dropped ones summed: every datagram the program saw counts under one.
    pub routes: std::collections::BTreeMap<String, u64>,
    /// Datagrams no slot could take (dropped).
    pub dropped: u64,
    /// Flows in the flow table (`flow` mode; its least recently seen make room when full).
    pub flows: u64,
    /// QUIC handshakes remembered by their original connection ID (`quic` mode).
    #[serde(default)]
    pub pending: u64,
    /// Datagrams per second the slots in use were sent lately (the sum of theirs; None: no
    /// earlier reading yet).
    #[serde(default)]
    pub datagrams_per_s: Option<f64>,
    /// Per slot in use: datagrams it was sent and flows it holds.
    pub slots: Vec<UdpSlotReport>,
}

/// One slot of a [`UdpGroupReport`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UdpSlotReport {
    /// Slot index.
    pub slot: u32,
    /// Datagrams the program sent it, every route summed.
    pub datagrams: u64,
    /// Datagrams per second it was sent lately: since a reading of the counters one to two
    /// seconds old, taken at the sampler's ticks (None: no earlier reading yet).
    #[serde(default)]
    pub datagrams_per_s: Option<f64>,
    /// Of those, by route.
    pub routes: std::collections::BTreeMap<String, u64>,
    /// Flows the flow table gives it.
    pub flows: u64,
}

/// The quiet wait of a stop in [`StatusReport`]: ck reports not ready and waits until the
/// program has selected no new connection for the quiet period, or the maximum.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct QuietWaitReport {
    /// The wait is under way (false: it ended, see `ended`).
    pub waiting: bool,
    /// Time since the last new connection (or since the wait began, if none came since).
    pub quiet_ms: u64,
    /// `--quiet-period`.
    pub quiet_period_ms: u64,
    /// Time since the wait began.
    pub waited_ms: u64,
    /// `--quiet-max`.
    pub quiet_max_ms: u64,
    /// New connections the program selected since the wait began (all groups and slots).
    pub new_connections: u64,
    /// How the wait ended (`quiet for 3s`, `reached --quiet-max ...`, `SIGTERM again`, ...).
    pub ended: Option<String>,
}

/// One group's steering in [`StatusReport`].
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupSteering {
    /// The group.
    pub group: String,
    /// Whether the last canary was steered by the program (None: not checked yet).
    pub attached: Option<bool>,
    /// How long ago that canary came back.
    pub checked_ms_ago: Option<u64>,
}

/// A listener on a group's port that is not one of ck's sockets.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ForeignListener {
    /// The group whose port it listens on.
    pub group: String,
    /// Its address.
    pub addr: String,
    /// Its socket inode.
    pub inode: u64,
    /// Its owner's uid.
    pub uid: u32,
    /// A process holding it, if found.
    pub pid: Option<u32>,
    /// That process's command name.
    pub command: Option<String>,
}

/// One slot in [`StatusReport`].
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlotReport {
    /// Slot index.
    pub slot: u32,
    /// Worker pid, when one runs.
    pub pid: Option<u32>,
    /// `starting`, `standby`, `ready`, `draining`, `unhealthy`, `stopping`, `restarting`,
    /// `held`, `broken`, `stopped` (from the `slots` map when BPF is on).
    pub state: String,
    /// Whether `ck drain` holds the slot out.
    pub drained: bool,
    /// Worker uptime.
    pub uptime_ms: u64,
    /// Times the slot's worker was restarted.
    pub restarts: u32,
    /// Worker generation on this slot.
    pub generation: u32,
    /// Clients' connections the program sent to this slot (all groups; ck's own probes count
    /// in [`SlotReport::probe_hits`] instead).
    pub selected: u64,
    /// Of those, sent while no slot was ready.
    pub fallbacks: u64,
    /// Requests re-homed to this slot from a closing listener.
    pub migrated: u64,
    /// How the last worker ended (`exit 1`, `signal SIGKILL`).
    pub last_exit: Option<String>,
    /// The worker's last `STATUS=` text.
    pub status: Option<String>,
    /// Circuit breaker: `closed` (restarts allowed), `open` (cooling down) or `half-open`
    /// (crash-looping, kept trying by `--min-workers`).
    pub breaker: String,
    /// Why the worker is unhealthy (`watchdog`, `probe`, `stalled`, joined by `+`), if it is.
    pub unhealthy: Option<String>,
    /// Accept-queue depth last sampled.
    pub queue_depth: u32,
    /// Clients' open connections its listeners created (counted by the kernel, else by the
    /// scan: see [`StatusReport::connection_count`]; ck's own probes never count).
    #[serde(default)]
    pub connections: Option<u64>,
    /// ck's own probe connections (readiness, health, `ck probe`) the program steered to this
    /// slot: counted apart from clients, never in `selected` or `connections`.
    pub probe_hits: u64,
    /// Memory of the worker's tree (its cgroup's `memory.current`, else resident memory summed
    /// over its processes).
    pub memory_bytes: Option<u64>,
    /// CPU time of the worker's tree (its cgroup's `cpu.stat`).
    pub cpu_ms: Option<u64>,
    /// `--adopt`: time from the worker's `listen()` to ck adopting that socket.
    pub adopt_latency_us: Option<u64>,
    /// `--adopt`: a further listener of this slot's worker's process tree (a forking server).
    pub member_of: Option<u32>,
    /// A hot spare (`--spares`), not selected until it takes a dead worker's place.
    pub spare: bool,
    /// A worker of a canary under judgement (`ck reload --canary`): selected for the canary's
    /// share of new connections, beside the current release.
    #[serde(default)]
    pub canary: bool,
    /// Notify messages ignored because their sender was not the worker or of its tree.
    #[serde(default)]
    pub notify_refused: u64,
    /// Lines of its workers' output dropped because ck's own output could not keep up.
    #[serde(default)]
    pub output_dropped: u64,
    /// The worker's nice value, as the kernel has it (`getpriority`).
    #[serde(default)]
    pub nice: Option<i32>,
}

impl QuietWaitReport {
    /// `waiting for traffic to stop, 1.2 s quiet of 3 s, 4.0 s of 15 s max`, or how the wait ended.
    pub fn words(&self) -> String {
        let r = self;
        let s = |ms: u64| ms as f64 / 1000.0;
        match &r.ended {
            None => format!(
                "waiting for traffic to stop, {:.1} s quiet of {} s, {:.1} s of {} s max ({} new \
                 connections during the wait)",
                s(r.quiet_ms),
                s(r.quiet_period_ms),
                s(r.waited_ms),
                s(r.quiet_max_ms),
                r.new_connections
            ),
            Some(why) => format!(
                "quiet wait ended after {:.1} s ({why}), {} new connections during it; draining",
                s(r.waited_ms),
                r.new_connections
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let r = Request::Drain { slot: 3 };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"cmd":"drain","slot":3}"#);
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
        assert_eq!(
            serde_json::from_str::<Request>(r#"{"cmd":"status"}"#).unwrap(),
            Request::Status
        );
    }
}
