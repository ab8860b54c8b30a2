//! A load client for ck's demo worker, shared by the integration tests and `cargo xtask bench`:
//! `connections` concurrent HTTP/1.1 clients send `GET {path}` to one address, for a time or a
//! number of requests, closed-loop or paced at a fixed total rate, and the outcome of every
//! request is classified and recorded in a [`LoadReport`].
//!
//! The HTTP client is written by hand on tokio sockets (see [`client`]) so that it stays cheap:
//! a load runs on its own two-thread tokio runtime, and on a small machine its CPU use competes
//! with the workers being measured.
//!
//! Semantics worth knowing:
//! - A run ends when `duration` has elapsed, `requests` requests have been started, or
//!   [`LoadHandle::stop`] was called, whichever comes first. No request starts after that;
//!   requests in flight finish (or time out), so every started request is accounted for.
//! - With a `rate`, each connection sends at fixed intervals (`connections / rate`), staggered,
//!   and latency is measured from the *scheduled* send time whenever the connection is behind
//!   schedule: when the server stalls, the waiting time of the requests that should have been
//!   sent meanwhile is counted (no coordinated omission). A connection that was idle until
//!   its send time measures from the actual send, so the timer's lateness is not counted.
//! - In [`Mode::KeepAlive`], a request that fails on a reused connection before any byte of
//!   the response arrived (EOF, reset, broken pipe; the server closed an idle connection) is
//!   retried once on a new connection, as HTTP clients do, and counted in
//!   [`LoadReport::retried`] instead of as a failure; unless [`LoadSpec::retry`] is off, as in
//!   wrk, which counts it as a failure.
//!
//! Only point it at loopback addresses (ck's `--port` groups listen on `0.0.0.0`).

mod client;
mod report;
mod worker;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::watch;

pub use report::{LoadReport, Sample};

/// Default [`LoadSpec::timeout`].
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How each request reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every request opens a connection, sends `Connection: close`, reads the answer, closes.
    NewConnection,
    /// Each load connection keeps one HTTP/1.1 connection open and sends its requests on it
    /// one after the other (reconnecting when the server closes it).
    KeepAlive,
}

/// Why a request got no good answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// The connection was refused (`ECONNREFUSED`).
    Refused,
    /// The connection was reset or closed (or the pipe broke) before the whole answer arrived.
    Reset,
    /// Connecting plus answering took longer than [`LoadSpec::timeout`].
    Timeout,
    /// Anything else: a status other than 2xx, a malformed answer, another I/O error.
    Other,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureKind::Refused => "refused",
            FailureKind::Reset => "reset",
            FailureKind::Timeout => "timeout",
            FailureKind::Other => "other",
        })
    }
}

/// What load to send. At least one of `duration` and `requests` must be set.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSpec {
    /// Where to send it (a loopback address).
    pub addr: SocketAddr,
    /// New connection per request, or keep-alive.
    pub mode: Mode,
    /// Concurrent connections (each one a task sending one request at a time); at least 1.
    pub connections: usize,
    /// Stop starting requests after this long ...
    pub duration: Option<Duration>,
    /// ... or once this many requests have been started in total, whichever comes first.
    pub requests: Option<u64>,
    /// Total requests per second, paced open-loop; `None` sends as fast as answers come.
    pub rate: Option<f64>,
    /// Limit of one request, connecting included (a retry shares its request's limit).
    pub timeout: Duration,
    /// The request target, `/` by default.
    pub path: String,
    /// Retry once a request that failed early on a reused keep-alive connection (on by
    /// default; wrk does not).
    pub retry: bool,
}

impl LoadSpec {
    /// A load of `connections` connections for `duration`, unpaced, with the default timeout
    /// and path.
    pub fn for_duration(
        addr: SocketAddr,
        mode: Mode,
        connections: usize,
        duration: Duration,
    ) -> LoadSpec {
        LoadSpec {
            addr,
            mode,
            connections,
            duration: Some(duration),
            requests: None,
            rate: None,
            timeout: DEFAULT_TIMEOUT,
            path: "/".to_string(),
            retry: true,
        }
    }

    /// A load of `requests` requests over `connections` connections, unpaced, with the
    /// default timeout and path.
    pub fn for_requests(
        addr: SocketAddr,
        mode: Mode,
        connections: usize,
        requests: u64,
    ) -> LoadSpec {
        LoadSpec {
            duration: None,
            requests: Some(requests),
            ..LoadSpec::for_duration(addr, mode, connections, Duration::ZERO)
        }
    }

