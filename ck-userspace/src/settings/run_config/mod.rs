//! What `ck run` was asked to do: listen addresses, worker count, timeouts, policy, and the
//! validation that turns bad input into errors that say what to fix.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use ck_common::MAX_SLOTS;

/// Largest `--workers` value: half the slots, so a rolling restart always finds free slots.
pub const MAX_WORKERS: u32 = MAX_SLOTS / 2;

mod listen;
use listen::PORT_ZERO;
pub use listen::{ListenAddr, Proto, listen_addrs, parse_port};

/// An error in the command line or in the environment `ck run` was started in.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A listen address that does not parse.
    #[error(
        "invalid listen address {0:?}: expected tcp://HOST:PORT or udp://HOST:PORT, e.g. tcp://0.0.0.0:8080, tcp://[::]:8080 or udp://[::]:443"
    )]
    BadListen(String),
    /// A listen address with port 0.
    #[error("listen address {0:?} has port 0: {PORT_ZERO}")]
    ListenPortZero(String),
    /// `--workers` out of range.
    #[error("--workers {0} is out of range: give a number from 1 to {MAX_WORKERS}")]
    BadWorkers(u32),
    /// `--name` not usable in paths and bpffs.
    #[error(
        "invalid --name {0:?}: use 1 to 48 characters from a-z, A-Z, 0-9, '-' and '_' (no dots: bpffs refuses them)"
    )]
    BadName(String),
    /// Two listen options name the same address.
    #[error("{0} is given twice; list each address once")]
    DuplicateListen(ListenAddr),
    /// The application cannot be run.
    #[error("cannot run {app:?}: {reason}")]
    BadApp {
        /// The APP argument as given.
        app: String,
        /// Why it cannot run and what to do.
        reason: String,
    },
}

/// How the program picks among ready workers.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Flow hash of the 4-tuple.
    Hash,
    /// Even spread of new connections.
    RoundRobin,
    /// Power of two choices by accept-queue depth.
    LeastQueue,
    /// Session affinity: a client (its source address) keeps its worker while that worker is
    /// ready; a worker that leaves or joins moves about 1/N of the clients (Maglev table).
    Sticky,
    /// Least open + queued connections (counted in the kernel) among up to 4 spread candidates:
    /// for long-lived connections (websockets, SSE, gRPC streams, keep-alive pools).
    LeastConn,
}

impl Policy {
    /// The value stored in the BPF `config` map.
    pub fn code(self) -> u32 {
        match self {
            Policy::Hash => ck_common::policy::HASH,
            Policy::RoundRobin => ck_common::policy::ROUND_ROBIN,
            Policy::LeastQueue => ck_common::policy::LEAST_QUEUE,
            Policy::Sticky => ck_common::policy::STICKY,
            Policy::LeastConn => ck_common::policy::LEAST_CONN,
        }
    }

    /// The policy a `config` map code stands for.
    pub fn from_code(code: u32) -> Option<Policy> {
        [
            Policy::Hash,
            Policy::RoundRobin,
            Policy::LeastQueue,
            Policy::Sticky,
            Policy::LeastConn,
        ]
        .into_iter()
        .find(|p| p.code() == code)
    }

    /// Whether the program reads queue depths under this policy (`least-queue` only; least-conn
    /// steers by the kernel's connection counts, which hold the queued connections): exact
    /// ones where the kernel allows it, else the supervisor's samples.
    pub fn reads_queue(self) -> bool {
        matches!(self, Policy::LeastQueue)
    }

    /// Its word, as `--policy` takes it (`round-robin`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::Hash => "hash",
            Policy::RoundRobin => "round-robin",
            Policy::LeastQueue => "least-queue",
            Policy::Sticky => "sticky",
            Policy::LeastConn => "least-conn",
        }
    }
}

