//! The graceful keep-alive close a worker does when ck stops it (SIGTERM): ck has already
//! stopped steering new connections to it, but some are still queued on its listeners, some
//! requests are in flight, and keep-alive clients may be about to send their next request. So:
//!
//! 1. keep accepting until a listener has been quiet for [`CLOSE_QUIET`], then close it
//!    ([`Close::accept_until_closed`]);
//! 2. answer each connection's next request with `Connection: close`, and close it after;
//! 3. close a keep-alive connection that sends nothing for [`IDLE_GRACE`];
//! 4. give every connection at most [`SHUTDOWN_GRACE`] to finish, then drop it
//!    ([`ConnectionClose`] for a hand-written protocol loop, [`Close::connection`] for a
//!    connection future of an HTTP library such as hyper's).
//!
//! A keep-alive client that never retries (like `wrk`) then loses no request across a rolling
//! restart: it is never closed under a request it has sent, only told to reconnect.
//!
//! The shutdown itself is a [`channel`]: the [`Trigger`] side fires (on SIGTERM, after telling
//! ck `STOPPING=1`), every clone of the [`Close`] side sees it.
use std::{future::Future, io, pin::Pin, time::Duration};

use anyhow::Context as _;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    time::{Instant, timeout, timeout_at},
};

/// After shutdown, a listener is closed once it has had no connection to accept for this long.
pub const CLOSE_QUIET: Duration = Duration::from_millis(10);
/// After shutdown, how long a connection may take to finish its request (or, when accepted
/// during the close, to send its first one) before it is dropped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// After shutdown, a keep-alive connection between requests is closed once it has been idle
/// this long; a request that comes sooner is answered (with `Connection: close`) first. A
/// client that keeps its connection busy never sees it closed under a request in flight.
pub const IDLE_GRACE: Duration = Duration::from_millis(500);

/// A shutdown signal: the [`Trigger`] that fires it and a [`Close`] that sees it (clone it
/// for every task that must).
pub fn channel() -> (Trigger, Close) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Close(rx))
}

/// The side of a [`channel`] that requests the shutdown. Dropping it requests it too, so a
/// server whose signal handler is gone does not serve forever.
#[derive(Debug)]
pub struct Trigger(watch::Sender<bool>);

impl Trigger {
    /// Requests the shutdown: every [`Close`] of this channel starts closing.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }
}

/// The side of a [`channel`] that sees the shutdown; cheap to clone.
#[derive(Debug, Clone)]
pub struct Close(watch::Receiver<bool>);

impl Close {
    /// Whether shutdown was requested (or the [`Trigger`] dropped, which means the same).
    pub fn is_requested(&self) -> bool {
        self.0.has_changed().is_err() || *self.0.borrow()
    }

    /// Resolves once shutdown is requested (at once if it already was).
    pub async fn requested(&mut self) {
        // An error means the trigger is gone: shutdown too.
        let _ = self.0.wait_for(|&stop| stop).await;
    }

    /// Accepts connections on `listener`, handing each to `handle`, until shutdown; then
    /// goes on accepting what is still queued or in flight until the listener has been quiet
    /// for [`CLOSE_QUIET`], and closes it. Errors about one connection (it was aborted) are
    /// skipped; shortage of descriptors or memory is reported on stderr and retried after
    /// 100 ms (closing connections frees them).
    ///
    /// # Errors
    /// When accepting fails in a way retrying cannot fix (e.g. the socket is not listening).
    pub async fn accept_until_closed(
        &self,
        listener: TcpListener,
        mut handle: impl FnMut(TcpStream),
    ) -> anyhow::Result<()> {
        let addr = listener
            .local_addr()
            .map_or_else(|_| "a listener".to_string(), |a| a.to_string());
        let mut shutdown = self.clone();
        while !shutdown.is_requested() {
            let accepted = tokio::select! {
                accepted = listener.accept() => Some(accepted),
                () = shutdown.requested() => None,
            };
            match accepted {
                Some(Ok((stream, _))) => handle(stream),
                Some(Err(err)) => accept_failed(err, &addr).await?,
                None => {}
            }
        }
        // New connections are no longer steered here, but some may be queued or in flight.
        while let Ok(accepted) = timeout(CLOSE_QUIET, listener.accept()).await {
            match accepted {
                Ok((stream, _)) => handle(stream),
                Err(err) => accept_failed(err, &addr).await?,
            }
        }
        Ok(())
    }

    /// Drives `conn`, one connection of an HTTP library, through the close: until shutdown it
    /// just runs; after it, the connection has [`IDLE_GRACE`] to go on as it is (the server
    /// should answer with `Connection: close` meanwhile, see [`Close::is_requested`]), then
    /// `close_when_idle` is called on it (hyper's `graceful_shutdown`: close it if idle, else
    /// after the response in flight), and it is dropped if it has not finished
    /// [`SHUTDOWN_GRACE`] later. Returns its output, or `None` when it was dropped.
    pub async fn connection<F: Future>(
        &self,
        conn: F,
        close_when_idle: impl FnOnce(Pin<&mut F>),
    ) -> Option<F::Output> {
        let mut shutdown = self.clone();
        tokio::pin!(conn);
        tokio::select! {
            output = conn.as_mut() => return Some(output),
            () = shutdown.requested() => {}
        }
        if let Ok(output) = timeout(IDLE_GRACE, conn.as_mut()).await {
            return Some(output);
        }
        close_when_idle(conn.as_mut());
        timeout(SHUTDOWN_GRACE, conn).await.ok()
    }
}

