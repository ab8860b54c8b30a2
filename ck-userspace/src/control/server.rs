//! The server side of the control socket: accepts connections, checks the peer's uid, and hands
//! each request to the supervisor's event loop, writing back its answer.
use std::{os::unix::fs::PermissionsExt as _, path::Path};

use anyhow::Context as _;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader},
    net::{UnixListener, UnixStream},
    sync::{mpsc, oneshot},
};

use super::{Request, Response};

/// A request with the channel its answer goes back on.
pub type ControlCall = (Request, oneshot::Sender<Response>);

/// The running control server.
pub struct ControlServer {
    accept: tokio::task::JoinHandle<()>,
    /// Every request being answered holds a clone; `flush` waits until none is left.
    busy: mpsc::Sender<()>,
    idle: mpsc::Receiver<()>,
}

impl ControlServer {
    /// Stops accepting, then waits (at most `within`) until every answer already given has
    /// been written to its client, so that no client sees its connection closed unanswered.
    pub async fn flush(self, within: std::time::Duration) {
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
    let listener = UnixListener::bind(path)
        .with_context(|| format!("binding the control socket {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    let (busy, idle) = mpsc::channel(1);
    let busy_for_clients = busy.downgrade();
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(serve(stream, calls.clone(), busy_for_clients.clone()));
        }
    });
    Ok(ControlServer { accept, busy, idle })
}

async fn serve(
    stream: UnixStream,
    calls: mpsc::UnboundedSender<ControlCall>,
    busy: mpsc::WeakSender<()>,
) {
    let allowed = match stream.peer_cred() {
        Ok(cred) => cred.uid() == 0 || cred.uid() == nix::unistd::geteuid().as_raw(),
        Err(_) => false,
    };
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // Held until the answer is written (see `ControlServer::flush`).
        let Some(_answering) = busy.upgrade() else {
            return;
        };
        let response = if !allowed {
            Response::Error("permission denied: only root or ck's own user may control it".into())
        } else {
            match serde_json::from_str::<Request>(&line) {
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
                Err(e) => Response::Error(format!("malformed request: {e}")),
            }
        };
        let Ok(mut text) = serde_json::to_string(&response) else {
            return;
        };
        text.push('\n');
        if write.write_all(text.as_bytes()).await.is_err() {
            return;
        }
    }
}