/// How the program of a UDP group routes datagrams (`--udp-mode`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum UdpMode {
    /// A flow (client address and port) keeps its worker while that worker's socket is open,
    /// across rolls, scaling and other workers' deaths; new flows go to the ready workers by a
    /// consistent table. For any UDP protocol and any unmodified server.
    Flow,
    /// No flow table: every datagram goes to a ready worker by the consistent table of its
    /// client address and port (request/response protocols: DNS, syslog, statsd).
    Stateless,
    /// QUIC: a connection goes to the worker whose cookie its connection ID carries (each
    /// worker gets its cookie as CK_QUIC_SERVER_ID), whatever the client's address (migration,
    /// NAT rebinding); every packet of a handshake to one worker; new handshakes to the ready
    /// workers by a consistent table.
    Quic,
}

impl UdpMode {
    /// The value stored in the BPF `config` map.
    pub fn code(self) -> u32 {
        match self {
            UdpMode::Flow => ck_common::udp::udp_mode::FLOW,
            UdpMode::Stateless => ck_common::udp::udp_mode::STATELESS,
            UdpMode::Quic => ck_common::udp::udp_mode::QUIC,
        }
    }

    /// Its word, as `--udp-mode` takes it.
    pub fn name(self) -> &'static str {
        match self {
            UdpMode::Flow => "flow",
            UdpMode::Stateless => "stateless",
            UdpMode::Quic => "quic",
        }
    }
}

/// When a worker counts as ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyMode {
    /// Ready on `READY=1`; a worker that says nothing on `NOTIFY_SOCKET` is ready once it
    /// accepts on its socket (it takes ck's accept probe off its queue; before the program
    /// steers, seen in `/proc` waiting in epoll, `accept`, `poll`, `ppoll`, `select`,
    /// `pselect6`) or, with an HTTP `--probe`, at its first passing probe.
    /// `--ready-grace` takes a silent worker as ready only where ck cannot see that.
    Auto,
    /// Ready only on `READY=1` (bounded by `--ready-timeout`).
    Notify,
    /// Ready as soon as it is spawned.
    Spawn,
    /// Ready when the readiness probe (`--probe http:/PATH`) passes through the worker's own
    /// socket, as a Kubernetes readinessProbe; `READY=1` does not make a starting worker ready.
    Probe,
}

/// How ck writes its log lines (`--log-format`), workers' captured lines included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, message and the event's fields.
    Json,
}

/// Where workers' stdout and stderr go (`--worker-output`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkerOutput {
    /// Pipes read by ck: each line becomes a ck log record with slot, pid, generation and
    /// stream (prefixed in text, one JSON object with `--log-format json`).
    #[default]
    Capture,
    /// ck's own stdout and stderr, unchanged.
    Inherit,
}

