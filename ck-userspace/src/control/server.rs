//! The server side of the control socket: accepts connections, checks the peer's uid, and hands
//! each request to the supervisor's event loop, writing back its answer.
//!
//! A client is untrusted input even when it is root's: one that sends nothing, a request without
//! an end, bytes that are not JSON, or a thousand connections at once costs ck a bounded amount
//! (see [`limits`]) and gets an answer or a close with the reason, while every other client and
//! the workers are served as usual.
use std::{
    os::unix::fs::PermissionsExt as _,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{
        UnixListener, UnixStream,
        unix::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{Request, Response};

/// What one client may cost.
pub mod limits {
    use std::time::Duration;

    /// Longest request line, newline included.
    pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
    /// Connections served at once; one more is answered "busy" and closed.
    pub const MAX_CLIENTS: usize = 4096;
    /// Above this many open connections, or while `accept` fails (out of file descriptors), a
    /// client is given [`CROWDED_IDLE`] (not [`IDLE`]) to send its request, so idle connections
    /// cannot crowd out the clients that talk.
    pub const CROWDED: usize = 64;
    /// Time a client has to send a whole request line.
    pub const IDLE: Duration = Duration::from_secs(10);
    /// That time while more than [`CROWDED`] connections are open (ck's own commands send their
    /// request as soon as they connect).
    pub const CROWDED_IDLE: Duration = Duration::from_millis(200);
    /// First pause after a failed `accept` (doubling up to [`ACCEPT_PAUSE_MAX`]): a persistent
    /// error such as EMFILE must not spin the loop.
    pub const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
    /// Longest pause after failed `accept`s.
    pub const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
}

/// A request with the channel its answer goes back on.
pub type ControlCall = (Request, oneshot::Sender<Response>);

/// The running control server.
pub struct ControlServer {
    accept: tokio::task::JoinHandle<()>,
    /// Every request being answered holds a clone; `flush` waits until none is left.
    busy: mpsc::Sender<()>,
    idle: mpsc::Receiver<()>,
    /// A copy of the listening socket, handed to the new image by `ck upgrade`: clients that
    /// connect while ck re-executes wait in its backlog.
    listener: std::os::fd::OwnedFd,
}

impl ControlServer {
    /// The listening socket (a copy), for `ck upgrade` to hand over.
    pub fn listener(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        self.listener.as_fd()
    }

    /// Stops accepting, then waits (at most `within`) until every answer already given has
    /// been written to its client, so that no client sees its connection closed unanswered.
    pub async fn flush(self, within: Duration) {
        self.accept.abort();
        drop(self.busy);
        let mut idle = self.idle;
        let _ = tokio::time::timeout(within, idle.recv()).await;
    }
}

/// Binds the control socket at `path` (mode 0600) and serves it until [`ControlServer::flush`].
/// The caller holds the instance lock, so an existing file there is a leftover and is replaced.
pub fn start(
    path: &Path,
    calls: mpsc::UnboundedSender<ControlCall>,
) -> anyhow::Result<ControlServer> {
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    serve_listener(listener, calls)
}

/// Serves `listener` (bound by [`start`], or inherited from the image `ck upgrade` replaced)
/// until [`ControlServer::flush`].
pub fn serve_listener(
    listener: std::os::unix::net::UnixListener,
    calls: mpsc::UnboundedSender<ControlCall>,
) -> anyhow::Result<ControlServer> {
    listener
        .set_nonblocking(true)
        .context("control socket: non-blocking")?;
    let copy = std::os::fd::OwnedFd::from(listener.try_clone().context("control socket: dup")?);
    let listener = UnixListener::from_std(listener).context("control socket: registering")?;
    let (busy, idle) = mpsc::channel(1);
    let accept = tokio::spawn(accept_loop(listener, calls, busy.downgrade()));
    Ok(ControlServer {
        accept,
        busy,
        idle,
        listener: copy,
    })
}

/// Accepts clients until aborted, one task each.
async fn accept_loop(
    listener: UnixListener,
    calls: mpsc::UnboundedSender<ControlCall>,
    busy: mpsc::WeakSender<()>,
) {
    let load = Arc::new(Load::default());
    let mut pause = limits::ACCEPT_PAUSE;
    let mut failures = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                if failures > 0 {
                    tracing::info!(failures, "control socket: accept works again");
                }
                failures = 0;
                pause = limits::ACCEPT_PAUSE;
                load.starved.store(false, Ordering::Relaxed);
                stream
            }
            Err(e) => {
                load.starved.store(true, Ordering::Relaxed);
                if failures == 0 {
                    tracing::warn!(
                        error = %e,
                        "control socket: accept failed; retrying after a pause that doubles up to {:?}, \
                         and giving silent clients less time",
                        limits::ACCEPT_PAUSE_MAX
                    );
                }
                failures += 1;
                // EMFILE, ENFILE, ENOBUFS...: the error stays until something is released, so
                // wait instead of retrying at once.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(limits::ACCEPT_PAUSE_MAX);
                continue;
            }
        };
        if load.open.load(Ordering::Relaxed) >= limits::MAX_CLIENTS {
            refuse(
                &stream,
                "busy: too many control connections are open; try again",
            );
            continue;
        }
        let guard = OpenClient::new(&load);
        tokio::spawn(serve(stream, calls.clone(), busy.clone(), guard));
    }
}

