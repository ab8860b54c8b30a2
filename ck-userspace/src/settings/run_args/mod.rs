//! The options of `ck run` ([`RunArgs`], its clap definition, also the keys and value checks
//! of the `--config` file) and their checks: what the command line says, turned into a
//! [`RunConfig`] or an error that names the option and the fix. Defaults come from
//! [`defaults`].
use std::{path::PathBuf, time::Duration};

use ck_worker::units::duration::parse_duration;
use clap::{Args, Command};

use crate::settings::{
    defaults::{self, duration_text},
    health::ProbeKind,
    restart_policy::{Backoff, parse_backoff},
    run_config::{self, ListenAddr, LogFormat, Policy, ReadyMode, UdpMode, WorkerOutput},
    stop_signal::StopSignal,
};

/// The clap command of `ck run`: the `run` subcommand of the binary, the keys and value
/// checks of the config file, and the command the config file fuzz target checks against.
pub fn run_command() -> Command {
    RunArgs::augment_args(Command::new("run"))
}

/// What `ck run --help` shows after its options (and `ck-run(1)` at its end): the forms of
/// values, and examples.
pub const EXAMPLES: &str = "\
Values:
  DUR   a duration: a number with a unit ns, us, ms, s, m or h (500ms, 2.5s, 1m); a bare
        number is seconds (30 = 30s)
  SIZE  bytes, with an optional K, M, G or T (binary units): 512M, 2G
  N     a whole number

Examples:
  Your app with 4 workers on port 8080 (it accepts on fd 3, e.g. through ck-listen or ck-worker):
    ck run -w 4 -p 8080 -- node server.js

  An unmodified server that binds the port itself (it gets PORT=8080):
    ck run --adopt -w 4 -p 8080 -- python3 -m http.server --bind 0.0.0.0 8080

  nginx (a config per worker), stopped gracefully with SIGQUIT:
    ck run --adopt -w 2 -p 8080 --stop-signal QUIT -- sh -c 'exec nginx -c ck.$CK_WORKER_ID.conf'

  Prometheus metrics, /healthz and /readyz on 127.0.0.1:9100:
    ck run -w 4 -p 8080 --metrics 127.0.0.1:9100 -- ./server

  Every option from a file (ck reload reads it again):
    ck run --config /etc/ck/ck.toml";

/// The option groups of `ck run --help`, in the order shown (the options without one come
/// first: where to listen, the instance's name and its config file).
pub const HEADINGS: [&str; 7] = [
    WORKERS, READINESS, HEALTH, STEERING, LIMITS, STOPPING, OPERATIONS,
];
const WORKERS: &str = "Workers";
const READINESS: &str = "Readiness";
const HEALTH: &str = "Health and restarts";
const STEERING: &str = "Steering";
const LIMITS: &str = "Limits";
const STOPPING: &str = "Stopping";
const OPERATIONS: &str = "Operations";