    /// Panics with a message when the spec cannot be run.
    fn validate(&self) {
        assert!(
            self.connections >= 1,
            "a load needs at least one connection"
        );
        assert!(
            self.duration.is_some() || self.requests.is_some(),
            "a load needs a duration or a number of requests"
        );
        if let Some(rate) = self.rate {
            assert!(
                rate.is_finite() && rate > 0.0,
                "a load rate must be positive, not {rate}"
            );
        }
        assert!(!self.timeout.is_zero(), "a load timeout must not be zero");
        assert!(
            self.path.starts_with('/') && !self.path.bytes().any(|b| b.is_ascii_whitespace()),
            "a load path must start with / and contain no whitespace: {:?}",
            self.path
        );
    }
}

/// A load that runs on threads of its own; [`join`](LoadHandle::join) it for its report.
/// Dropping the handle stops the load and abandons its report.
#[derive(Debug)]
pub struct LoadHandle {
    runtime: Option<Runtime>,
    stop: watch::Sender<bool>,
    done: mpsc::Receiver<LoadReport>,
}

impl LoadHandle {
    /// Asks the load to finish early: no request starts after this, those in flight finish.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until the load is over and returns its report (the calling thread blocks: at
    /// most `duration` plus one `timeout`, when not stopped before).
    ///
    /// # Panics
    /// When the load itself panicked.
    pub fn join(self) -> LoadReport {
        self.done
            .recv()
            .expect("the load run panicked (its message is above)")
    }
}

impl Drop for LoadHandle {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        if let Some(runtime) = self.runtime.take() {
            // Allowed anywhere, even inside another runtime; its tasks end at their next await.
            runtime.shutdown_background();
        }
    }
}

/// Starts the load described by `spec` on a tokio runtime with two worker threads owned by
/// the returned handle, and returns at once.
///
/// # Panics
/// When `spec` is invalid (no connection, neither duration nor requests, a rate that is not
/// positive, a zero timeout, a path not starting with `/`), or the runtime cannot be built.
pub fn start(spec: LoadSpec) -> LoadHandle {
    start_on(spec, tokio::runtime::Builder::new_multi_thread())
}

/// Like [`start`], with every thread of the load's runtime in the network namespace of the
/// file `netns` (`/run/netns/NAME`): a network namespace is per thread, so the load's sockets
/// are the namespace's while the calling process stays where it is.
///
/// # Panics
/// Like [`start`], and when `netns` cannot be opened or entered.
pub fn start_in_netns(spec: LoadSpec, netns: &std::path::Path) -> LoadHandle {
    let file = std::fs::File::open(netns)
        .unwrap_or_else(|e| panic!("opening the network namespace {}: {e}", netns.display()));
    let file = Arc::new(file);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.on_thread_start(move || {
        nix::sched::setns(&*file, nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("entering the load's network namespace");
    });
    start_on(spec, builder)
}

/// Starts `spec` on a runtime built from `builder` (two worker threads).
fn start_on(spec: LoadSpec, mut builder: tokio::runtime::Builder) -> LoadHandle {
    spec.validate();
    let runtime = builder
        .worker_threads(2)
        .thread_name("ck-load")
        .enable_all()
        .build()
        .expect("building the load's tokio runtime");
    let (stop, stop_rx) = watch::channel(false);
    let (done_tx, done) = mpsc::channel();
    let shared = Arc::new(worker::Shared::new(spec));
    runtime.spawn(async move {
        let report = worker::drive(shared, stop_rx).await;
        let _ = done_tx.send(report);
    });
    LoadHandle {
        runtime: Some(runtime),
        stop,
        done,
    }
}

/// Runs the load described by `spec` to its end and returns its report ([`start`] + join).
///
/// # Panics
/// Like [`start`].
pub fn run(spec: LoadSpec) -> LoadReport {
    start(spec).join()
}

/// Sends one `GET /` (`Connection: close`) to `addr` on a new connection and returns the slot
/// and pid of the answer `slot=<slot> pid=<pid>`, all within `timeout`. Blocking; usable
/// anywhere, inside a tokio runtime too.
///
/// # Errors
/// The kind of failure: [`FailureKind::Other`] also for a status other than 2xx and for a body
/// without a slot or a pid.
pub fn get_once(addr: SocketAddr, timeout: Duration) -> Result<(String, u32), FailureKind> {
    client::get_once(addr, timeout).map_err(|failure| failure.kind)
}