/// How loaded the server is, shared by the accept loop and the clients.
#[derive(Default)]
struct Load {
    /// Clients open.
    open: AtomicUsize,
    /// Whether the last `accept` failed (out of file descriptors, most likely).
    starved: AtomicBool,
}

/// Counts an open client while it lives.
struct OpenClient(Arc<Load>);

impl OpenClient {
    fn new(load: &Arc<Load>) -> OpenClient {
        load.open.fetch_add(1, Ordering::Relaxed);
        OpenClient(load.clone())
    }

    /// Time this client has to send its request, given the load now.
    fn idle_limit(&self) -> Duration {
        let crowded = self.0.open.load(Ordering::Relaxed) > limits::CROWDED;
        if crowded || self.0.starved.load(Ordering::Relaxed) {
            limits::CROWDED_IDLE
        } else {
            limits::IDLE
        }
    }
}

impl Drop for OpenClient {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Writes `why` as an error answer if it fits in the socket buffer now, then drops the stream.
fn refuse(stream: &UnixStream, why: &str) {
    tracing::debug!("control socket: closing a client: {why}");
    if let Ok(text) = answer_line(&Response::Error(why.to_string())) {
        let _ = stream.try_write(text.as_bytes());
    }
}

fn answer_line(response: &Response) -> serde_json::Result<String> {
    let mut text = serde_json::to_string(response)?;
    text.push('\n');
    Ok(text)
}

/// What reading one request gave.
enum Read {
    /// A request line (possibly without its newline, at the end of the stream).
    Line,
    /// The client closed the connection between requests.
    Closed,
    /// Longer than [`limits::MAX_REQUEST_BYTES`] without a newline.
    TooLong,
    /// No whole request within the idle limit.
    TimedOut(Duration),
}

/// Reads one request line into `line`, bounded in size and time. The time allowed shrinks while
/// the server is crowded, also for a client that was already waiting.
async fn read_request(
    reader: &mut BufReader<OwnedReadHalf>,
    line: &mut Vec<u8>,
    client: &OpenClient,
) -> Read {
    const SLICE: Duration = Duration::from_millis(100);
    let started = Instant::now();
    loop {
        let allowed = client.idle_limit();
        let left = allowed.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Read::TimedOut(allowed);
        }
        // `fill_buf` consumes nothing, so a timed-out wait loses no byte.
        let data = match tokio::time::timeout(left.min(SLICE), reader.fill_buf()).await {
            Err(_) => continue,
            Ok(Err(_)) => return Read::Closed,
            Ok(Ok(data)) => data,
        };
        if data.is_empty() {
            return if line.is_empty() {
                Read::Closed
            } else {
                Read::Line
            };
        }
        let (used, done) = match data.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (data.len(), false),
        };
        line.extend_from_slice(&data[..used]);
        reader.consume(used);
        if line.len() > limits::MAX_REQUEST_BYTES {
            return Read::TooLong;
        }
        if done {
            return Read::Line;
        }
    }
}

