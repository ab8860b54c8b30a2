//! The demo worker's server core: an accept loop per listener, a task per connection speaking
//! HTTP/1.x with keep-alive and pipelining, and the graceful close on shutdown, which accepts
//! the connections already queued on the listeners and finishes requests in flight.
use std::{io, sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    task::JoinSet,
    time::{Instant, timeout_at},
};

use super::{
    faults::{self, Faults},
    http::{self, ParseError, Persistence, Request},
};
use crate::close::{Close, ConnectionClose, IDLE_GRACE};

/// How long a closing connection reads and discards what the client still sends, so that
/// unread data does not turn our close into a reset that destroys the last response.
const LINGER: Duration = Duration::from_millis(500);
/// Size of each read from a connection.
const READ_CHUNK: usize = 8 * 1024;

/// Who answers: `GET /` returns `slot=<slot> pid=<pid>\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The worker's slot in its fleet (`CK_SLOT`).
    pub slot: String,
    /// The worker's process id.
    pub pid: u32,
}

impl Identity {
    /// This process: slot from `CK_SLOT` (default `0`) and its pid.
    pub fn from_env() -> Identity {
        Identity {
            slot: std::env::var("CK_SLOT").unwrap_or_else(|_| "0".to_string()),
            pid: std::process::id(),
        }
    }

    /// The body of `GET /`.
    pub fn body(&self) -> String {
        format!("slot={} pid={}\n", self.slot, self.pid)
    }
}

/// Serves HTTP on `listeners` until shutdown is requested on `close`, then closes gracefully (see
/// [`crate::close`]): each listener keeps accepting until it has been quiet for
/// [`CLOSE_QUIET`](crate::close::CLOSE_QUIET) and is closed; each connection's next request is
/// answered with `Connection: close` and the connection closed after it; a connection with no
/// request for [`IDLE_GRACE`] is closed. Returns when every connection is done.
///
/// `faults` makes it misbehave on purpose: a stall blocks the calling thread (so it should be
/// a current-thread runtime's, as in [`super::run`]) and goes on until `serve` returns.
///
/// # Errors
/// When a listener fails in a way that retrying cannot fix (e.g. it is not listening).
pub async fn serve(
    listeners: Vec<TcpListener>,
    identity: Identity,
    faults: Faults,
    close: Close,
) -> anyhow::Result<()> {
    // Dropping the set when `serve` returns ends the stalls.
    let mut stalls = JoinSet::new();
    stalls.spawn(faults::stall_loop(faults));
    let pacer = faults::Pacer::new(&faults);
    let server = Arc::new(Server {
        identity,
        faults,
        pacer,
    });
    // Every connection task holds a sender; `recv` returns `None` once they are all gone.
    let (done_tx, mut done_rx) = mpsc::channel::<()>(1);
    let mut accept_loops = JoinSet::new();
    for listener in listeners {
        let (server, close, done) = (server.clone(), close.clone(), done_tx.clone());
        accept_loops.spawn(async move {
            close
                .accept_until_closed(listener, |stream| {
                    spawn_connection(stream, &server, &close, &done);
                })
                .await
        });
    }
    drop(done_tx);
    while let Some(result) = accept_loops.join_next().await {
        result.context("an accept loop panicked")??;
    }
    done_rx.recv().await;
    Ok(())
}

/// What every connection of a server shares.
struct Server {
    identity: Identity,
    faults: Faults,
    /// `--capacity`: requests to `/` queue for it.
    pacer: Option<faults::Pacer>,
}

/// Starts the task serving `stream`; it holds a clone of `done` until it finishes.
fn spawn_connection(
    stream: TcpStream,
    server: &Arc<Server>,
    close: &Close,
    done: &mpsc::Sender<()>,
) {
    let (server, close, done) = (server.clone(), close.clone(), done.clone());
    tokio::spawn(async move {
        // Errors (resets, timeouts) end only this connection; there is no one to tell.
        let _ = Connection::new(stream, close).run(&server).await;
        drop(done);
    });
}

/// One client connection.
struct Connection {
    stream: TcpStream,
    /// Received bytes not yet consumed: a partial head, or pipelined requests.
    buf: Vec<u8>,
    chunk: Box<[u8]>,
    /// Shutdown, and the connection's deadline once it is seen.
    close: ConnectionClose,
    /// When the last response was written (or the connection accepted).
    last_active: Instant,
}

/// What reading more from the client gave.
enum Read {
    Data,
    Eof,
    /// Shutdown arrived while the connection was idle between requests.
    Shutdown,
}

