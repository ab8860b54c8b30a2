//! The defaults of `ck run`'s settings, one `const` each: clap shows and applies them
//! ([`super::run_args::RunArgs`]), so a config file that leaves a key out gets them too, and
//! the tests compare with them. Durations are [`Duration`]s, shown in `--help` as their `Debug`
//! text (`30s`, `500ms`), which [`ck_worker::units::duration::parse_duration`] reads back.
//!
//! Two settings have no constant default: the worker count (`$WEB_CONCURRENCY`, else the CPUs
//! ck may use: [`super::worker_count::default_workers`]) and the instance name (`ck-<first
//! port>`).
use std::time::Duration;

use super::{
    backoff::Backoff,
    choices::{LogFormat, Policy, ReadyMode, UdpMode, WorkerOutput},
    stop_signal::StopSignal,
};

/// The port of the one listen address when neither `--port` nor `--listen` is given.
pub const PORT: u16 = 8080;
/// `--policy`: how new connections are spread over ready workers.
pub const POLICY: Policy = Policy::RoundRobin;
/// `--udp-mode`.
pub const UDP_MODE: UdpMode = UdpMode::Flow;
/// `--queue-patience`: with `least-queue`, how long a worker's oldest queued connection may
/// wait before its queue is compared with the others'. 0: every non-empty queue is compared, so
/// a worker that stops accepting gets about one connection per stall whatever the rate (`bench
/// stall`). A patience evens out bursts of connections opened at once (`bench spread`: 4 ms
/// gives round-robin's spread on a busy 2-core machine) at the price of every connection sent
/// to a stalled worker within it (each stuck until the stall ends).
pub const QUEUE_PATIENCE: Duration = Duration::ZERO;
/// `--ready`: when a worker counts as ready.
pub const READY: ReadyMode = ReadyMode::Auto;
/// `--ready-timeout`: time a worker has to become ready before it is replaced.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// `--ready-grace`: with `--ready auto`, time after which a silent worker is ready.
pub const READY_GRACE: Duration = Duration::from_secs(1);
/// `--drain-timeout`: time a stopping worker gets before SIGKILL.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// `--udp-linger`: a stopping worker of a fleet with UDP groups is killed once its slot has
/// received no datagram (and holds no TCP connection) for this long. 3 s is longer than QUIC's
/// first retransmissions of a lost packet (a probe timeout of 333 ms, doubled twice: 2.3 s) and
/// than two periods of a 1 s keep-alive, so a flow still in use keeps its worker; it ends a
/// quiet worker sooner than `--drain-timeout` (10 s) would. 0 turns it off.
pub const UDP_LINGER: Duration = Duration::from_secs(3);
/// `--quiet-period`: on SIGTERM or `ck stop` (with `--metrics`), ck reports not ready at once and
/// drains only once no new connection came for this long. 3 s outlasts an ordinary gap between
/// new connections on a host in rotation (milliseconds to a second), and is longer than HAProxy's
/// usual check interval (`inter 2s`), so a balancer that still sends between two checks keeps the
/// wait going; 0 turns the wait off.
pub const QUIET_PERIOD: Duration = Duration::from_secs(3);
/// `--quiet-max`: the longest the quiet wait lasts, whatever the traffic. 15 s covers HAProxy's
/// usual detection (`inter 2s fall 3`: up to ~6 s to mark a host down) and kube-proxy's endpoint
/// propagation (a few seconds), and 15 s + `--drain-timeout` 10 s + 5 s of clean-up fits
/// Kubernetes' default `terminationGracePeriodSeconds` of 30 s.
pub const QUIET_MAX: Duration = Duration::from_secs(15);
/// `--stop-signal`: the signal that stops a worker gracefully (SIGKILL after the drain timeout).
pub const STOP_SIGNAL: StopSignal = StopSignal::TERM;
/// `--reload-batch`: workers a rolling restart replaces at a time.
pub const RELOAD_BATCH: u32 = 1;
/// `--canary-for`: how long a canary is judged before it is promoted.
pub const CANARY_FOR: Duration = Duration::from_secs(60);
/// `--slow-start`: off (0): a new worker gets its full share as soon as it is ready. Chosen by
/// `bench slow-start`: for an app warm from the start it only makes each roll longer (by up
/// to the window per batch), with no better p99; ck cannot tell an app that warms up.
pub const SLOW_START: Duration = Duration::ZERO;
/// `--keep-previous`: off (0): a reload's old workers leave as soon as they are replaced.
pub const KEEP_PREVIOUS: Duration = Duration::ZERO;
/// `--restart-backoff`: the restart delays after a crash (`100ms,10s,2,0.1`).
pub const RESTART_BACKOFF: Backoff = Backoff {
    initial: Duration::from_millis(100),
    max: Duration::from_secs(10),
    multiplier: 2.0,
    jitter: 0.1,
};
/// `--restart-stable`: a worker ready this long has served (its exit is not a boot crash).
pub const RESTART_STABLE: Duration = Duration::from_secs(1);
/// `--min-workers`: slots the circuit breaker always leaves trying.
pub const MIN_WORKERS: u32 = 1;
/// `--crash-limit`: boot crashes within the window that open a slot's breaker.
pub const CRASH_LIMIT: u32 = 5;
/// `--crash-window`: the circuit breaker's window.
pub const CRASH_WINDOW: Duration = Duration::from_secs(30);
/// `--crash-cooldown`: how long an open breaker waits before trying the slot again.
pub const CRASH_COOLDOWN: Duration = Duration::from_secs(30);
/// `--probe-interval`: time between probes of a worker.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// `--probe-timeout`: time a probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// `--probe-fails`: failed probes in a row that make a worker unhealthy.
pub const PROBE_FAILS: u32 = 3;
/// `--probe-passes`: passed probes in a row that make it healthy again.
pub const PROBE_PASSES: u32 = 2;
/// `--probe-port-base`: slot S is probed from source port `PROBE_PORT_BASE + S`.
pub const PROBE_PORT_BASE: u16 = 19800;
/// `--stall-timeout`: a queue stuck this long marks its worker stalled (zero: off).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(1);
/// `--sample-interval`: how often least-queue's sampled fallback samples accept queues while
/// there is traffic.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(1);
/// `--spares`: hot spare workers.
pub const SPARES: u32 = 0;
/// `--boot-boost`: nice levels the rest of the fleet steps back while a replacement of a dead
/// worker boots (5: the boot's CFS weight about 3 times theirs, so it gets most of a CPU the
/// survivors also want).
pub const BOOT_BOOST: u8 = 5;
/// `--orphan-timeout`: with `--survive-supervisor`, how long workers wait for a new ck.
pub const ORPHAN_TIMEOUT: Duration = Duration::from_secs(30);
/// `--log-format`: how ck writes its own log lines.
pub const LOG_FORMAT: LogFormat = LogFormat::Text;
/// `--worker-output`: workers' stdout and stderr become ck's log records.
pub const WORKER_OUTPUT: WorkerOutput = WorkerOutput::Capture;

/// A duration default as `ck run` takes it and `--help` shows it: `30s`, `500ms`.
pub fn duration_text(d: Duration) -> String {
    match d.is_zero() {
        true => "0".into(),
        false => format!("{d:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ck_worker::units::duration::parse_duration;

    #[test]
    fn duration_texts_read_back() {
        for d in [
            READY_TIMEOUT,
            PROBE_TIMEOUT,
            SAMPLE_INTERVAL,
            RESTART_STABLE,
            QUEUE_PATIENCE,
        ] {
            assert_eq!(parse_duration(&duration_text(d)), Ok(d));
        }
        assert_eq!(duration_text(PROBE_TIMEOUT), "500ms");
        assert_eq!(duration_text(READY_TIMEOUT), "30s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1.5s");
        assert_eq!(duration_text(QUEUE_PATIENCE), "0");
    }
}