/// Why a client with credentials `peer` (`SO_PEERCRED`, taken when it connected) may not
/// control ck, or `None` when it may: root and ck's own user may. The socket's mode (0600,
/// ck's user) already keeps others from connecting; this is the second layer, for a socket
/// whose mode or directory was opened up. A refusal is logged as a warning.
fn refusal(peer: Option<tokio::net::unix::UCred>) -> Option<String> {
    let ck_uid = nix::unistd::geteuid().as_raw();
    let why = match peer {
        Some(cred) if cred.uid() == 0 || cred.uid() == ck_uid => return None,
        Some(cred) => {
            tracing::warn!(
                uid = cred.uid(),
                pid = ?cred.pid(),
                "control socket: refusing a client that is neither root nor ck's user (uid {ck_uid})"
            );
            format!(
                "permission denied: uid {} may not control this ck, which only root and its own \
                 user (uid {ck_uid}) may: run the command as one of them (e.g. with sudo)",
                cred.uid()
            )
        }
        None => {
            tracing::warn!(
                "control socket: refusing a client whose credentials the kernel did not give"
            );
            "permission denied: the kernel did not give this client's credentials".to_string()
        }
    };
    Some(why)
}

/// Serves one client: requests and answers, one line each, until it closes or misbehaves.
async fn serve(
    stream: UnixStream,
    calls: mpsc::UnboundedSender<ControlCall>,
    busy: mpsc::WeakSender<()>,
    client: OpenClient,
) {
    let refusal = refusal(stream.peer_cred().ok());
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let last_words = match read_request(&mut reader, &mut line, &client).await {
            Read::Line => None,
            Read::Closed => return,
            Read::TooLong => Some(format!(
                "request too long (over {} bytes without a newline): send one JSON request per line",
                limits::MAX_REQUEST_BYTES
            )),
            Read::TimedOut(after) => Some(format!(
                "no request within {after:?}: send one JSON request per line right after connecting"
            )),
        };
        if let Some(why) = last_words {
            tracing::debug!("control socket: closing a client: {why}");
            let _ = reply(&mut write, &Response::Error(why)).await;
            return;
        }
        // Held until the answer is written (see `ControlServer::flush`).
        let Some(_answering) = busy.upgrade() else {
            return;
        };
        let response = if let Some(why) = &refusal {
            Response::Error(why.clone())
        } else {
            match serde_json::from_slice::<Request>(&line) {
                Ok(req) => {
                    let (tx, rx) = oneshot::channel();
                    if calls.send((req, tx)).is_err() {
                        return;
                    }
                    match rx.await {
                        Ok(r) => r,
                        Err(_) => Response::Error("ck is shutting down".into()),
                    }
                }
                Err(e) => Response::Error(format!(
                    "malformed request: {e}; send one JSON request per line (what `ck` itself sends)"
                )),
            }
        };
        if reply(&mut write, &response).await.is_err() {
            return;
        }
    }
}

/// Writes one answer line, giving up on a client that does not read it within
/// [`limits::IDLE`].
async fn reply(write: &mut OwnedWriteHalf, response: &Response) -> std::io::Result<()> {
    let text = answer_line(response).map_err(std::io::Error::other)?;
    tokio::time::timeout(limits::IDLE, write.write_all(text.as_bytes()))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}
