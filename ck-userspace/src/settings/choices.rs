//! The values of `ck run`'s options that name a choice (`--policy`, `--udp-mode`, `--ready`,
//! `--log-format`, `--worker-output`, `--canary-by`, a canary as asked and its limits): plain values,
//! below their defaults
//! ([`super::defaults`]) and the configuration that holds them ([`super::run_config`]).

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

/// `--canary-by`: how a canary's share of new connections is chosen.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum CanaryBy {
    /// By the client's address, through a consistent table: a client stays on one side for
    /// the whole window.
    #[default]
    Client,
    /// By connection (behind a load balancer, where every connection has one address).
    Connection,
}

/// A canary roll as asked (`--canary P --canary-for D --canary-by B`, or `ck reload`'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanaryAsk {
    /// The canary's share of new connections, in percent (1 to 99).
    pub percent: u8,
    /// How long it is judged, in milliseconds.
    pub for_ms: u64,
    /// How its share is chosen.
    pub by: CanaryBy,
    /// The kernel-counted limits it is withdrawn past.
    #[serde(default)]
    pub limits: CanaryLimits,
}

/// The limits a canary is withdrawn past, each counted by the kernel for the canary's
/// workers from the moment they go in (None: no limit): `--canary-max-resets`,
/// `--canary-max-drops`, `--canary-max-queue-age`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CanaryLimits {
    /// Resets its workers' connections may send (their own side aborting a connection).
    pub max_resets: Option<u64>,
    /// Connections its workers' listening sockets may drop (a full accept queue).
    pub max_drops: Option<u64>,
    /// How long a connection may wait in its workers' accept queues, in milliseconds.
    pub max_queue_age_ms: Option<u64>,
}

impl CanaryLimits {
    /// These limits, each unset one taken from `defaults` (`ck run`'s).
    pub fn or(self, defaults: CanaryLimits) -> CanaryLimits {
        CanaryLimits {
            max_resets: self.max_resets.or(defaults.max_resets),
            max_drops: self.max_drops.or(defaults.max_drops),
            max_queue_age_ms: self.max_queue_age_ms.or(defaults.max_queue_age_ms),
        }
    }

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.max_resets.is_some() || self.max_drops.is_some() || self.max_queue_age_ms.is_some()
    }

    /// `resets <= 5, drops <= 0, queue age <= 200 ms`, or `none`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.max_resets {
            parts.push(format!("resets <= {n}"));
        }
        if let Some(n) = self.max_drops {
            parts.push(format!("drops <= {n}"));
        }
        if let Some(ms) = self.max_queue_age_ms {
            parts.push(format!("queue age <= {ms} ms"));
        }
        match parts.is_empty() {
            true => "none".into(),
            false => parts.join(", "),
        }
    }
}

/// Parses `--canary`'s percentage: 1 to 99, with or without `%`.
pub fn parse_percent(text: &str) -> Result<u8, String> {
    let digits = text.trim().trim_end_matches('%').trim();
    match digits.parse::<u8>() {
        Ok(p) if (1..=99).contains(&p) => Ok(p),
        _ => Err(format!(
            "{text:?} is not a canary share: give a percentage from 1 to 99 (25 or 25%)"
        )),
    }
}