impl Connection {
    fn new(stream: TcpStream, close: Close) -> Connection {
        // Responses are written whole; do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        Connection {
            stream,
            buf: Vec::new(),
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
            close: ConnectionClose::new(close),
            last_active: Instant::now(),
        }
    }

    /// Serves requests until the client or we close the connection.
    async fn run(mut self, server: &Server) -> io::Result<()> {
        let mut served = 0u64;
        loop {
            let (request, head_len) = loop {
                match http::parse_head(&self.buf) {
                    Ok(Some(found)) => break found,
                    Ok(None) => {}
                    Err(err) => return self.reject(err).await,
                }
                // Between requests (not before the first one: a client accepted during the
                // close has not had time to send it yet).
                let idle = served > 0 && self.buf.is_empty();
                match self.read_more(idle).await? {
                    Read::Data => {}
                    Read::Eof | Read::Shutdown => return Ok(()),
                }
            };
            self.buf.drain(..head_len);
            if request.expect_continue && request.content_length > 0 {
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
            }
            if !self.discard_body(request.content_length).await? {
                return Ok(());
            }
            if request.path() == "/" {
                faults::leak(&server.faults);
                if server.faults.reset {
                    // Dropped with SO_LINGER 0: the kernel answers with a reset.
                    let abort = nix::libc::linger {
                        l_onoff: 1,
                        l_linger: 0,
                    };
                    let _ = nix::sys::socket::setsockopt(
                        &self.stream,
                        nix::sys::socket::sockopt::Linger,
                        &abort,
                    );
                    return Ok(());
                }
            }
            let slow = server.faults.slow;
            if request.path() == "/" && !slow.is_zero() {
                let wait = async {
                    tokio::time::sleep(slow).await;
                    Ok(())
                };
                self.close.guard(wait).await?;
            }
            if let Some(pacer) = server.pacer.as_ref().filter(|_| request.path() == "/") {
                let done = pacer.done_at();
                let wait = async {
                    tokio::time::sleep_until(done).await;
                    Ok(())
                };
                self.close.guard(wait).await?;
            }
            let keep_alive = request.keep_alive && self.close.deadline().is_none();
            let mut out = Vec::new();
            let healthy = server.faults.healthy();
            respond(&mut out, &request, &server.identity, healthy, keep_alive);
            self.write(&out).await?;
            self.last_active = Instant::now();
            served += 1;
            if !keep_alive {
                self.linger_close().await;
                return Ok(());
            }
        }
    }

    /// Answers a request that cannot be parsed, and closes.
    async fn reject(mut self, err: ParseError) -> io::Result<()> {
        let (code, reason) = err.status();
        let body = match err {
            ParseError::BadRequest(why) => format!("bad request: {why}\n"),
            _ => format!("{}\n", reason.to_ascii_lowercase()),
        };
        let mut out = Vec::new();
        let status = (code, reason);
        http::write_response(
            &mut out,
            status,
            body.as_bytes(),
            false,
            Persistence::Close,
            "",
        );
        self.write(&out).await?;
        self.linger_close().await;
        Ok(())
    }

    /// Reads more bytes into `buf`. An `idle` connection (between requests, nothing buffered)
    /// gives up with [`Read::Shutdown`] once shutdown is requested and it has had no request
    /// for [`IDLE_GRACE`]: a client that sends its next request sooner gets it answered.
    async fn read_more(&mut self, idle: bool) -> io::Result<Read> {
        let n = if idle {
            loop {
                if self.close.deadline().is_some() {
                    let until = self.last_active + IDLE_GRACE;
                    match timeout_at(until, self.stream.read(&mut self.chunk)).await {
                        Ok(read) => break read?,
                        Err(_) => return Ok(Read::Shutdown),
                    }
                }
                tokio::select! {
                    read = self.stream.read(&mut self.chunk) => break read?,
                    () = self.close.requested() => {}
                }
            }
        } else {
            let read = self.stream.read(&mut self.chunk);
            self.close.guard(read).await?
        };
        if n == 0 {
            return Ok(Read::Eof);
        }
        self.buf.extend_from_slice(&self.chunk[..n]);
        Ok(Read::Data)
    }

    /// Consumes a body of `len` bytes; `false` if the client closed before sending it all.
    async fn discard_body(&mut self, mut len: u64) -> io::Result<bool> {
        loop {
            let take = usize::try_from(len).map_or(self.buf.len(), |l| l.min(self.buf.len()));
            self.buf.drain(..take);
            len -= take as u64;
            if len == 0 {
                return Ok(true);
            }
            if let Read::Eof = self.read_more(false).await? {
                return Ok(false);
            }
        }
    }

    async fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let write = self.stream.write_all(data);
        self.close.guard(write).await
    }

    /// Closes our side, then discards what the client still sends for a moment (or until it
    /// closes), so our last response is not destroyed by a reset.
    async fn linger_close(&mut self) {
        if self.stream.shutdown().await.is_err() {
            return;
        }
        let until = Instant::now() + LINGER;
        let mut discarded = 0;
        while discarded < 1 << 20 {
            match timeout_at(until, self.stream.read(&mut self.chunk)).await {
                Ok(Ok(n)) if n > 0 => discarded += n,
                _ => break,
            }
        }
    }
}

/// Appends the response to `request`: `/` and `/healthz` (503 unless `healthy`) for GET and
/// HEAD, else 404/405.
fn respond(
    out: &mut Vec<u8>,
    request: &Request,
    identity: &Identity,
    healthy: bool,
    keep_alive: bool,
) {
    let persistence = match (keep_alive, request.minor) {
        (false, _) => Persistence::Close,
        (true, 0) => Persistence::KeepAliveExplicit,
        (true, _) => Persistence::KeepAliveDefault,
    };
    let method = request.method.as_str();
    let readable = matches!(method, "GET" | "HEAD");
    let (status, body, extra) = match request.path() {
        "/" if readable => ((200, "OK"), identity.body(), ""),
        "/healthz" if readable && healthy => ((200, "OK"), "ok\n".to_string(), ""),
        "/healthz" if readable => ((503, "Service Unavailable"), "unhealthy\n".to_string(), ""),
        "/" | "/healthz" => (
            (405, "Method Not Allowed"),
            "method not allowed\n".to_string(),
            "Allow: GET, HEAD\r\n",
        ),
        _ => ((404, "Not Found"), "not found\n".to_string(), ""),
    };
    let head_only = method == "HEAD";
    http::write_response(out, status, body.as_bytes(), head_only, persistence, extra);
}
