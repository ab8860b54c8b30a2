//! What `ck run` was asked to do: listen addresses, worker count, timeouts, policy, and the
//! validation that turns bad input into errors that say what to fix.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use ck_common::MAX_SLOTS;

/// Largest `--workers` value: half the slots, so a rolling restart always finds free slots.
pub const MAX_WORKERS: u32 = MAX_SLOTS / 2;

mod listen;
pub use super::choices::{LogFormat, Policy, ReadyMode, UdpMode, WorkerOutput};
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
    /// `--canary P` (`--canary-for`, `--canary-by`): every reload starts as a canary (None: off;
    /// `ck reload --canary` asks for one reload).
    pub canary: Option<crate::settings::choices::CanaryAsk>,
    /// `--canary-max-resets`, `--canary-max-drops`, `--canary-max-queue-age`: the limits of
    /// every canary (`ck reload --canary`'s own take precedence).
    pub canary_limits: crate::settings::choices::CanaryLimits,
    /// `--slow-start`: how long a worker joining a warm fleet ramps up to its full share
    /// (None: off).
    pub slow_start: Option<Duration>,
    /// `--keep-previous`: how long a reload's old workers stay alive out of the active set
    /// for `ck rollback` (None: they leave at once).
    pub keep_previous: Option<Duration>,
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

/// The slots a fleet of `workers` needs at most (`spares`, a roll's `reload_batch`
/// replacements, and with `keep_previous` a whole kept release beside the current one), or why
/// they do not fit in the slots a group has (`ck_common::MAX_SLOTS`, one of them the steering
/// check's).
pub fn check_room(
    workers: u32,
    spares: u32,
    reload_batch: u32,
    keep_previous: bool,
) -> Result<(), String> {
    let room = MAX_SLOTS - 1;
    let needed = workers * (1 + u32::from(keep_previous)) + spares + reload_batch;
    if !keep_previous || needed <= room {
        return Ok(());
    }
    let most = (room.saturating_sub(spares + reload_batch)) / 2;
    Err(format!(
        "--keep-previous keeps a whole release beside the current one: {workers} workers need \
         2 x {workers} + {spares} spare(s) + {reload_batch} (--reload-batch) = {needed} slots, \
         and a group has {room} worker slots; run at most {most} workers with --keep-previous, or drop it"
    ))
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
