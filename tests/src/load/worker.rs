//! Running a load: one task per connection that paces its requests, sends them (retrying once
//! on a new connection when a reused keep-alive connection fails before answering), records
//! each outcome, and the driver that merges the connections' records into the report.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout_at};

use super::client::{self, Detail, Failure, Head};
use super::report::{Caps, LoadReport, Recorder};
use super::{FailureKind, LoadSpec, Mode};

/// What the connections of a load share.
#[derive(Debug)]
pub(crate) struct Shared {
    spec: LoadSpec,
    /// The request, ready to send.
    request: Vec<u8>,
    /// When the load started.
    start: Instant,
    /// When it must stop starting requests.
    end: Option<Instant>,
    /// Requests started so far (may overshoot the limit: each failed claim adds one).
    claimed: AtomicU64,
    caps: Caps,
}

impl Shared {
    /// Starts the clock of a load of `spec` (already validated).
    pub fn new(spec: LoadSpec) -> Shared {
        let start = Instant::now();
        Shared {
            request: client::request_bytes(&spec.path, spec.mode == Mode::NewConnection),
            end: spec.duration.map(|d| start + d),
            start,
            claimed: AtomicU64::new(0),
            caps: Caps::default(),
            spec,
        }
    }

    /// Claims the right to start one more request.
    fn claim(&self) -> bool {
        self.spec
            .requests
            .is_none_or(|limit| self.claimed.fetch_add(1, Ordering::Relaxed) < limit)
    }
}

/// Runs every connection of the load to its end and returns the merged report.
pub(crate) async fn drive(shared: Arc<Shared>, stop: watch::Receiver<bool>) -> LoadReport {
    let tasks: Vec<_> = (0..shared.spec.connections)
        .map(|index| tokio::spawn(connection(shared.clone(), index, stop.clone())))
        .collect();
    let mut report = LoadReport::empty();
    let mut errors = Vec::new();
    for task in tasks {
        match task.await {
            Ok(part) => report.merge(part, &mut errors),
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => panic!("a load connection was cancelled: {err}"),
        }
    }
    report.finish(shared.start.elapsed(), errors);
    report
}

/// Load connection number `index`: sends requests until the load's end, its request limit or
/// `stop`, and returns what it recorded.
async fn connection(
    shared: Arc<Shared>,
    index: usize,
    mut stop: watch::Receiver<bool>,
) -> Recorder {
    let spec = &shared.spec;
    let mut recorder = Recorder::new();
    let mut conn = Conn {
        stream: None,
        buf: Vec::with_capacity(4096),
        retried: false,
        port: None,
    };
    // With a rate, connection i sends at start + i/rate + k*connections/rate.
    let interval = spec
        .rate
        .map(|rate| Duration::from_secs_f64(spec.connections as f64 / rate));
    let mut next = shared.start
        + spec.rate.map_or(Duration::ZERO, |rate| {
            Duration::from_secs_f64(index as f64 / rate)
        });
    // Ends by `end` (time) or the request limit: validate() requires one of them.
    loop {
        // Changed (to true) or the handle is gone: stop either way.
        if !matches!(stop.has_changed(), Ok(false)) {
            break;
        }
        let scheduled = match interval {
            Some(interval) => {
                let at = next;
                next += interval;
                at
            }
            None => Instant::now(),
        };
        if shared.end.is_some_and(|end| scheduled >= end) {
            break;
        }
        // Latency counts from the scheduled send when the connection is behind schedule (its
        // previous answers were slow: no coordinated omission), but from the actual send when
        // it was idle until then (the timer's millisecond lateness is not the server's).
        let idle = scheduled > Instant::now();
        if idle {
            tokio::select! {
                () = sleep_until(scheduled) => {}
                _ = stop.changed() => break,
            }
        }
        if !shared.claim() {
            break;
        }
        let sent = if idle || interval.is_none() {
            Instant::now()
        } else {
            scheduled
        };
        let outcome = conn.request(&shared).await;
        let done = Instant::now();
        let at = done - shared.start;
        if std::mem::take(&mut conn.retried) {
            recorder.retried();
        }
        let failure = match outcome {
            Ok(head) if head.is_success() => {
                let body = &conn.buf[head.head_len..head.total()];
                let (slot, pid) = client::parse_body(body);
                recorder.answer(&shared.caps, at, done - sent, slot, pid);
                continue;
            }
            Ok(head) => Failure {
                kind: FailureKind::Other,
                early: false,
                detail: Detail::Status(head.status),
            },
            Err(failure) => failure,
        };
        recorder.failure(&shared.caps, at, &failure, conn.port);
    }
    recorder
}

/// The client side of one load connection.
struct Conn {
    /// The open keep-alive connection, if any; it has answered at least once.
    stream: Option<TcpStream>,
    /// The last response.
    buf: Vec<u8>,
    /// Whether the current request was retried.
    retried: bool,
    /// The client's port of the connection of the last try (None: it could not connect).
    port: Option<u16>,
}

impl Conn {
    /// Sends one request within the spec's timeout, retrying once when a reused connection
    /// fails before answering. On success the response is in `buf`.
    async fn request(&mut self, shared: &Shared) -> Result<Head, Failure> {
        let deadline = Instant::now() + shared.spec.timeout;
        match timeout_at(deadline, self.request_with_retry(shared)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                // Cut off mid-exchange: the connection is out of step.
                self.stream = None;
                Err(Failure::timeout(self.buf.is_empty()))
            }
        }
    }

    async fn request_with_retry(&mut self, shared: &Shared) -> Result<Head, Failure> {
        let reused = self.stream.is_some();
        match self.attempt(shared).await {
            Err(failure)
                if shared.spec.retry
                    && reused
                    && failure.early
                    && failure.kind == FailureKind::Reset =>
            {
                self.retried = true;
                self.attempt(shared).await
            }
            outcome => outcome,
        }
    }

    /// One try: connects when there is no open connection, sends, reads the response; keeps
    /// the connection only when it is keep-alive and may be reused.
    async fn attempt(&mut self, shared: &Shared) -> Result<Head, Failure> {
        self.buf.clear();
        let stream = match self.stream.take() {
            Some(stream) => stream,
            None => {
                self.port = None;
                let stream = client::connect(shared.spec.addr).await?;
                self.port = stream.local_addr().ok().map(|a| a.port());
                stream
            }
        };
        let stream = self.stream.insert(stream);
        let outcome = client::exchange(stream, &mut self.buf, &shared.request).await;
        let keep =
            matches!(&outcome, Ok(head) if !head.close) && shared.spec.mode == Mode::KeepAlive;
        if !keep {
            self.stream = None;
        }
        outcome
    }
}