/// The options of `ck run`. Each doc comment's first line is the short help (`ck run -h`); the
/// whole comment is the long help (`ck run --help`, the man page, the config reference).
#[derive(Args)]
#[command(after_long_help = EXAMPLES)]
pub struct RunArgs {
    /// Read options from a TOML file.
    ///
    /// Every long option is a key (`workers = 4`, `ready-timeout = "30s"`, `port = [8080,
    /// 8081]`, `adopt = true`) and `app = ["node", "server.js"]`; options given on the command
    /// line win. `ck reload` reads it again.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// TCP port to listen on, on 0.0.0.0 (repeatable).
    ///
    /// Default 8080 when no --listen either.
    #[arg(short, long = "port", value_name = "PORT", value_parser = run_config::parse_port)]
    ports: Vec<u16>,
    /// Listen address, tcp:// or udp://HOST:PORT (repeatable).
    ///
    /// tcp://HOST:PORT, e.g. tcp://127.0.0.1:8080 for loopback only; udp://HOST:PORT for a UDP
    /// group (each datagram steered, see --udp-mode). Workers get one socket per address as
    /// fds 3.., the --port ones first, then the --listen ones in the order given.
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Vec<ListenAddr>,
    /// Instance name (default: ck-<first port>).
    ///
    /// Names the control socket ($CK_RUN_DIR/NAME.sock) and the BPF pins; `ck status --name
    /// NAME` and the other commands find the instance by it.
    #[arg(long)]
    name: Option<String>,
    /// Number of workers.
    ///
    /// Default: $WEB_CONCURRENCY, else the CPUs this process may use.
    #[arg(short, long, value_name = "N", help_heading = WORKERS)]
    workers: Option<u32>,
    /// Workers bind the port themselves (unmodified servers).
    ///
    /// For `app.listen(PORT)` as it is: ck runs each worker in a cgroup whose bind hook adds
    /// SO_REUSEPORT on the instance's ports, adopts every listening socket they open, and steers
    /// it like one it made. Workers get PORT (the first port).
    #[arg(long, help_heading = WORKERS)]
    adopt: bool,
    /// Run the workers as USER[:GROUP], without capabilities.
    ///
    /// As USER (and GROUP, else USER's groups) with no capability; ck opens the sockets, so they
    /// can serve a port below 1024. ck needs root (or CAP_SETUID, CAP_SETGID and CAP_KILL).
    #[arg(long, value_name = "USER[:GROUP]", value_parser = crate::os::privileges::parse_user, help_heading = WORKERS)]
    user: Option<crate::os::privileges::WorkerUser>,
    /// Hot spares: N extra workers booted but not selected.
    ///
    /// Booted and ready but not selected; when a worker dies, a spare takes its place at once
    /// (and a new spare boots).
    #[arg(long, value_name = "N", default_value_t = defaults::SPARES, help_heading = WORKERS)]
    spares: u32,
    /// Nice levels the fleet steps back while a replacement boots.
    ///
    /// While a replacement for a worker that died boots, the rest of the fleet steps back N
    /// nice levels (every thread of every worker), and comes back once no replacement boots:
    /// the survivors serving the whole load meanwhile do not slow the boot, which keeps ck's
    /// priority. 0: off. Needs CAP_SYS_NICE (ck says so once where it lacks it); rolls,
    /// scale-ups and spares change no priority.
    #[arg(long, value_name = "N", default_value_t = defaults::BOOT_BOOST,
          value_parser = clap::value_parser!(u8).range(0..=39), help_heading = WORKERS)]
    boot_boost: u8,
    /// When a worker counts as ready.
    ///
    /// READY=1 (auto also takes a worker that is silent on NOTIFY_SOCKET as ready once it
    /// waits for connections on its socket), at spawn, or when the readiness probe (--probe
    /// http:/PATH) passes.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = defaults::READY, help_heading = READINESS)]
    ready: ReadyMode,
    /// Time a worker has to become ready.
    ///
    /// A worker not ready by then is replaced.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::READY_TIMEOUT), help_heading = READINESS)]
    ready_timeout: Duration,
    /// With --ready auto: when a silent worker counts as ready.
    ///
    /// Time after which a worker that said nothing on NOTIFY_SOCKET is ready if ck cannot see
    /// whether it waits for connections (no access to its /proc).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::READY_GRACE), help_heading = READINESS)]
    ready_grace: Duration,
    /// Heartbeat timeout (sets WATCHDOG_USEC).
    ///
    /// A worker that sent WATCHDOG=1 and then stays silent this long is taken out of the
    /// active set until it sends it again.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", help_heading = HEALTH)]
    watchdog: Option<Duration>,
    /// Probe every worker: tcp, http or http:/PATH.
    ///
    /// Through its own socket: `tcp`, `http` or `http:/PATH` (2xx passes).
    #[arg(long, value_name = "KIND", help_heading = HEALTH)]
    probe: Option<ProbeKind>,
    /// Time between probes of a worker.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::PROBE_INTERVAL), help_heading = HEALTH)]
    probe_interval: Duration,
    /// Time a probe may take.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::PROBE_TIMEOUT), help_heading = HEALTH)]
    probe_timeout: Duration,
    /// Failed probes in a row that make a worker unhealthy.
    #[arg(long, value_name = "N", default_value_t = defaults::PROBE_FAILS, help_heading = HEALTH)]
    probe_fails: u32,
    /// Passed probes in a row that make it healthy again.
    #[arg(long, value_name = "N", default_value_t = defaults::PROBE_PASSES, help_heading = HEALTH)]
    probe_passes: u32,
    /// Probe source ports: slot S is probed from BASE+S.
    ///
    /// The BPF program steers those loopback connections to slot S.
    #[arg(long, value_name = "BASE", default_value_t = defaults::PROBE_PORT_BASE, help_heading = HEALTH)]
    probe_port_base: u16,
    /// Take a worker whose queue does not move out of the set.
    ///
    /// A worker whose accept queue stays non-empty with no connection leaving it this long is
    /// taken out of the active set until it moves again (0: off).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::STALL_TIMEOUT), help_heading = HEALTH)]
    stall_timeout: Duration,
    /// How often accept queues are sampled.
    ///
    /// The sampled fallback's interval: how often accept queues are sampled while there is
    /// traffic when least-queue steers by sampled depths (the kernel does not let its program
    /// read exact ones); 50 times less often when idle. Otherwise queues are sampled for stall
    /// detection every --stall-timeout/10 (at least 50 ms).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::SAMPLE_INTERVAL), help_heading = HEALTH)]
    sample_interval: Duration,
    /// Replace a worker unhealthy for this long.
    ///
    /// Gracefully, as a rolling restart of one.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", help_heading = HEALTH)]
    unhealthy_replace_after: Option<Duration>,
    /// Restart backoff after a crash.
    ///
    /// INITIAL[,MAX[,MULTIPLIER[,JITTER]]].
    #[arg(long, value_parser = parse_backoff, value_name = "SPEC", default_value_t = defaults::RESTART_BACKOFF, help_heading = HEALTH)]
    restart_backoff: Backoff,
    /// A worker ready this long has served.
    ///
    /// Its exit restarts it at once and resets the backoff (so does a ready worker killed from
    /// outside: SIGKILL, SIGTERM, SIGINT, the stop signal). Earlier exits are boot crashes:
    /// they wait the backoff and count towards the breaker.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::RESTART_STABLE), help_heading = HEALTH)]
    restart_stable: Duration,
    /// Boot crashes in --crash-window that open the breaker.
    ///
    /// Boot crashes within --crash-window that open a slot's circuit breaker.
    #[arg(long, value_name = "N", default_value_t = defaults::CRASH_LIMIT, help_heading = HEALTH)]
    crash_limit: u32,
    /// The circuit breaker's window.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::CRASH_WINDOW), help_heading = HEALTH)]
    crash_window: Duration,
    /// How long an open breaker waits.
    ///
    /// How long an open breaker waits before trying the slot again.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::CRASH_COOLDOWN), help_heading = HEALTH)]
    crash_cooldown: Duration,
    /// Slots the breaker keeps trying (0: no floor).
    ///
    /// The circuit breaker never takes the group below this many slots that keep trying: the
    /// slot that would stays half-open, retried at the maximum backoff (0: no floor).
    #[arg(long, value_name = "N", default_value_t = defaults::MIN_WORKERS, help_heading = HEALTH)]
    min_workers: u32,
    /// How new connections are spread over ready workers.
    #[arg(long, value_enum, default_value_t = defaults::POLICY, help_heading = STEERING)]
    policy: Policy,
    /// How UDP groups (--listen udp://) route datagrams.
    ///
    /// flow: a client's address and port keep their worker while its socket is open (rolls,
    /// scaling and other workers' deaths move no flow); quic: by the worker's cookie in the
    /// QUIC connection ID (CK_QUIC_SERVER_ID), so client migration survives too; stateless: no
    /// flow table, every datagram to a ready worker by a consistent hash of its client (DNS,
    /// syslog, statsd).
    #[arg(long, value_enum, default_value_t = defaults::UDP_MODE, help_heading = STEERING)]
    udp_mode: UdpMode,
    /// With --policy least-queue: waits below this keep their turn.
    ///
    /// A worker whose oldest queued connection has waited less than this (as the kernel says)
    /// keeps its round-robin turn, which evens out bursts; only longer waits are compared by
    /// queue length (0: every non-empty queue is, so a stalled worker gets about one connection
    /// per stall). The wait counts from the SYN-ACK: keep it above the clients' round-trip
    /// time.
    #[arg(long, value_parser = parse_duration, default_value = duration_text(defaults::QUEUE_PATIENCE), value_name = "DUR", help_heading = STEERING)]
    queue_patience: Duration,
    /// Plain SO_REUSEPORT without the BPF program.
    ///
    /// The baseline; no readiness or drain steering.
    #[arg(long, help_heading = STEERING)]
    no_bpf: bool,
    /// Forward the BPF program's log lines to ck's log.
    ///
    /// Fallbacks, drops.
    #[arg(long, help_heading = STEERING)]
    bpf_log: bool,
    /// memory.max of every worker's cgroup (e.g. 512M).
    ///
    /// Where the host's cgroup2 has the memory controller (ck says so where it does not).
    #[arg(long, value_parser = ck_worker::units::size::parse_size, value_name = "SIZE", help_heading = LIMITS)]
    worker_memory_max: Option<u64>,
    /// Recycle a worker whose memory stays above SIZE.
    ///
    /// Replace it gracefully when its memory stays above SIZE (e.g. 512M) for 3 samples, one a
    /// second.
    #[arg(long, value_parser = ck_worker::units::size::parse_size, value_name = "SIZE", help_heading = LIMITS)]
    max_memory: Option<u64>,
    /// Recycle a worker after about N new connections.
    ///
    /// Replace it gracefully; each worker's own limit is within ±10 % of N, checked every
    /// second.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = LIMITS)]
    max_requests: Option<u64>,
    /// The signal that stops a worker gracefully.
    ///
    /// Used by rolls, scale-down, recycling and stop: TERM, QUIT (nginx, unicorn, php-fpm),
    /// INT, HUP, USR1 (HAProxy), USR2, WINCH or KILL, with or without SIG, or its number;
    /// SIGKILL follows after --drain-timeout.
    #[arg(long, value_name = "SIG", default_value_t = defaults::STOP_SIGNAL, help_heading = STOPPING)]
    stop_signal: StopSignal,
    /// Time a stopping worker gets before SIGKILL.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::DRAIN_TIMEOUT), help_heading = STOPPING)]
    drain_timeout: Duration,
    /// UDP: kill a stopping worker whose slot is quiet this long.
    ///
    /// After the stop signal a worker keeps receiving its flows' datagrams (its socket stays
    /// open) until it exits, or until its slot has received no datagram and held no TCP
    /// connection for this long (0: only exit or --drain-timeout end it).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::UDP_LINGER), help_heading = STOPPING)]
    udp_linger: Duration,
    /// With --metrics: wait for traffic to stop before draining.
    ///
    /// On SIGTERM or `ck stop`, /readyz answers 503 (stopping) at once, every worker keeps
    /// serving, and the drain starts once no new connection came for this long (0: drain at
    /// once).
    #[arg(long, value_parser = parse_duration, default_value = duration_text(defaults::QUIET_PERIOD), value_name = "DUR", help_heading = STOPPING)]
    quiet_period: Duration,
    /// The longest the --quiet-period wait lasts.
    ///
    /// The drain starts then even if connections still come (with a warning that the balancer
    /// never stopped sending).
    #[arg(long, value_parser = parse_duration, default_value = duration_text(defaults::QUIET_MAX), value_name = "DUR", help_heading = STOPPING)]
    quiet_max: Duration,
    /// Workers a rolling restart replaces at a time.
    ///
    /// A rolling restart is SIGHUP or `ck reload`.
    #[arg(long, value_name = "N", default_value_t = defaults::RELOAD_BATCH, help_heading = STOPPING)]
    reload_batch: u32,
    /// Start every reload as a canary with P % of new connections.
    ///
    /// `ck reload` (and SIGHUP) first starts ceil(workers x P / 100) new workers beside the
    /// current ones and gives them P % of new connections for --canary-for; if none of them
    /// exits, turns unhealthy or drains meanwhile, they become the roll's first batch and the
    /// roll goes on, else they are withdrawn and the reload fails, the current release having
    /// served throughout. `ck reload --canary P` asks for one reload.
    #[arg(long, value_name = "P", value_parser = crate::settings::choices::parse_percent, help_heading = STOPPING)]
    canary: Option<u8>,
    /// How long a canary is judged.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::CANARY_FOR), help_heading = STOPPING)]
    canary_for: Duration,
    /// How a canary's share is chosen: by client or connection.
    ///
    /// client: by the client's address, through a consistent table, so a client stays on one
    /// side for the whole window; connection: each new connection on its own (behind a load
    /// balancer, where every connection has one address).
    #[arg(long, value_enum, value_name = "BY", default_value_t = crate::settings::choices::CanaryBy::Client, help_heading = STOPPING)]
    canary_by: crate::settings::choices::CanaryBy,
    /// Withdraw a canary whose connections send more than N resets.
    ///
    /// Counted by the kernel from the moment the canary goes in: connections of its workers
    /// that their own side aborted (closed with data unread or SO_LINGER 0, or left by a
    /// worker that exited), each of which sends the client a reset. Resets clients send are
    /// not counted. Unset: no limit. `ck reload --canary-max-resets` sets it for one reload.
    #[arg(long, value_name = "N", help_heading = STOPPING)]
    canary_max_resets: Option<u64>,
    /// Withdraw a canary whose sockets drop more than N connections.
    ///
    /// Counted by the kernel on the canary's listening sockets (`ss -tlm`'s `d`): SYNs it
    /// dropped, mostly because the worker's accept queue was full. A client's SYN sent again
    /// counts again. Unset: no limit.
    #[arg(long, value_name = "N", help_heading = STOPPING)]
    canary_max_drops: Option<u64>,
    /// Withdraw a canary whose queue holds a connection longer.
    ///
    /// At each new connection sent to a canary worker, the select program reads how long the
    /// oldest connection of its accept queue has waited (as least-queue does, from kernel
    /// memory: CAP_PERFMON and BTF); past DUR, the canary is withdrawn. Given here, the
    /// program is loaded with those reads (about 0.4 s more at start), which `ck reload
    /// --canary-max-queue-age` needs too. Unset: no limit.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", help_heading = STOPPING)]
    canary_max_queue_age: Option<Duration>,
    /// Ramp a new worker's share of connections up over DUR.
    ///
    /// A worker that joins a warm fleet (a roll's replacement, a scale-up, the replacement of
    /// a crashed worker) gets 10 % of a warm worker's share of new connections once ready,
    /// rising linearly to all of it over DUR. From half of DUR on, a ramp whose worker keeps
    /// up (it holds no more connections, queued and open, per unit of its share than a warm
    /// worker) goes four times
    /// faster. In a roll the old worker serves on beside its replacement until then, and the
    /// next batch starts after. In a UDP group it ramps the share of new flows. Not for
    /// --policy sticky. 0: off, the default (it would lengthen every roll, and only an app
    /// that warms up gains from it).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::SLOW_START), help_heading = STOPPING)]
    slow_start: Duration,
    /// Keep a reload's old workers for `ck rollback` this long.
    ///
    /// After `ck reload` (or SIGHUP) the workers it replaced stay alive with their sockets
    /// open, out of the active set, for DUR: `ck rollback` puts them back in one map write and
    /// retires the new ones. At the window's end they stop gracefully; a newer reload retires
    /// them first. They hold their memory meanwhile (`ck status` shows it); 2 x workers +
    /// spares + --reload-batch must fit in 127 slots. 0: off.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", default_value = duration_text(defaults::KEEP_PREVIOUS), help_heading = STOPPING)]
    keep_previous: Duration,
    /// Serve /metrics, /healthz and /readyz on ADDR.
    ///
    /// Prometheus metrics (GET /metrics) and health endpoints for probes and load balancers
    /// (GET /healthz, GET /readyz) on ADDR, e.g. 127.0.0.1:9100 (a port alone: 127.0.0.1; port
    /// 0: any free port, shown by `ck status`).
    #[arg(long, value_name = "ADDR", value_parser = crate::metrics::server::parse_addr, help_heading = OPERATIONS)]
    metrics: Option<std::net::SocketAddr>,
    /// ck's log lines on stderr: text or json.
    ///
    /// json: one object per line (timestamp, level, message and the event's fields), workers'
    /// captured lines included.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = defaults::LOG_FORMAT, help_heading = OPERATIONS)]
    log_format: LogFormat,
    /// Workers' stdout and stderr: capture or inherit.
    ///
    /// capture: each line a ck log record on ck's stderr, with slot, pid, generation and
    /// stream; inherit: ck's own stdout and stderr, unchanged.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = defaults::WORKER_OUTPUT, help_heading = OPERATIONS)]
    worker_output: WorkerOutput,
    /// Workers keep serving if ck dies.
    ///
    /// After kill -9 or a crash, the next `ck run` with the same name takes the running fleet
    /// back (same workers) instead of starting a new one.
    #[arg(long, help_heading = OPERATIONS)]
    survive_supervisor: bool,
    /// With --survive-supervisor: when orphaned workers stop.
    ///
    /// Workers whose ck does not come back within DUR are stopped (SIGTERM, SIGKILL after
    /// --drain-timeout), and the instance's pins are removed.
    #[arg(
        long,
        value_parser = parse_duration,
        default_value = duration_text(defaults::ORPHAN_TIMEOUT),
        value_name = "DUR",
        help_heading = OPERATIONS
    )]
    orphan_timeout: Duration,
    /// The worker program and its arguments (default: the built-in demo worker).
    ///
    /// The program's own options go after it or after `--` (`ck run -w 4 -- node --inspect
    /// app.js`); every option before them is ck's.
    #[arg(trailing_var_arg = true, value_name = "APP")]
    app: Vec<String>,
}

mod into_config;

#[cfg(test)]
mod tests;