/// The command a worker runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppSpec {
    /// Resolved path of the program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Everything `ck run` needs, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    /// Instance name: control socket and pin directory.
    pub name: String,
    /// Listen addresses, one group each.
    pub listen: Vec<ListenAddr>,
    /// Number of workers.
    pub workers: u32,
    /// Selection policy.
    pub policy: Policy,
    /// `--udp-mode`: how UDP groups route datagrams.
    pub udp_mode: UdpMode,
    /// `--queue-patience`: with `least-queue`, a queue whose oldest connection has waited less
    /// than this keeps its round-robin turn (zero: every non-empty queue is compared).
    pub queue_patience: Duration,
    /// Readiness rule.
    pub ready: ReadyMode,
    /// Time a worker has to become ready before it is replaced.
    pub ready_timeout: Duration,
    /// Time a silent worker gets before `auto` readiness takes it as ready.
    pub ready_grace: Duration,
    /// Time a stopping worker gets before SIGKILL.
    pub drain_timeout: Duration,
    /// `--udp-linger`: with UDP groups, a stopping worker whose slot received no datagram (and
    /// holds no TCP connection) for this long is killed (zero: never for that).
    pub udp_linger: Duration,
    /// `--quiet-period`: on a stop, the drain waits until no new connection came for this long
    /// (zero: no wait).
    pub quiet_period: Duration,
    /// `--quiet-max`: the longest that wait lasts.
    pub quiet_max: Duration,
    /// `--stop-signal`: the signal that stops a worker gracefully.
    pub stop_signal: crate::settings::stop_signal::StopSignal,
    /// Workers replaced at a time by a rolling restart.
    pub reload_batch: u32,
    /// Crash handling: backoff and circuit breaker.
    pub restart: crate::settings::restart_policy::RestartPolicy,
    /// Serving slots the circuit breaker never takes the group below (`--min-workers`).
    pub min_workers: u32,
    /// `--adopt`: workers bind the port themselves; ck adopts their listening sockets.
    pub adopt: bool,
    /// `--worker-memory-max`: `memory.max` of every worker's cgroup, where the host has the
    /// memory controller.
    pub worker_memory_max: Option<u64>,
    /// `--max-memory`: recycle a worker whose memory stays above this.
    pub max_memory: Option<u64>,
    /// `--max-requests`: recycle a worker after about this many new connections.
    pub max_requests: Option<u64>,
    /// `--spares`: hot spares booted beside the workers, taking a dead worker's place at once.
    pub spares: u32,
    /// `--boot-boost`: nice levels the rest of the fleet steps back while a replacement of a
    /// dead worker boots.
    pub boot_boost: u8,
    /// `--survive-supervisor`: workers keep serving when ck dies (no `PR_SET_PDEATHSIG`); the
    /// next `ck run` of the same name takes the running fleet back.
    pub survive_supervisor: bool,
    /// `--orphan-timeout`: with `--survive-supervisor`, how long workers wait for a new ck
    /// before they are stopped.
    pub orphan_timeout: Duration,
    /// Health signals.
    pub health: crate::settings::health::HealthConfig,
    /// Plain `SO_REUSEPORT`, no steering.
    pub no_bpf: bool,
    /// Forward the program's log lines to ck's log.
    pub bpf_log: bool,
    /// `--metrics`: where to serve `/metrics`, `/healthz` and `/readyz`.
    pub metrics: Option<SocketAddr>,
    /// How ck's own log lines are written (set up by the binary before the supervisor starts).
    pub log_format: LogFormat,
    /// `--worker-output`: workers' stdout and stderr as ck's log records, or ck's own.
    pub worker_output: WorkerOutput,
    /// The worker command.
    pub app: AppSpec,
    /// `--user`: the user workers run as (with no capability), when not ck's own.
    pub user: Option<crate::os::privileges::WorkerUser>,
}

/// Checks an instance name: it becomes a file name under `/run/ck` and a bpffs directory.
pub fn validate_name(name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::BadName(name.to_string()))
    }
}

/// Checks `--workers`.
pub fn validate_workers(n: u32) -> Result<u32, ConfigError> {
    if (1..=MAX_WORKERS).contains(&n) {
        Ok(n)
    } else {
        Err(ConfigError::BadWorkers(n))
    }
}

/// Resolves APP like a shell would (a name without '/' is looked up in PATH) and checks that
/// it is an executable file, so that a typo fails before any socket is opened.
pub fn resolve_app(app: &str, args: Vec<String>) -> Result<AppSpec, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let bad = |reason: &str| ConfigError::BadApp {
        app: app.to_string(),
        reason: reason.to_string(),
    };
    let candidates: Vec<PathBuf> = if app.contains('/') {
        vec![PathBuf::from(app)]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(app)).collect())
            .unwrap_or_default()
    };
    let mut found_not_exec = None;
    for path in candidates {
        match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(AppSpec {
                    program: path,
                    args,
                });
            }
            Ok(meta) if meta.is_file() => found_not_exec = Some(path),
            Ok(_) if app.contains('/') => {
                return Err(bad("it is a directory, not a program"));
            }
            _ => {}
        }
    }
    Err(match found_not_exec {
        Some(path) => bad(&format!(
            "{} is not executable; run `chmod +x {}` or start it through its interpreter (e.g. `ck run -- node app.js`)",
            path.display(),
            path.display()
        )),
        None if app.contains('/') => bad("no such file; check the path"),
        None => bad("not found in PATH; give its path (./app) or install it"),
    })
}

#[cfg(test)]
mod tests;