/// Decides whether an accept error is worth retrying (it is about one connection, or about
/// resources that closing connections will free) or ends the accept loop.
async fn accept_failed(err: io::Error, addr: &str) -> anyhow::Result<()> {
    match err.raw_os_error() {
        Some(
            libc::ECONNABORTED
            | libc::EPROTO
            | libc::EPERM
            | libc::EINTR
            | libc::ENETDOWN
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::EHOSTUNREACH
            | libc::ENONET
            | libc::ENOPROTOOPT
            | libc::EOPNOTSUPP,
        ) => Ok(()),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            crate::say(format_args!(
                "ck-worker: accepting on {addr}: {err}; retrying in 100ms"
            ));
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok(())
        }
        _ => Err(err).with_context(|| format!("accepting connections on {addr}")),
    }
}

/// The close of one connection served by a hand-written protocol loop: once shutdown is
/// seen, the connection has [`SHUTDOWN_GRACE`] to finish, and the loop should answer its next
/// request with `Connection: close` ([`ConnectionClose::deadline`] tells it whether).
#[derive(Debug)]
pub struct ConnectionClose {
    close: Close,
    /// Set once shutdown is seen: when the connection must be finished.
    deadline: Option<Instant>,
}

impl ConnectionClose {
    /// The close of a connection accepted now.
    pub fn new(close: Close) -> ConnectionClose {
        ConnectionClose {
            close,
            deadline: None,
        }
    }

    /// The connection's deadline if shutdown has been requested, starting the grace period
    /// the first time it is seen; `None` while the server runs normally.
    pub fn deadline(&mut self) -> Option<Instant> {
        if self.deadline.is_none() && self.close.is_requested() {
            self.deadline = Some(Instant::now() + SHUTDOWN_GRACE);
        }
        self.deadline
    }

    /// Resolves once shutdown is requested (at once if it already was).
    pub async fn requested(&mut self) {
        self.close.requested().await;
    }

    /// Runs an I/O operation to completion; once shutdown is requested (before or during it),
    /// it must complete by the connection's deadline or fails with `TimedOut`.
    ///
    /// # Errors
    /// The operation's own, or `TimedOut` when the grace period ends first.
    pub async fn guard<T>(
        &mut self,
        operation: impl Future<Output = io::Result<T>>,
    ) -> io::Result<T> {
        tokio::pin!(operation);
        loop {
            if let Some(deadline) = self.deadline() {
                return timeout_at(deadline, operation).await.map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "shutdown grace period over")
                })?;
            }
            tokio::select! {
                result = &mut operation => return result,
                () = self.close.requested() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trigger_reaches_every_clone_and_dropping_it_counts() {
        let (trigger, mut close) = channel();
        let other = close.clone();
        assert!(!close.is_requested() && !other.is_requested());
        trigger.trigger();
        assert!(close.is_requested() && other.is_requested());
        close.requested().await;
        let (trigger, mut close) = channel();
        drop(trigger);
        assert!(close.is_requested());
        close.requested().await;
    }

    #[tokio::test(start_paused = true)]
    async fn connection_runs_then_gets_idle_grace_then_close_then_is_dropped() {
        // Finishes by itself before shutdown.
        let (_trigger, close) = channel();
        let out = close
            .connection(async { 7 }, |_| panic!("not closed"))
            .await;
        assert_eq!(out, Some(7));

        // Busy through the idle grace, closed, then given SHUTDOWN_GRACE: dropped after it.
        let (trigger, close) = channel();
        trigger.trigger();
        let start = Instant::now();
        let closed = std::cell::Cell::new(None);
        let out = close
            .connection(std::future::pending::<()>(), |_| {
                closed.set(Some(start.elapsed()));
            })
            .await;
        assert_eq!(out, None);
        assert_eq!(closed.get(), Some(IDLE_GRACE));
        assert_eq!(start.elapsed(), IDLE_GRACE + SHUTDOWN_GRACE);
    }

    #[tokio::test(start_paused = true)]
    async fn guard_times_out_only_after_shutdown() {
        let (trigger, close) = channel();
        let mut conn = ConnectionClose::new(close);
        assert_eq!(conn.deadline(), None);
        let quick = conn.guard(async { Ok(1) }).await.unwrap();
        assert_eq!(quick, 1);
        trigger.trigger();
        let start = Instant::now();
        let deadline = conn.deadline().expect("shutdown seen");
        assert_eq!(deadline, start + SHUTDOWN_GRACE);
        let err = conn
            .guard(std::future::pending::<io::Result<()>>())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(Instant::now(), deadline);
    }

    #[tokio::test]
    async fn accepts_what_is_queued_then_closes_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Queued before shutdown; nobody has accepted them yet.
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let (trigger, close) = channel();
        trigger.trigger();
        let mut accepted = 0;
        close
            .accept_until_closed(listener, |_| accepted += 1)
            .await
            .unwrap();
        assert_eq!(accepted, 2);
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "listener still open"
        );
    }
}
