//! An HTTP/3 server for `ck run --listen udp://... --udp-mode quic`, and the client the tests and
//! `cargo xtask bench quic` load it with.
//!
//! `ck-example-quic serve`: takes its UDP socket from ck (`LISTEN_FDS`, the first datagram
//! socket; else binds `0.0.0.0:$PORT`), chooses connection IDs that carry its cookie
//! (`CK_QUIC_SERVER_ID`, through `ck_worker::quic::CookieCids`), says `READY=1`, and answers
//! every request with `slot=S pid=P`. On SIGTERM it says `STOPPING=1`, sends each connection
//! GOAWAY, takes the handshakes that were already on their way (and moves them on with GOAWAY)
//! until none came for 100 ms, finishes the requests in flight and exits once its connections
//! are closed (ck keeps steering their packets to it meanwhile).
//!
//! `ck-example-quic client ADDR --connections N ...`: N clients, each on a UDP socket of its
//! own, each sending a request every `--interval-ms` on a connection it replaces every
//! `--lifetime-ms`, for `--duration-ms`; optionally moving to a new local port every
//! `--rebind-ms` (client migration), or with a ClientHello padded to span several datagrams
//! (`--hello-bytes`); SIGTERM ends it early. Prints one JSON line per client: requests answered, the
//! workers that answered, connections moved on by the server (GOAWAY) and broken ones (a
//! request that failed, a handshake that failed, a connection that ended with an error the
//! client did not ask for).
use std::{
    net::{SocketAddr, UdpSocket},
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use bytes::Buf as _;
use ck_worker::{activation, quic::CookieCids};

mod client;
mod tls;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => serve(),
        Some("client") => client::run(&args[1..]),
        _ => bail!("usage: ck-example-quic serve | client ADDR [--connections N] ..."),
    }
}

/// The UDP socket ck handed over, else one bound on `$PORT`.
fn socket() -> anyhow::Result<UdpSocket> {
    use std::os::fd::AsFd as _;
    let fds = match activation::listen_fds() {
        Err(activation::ActivationError::NotActivated) => Vec::new(),
        other => other?,
    };
    for (_, fd) in fds {
        let datagram =
            nix::sys::socket::getsockopt(&fd.as_fd(), nix::sys::socket::sockopt::SockType)
                .is_ok_and(|t| t == nix::sys::socket::SockType::Datagram);
        if datagram {
            return Ok(UdpSocket::from(fd));
        }
    }
    let port: u16 = std::env::var("PORT")
        .context("no UDP socket from ck (LISTEN_FDS) and no PORT")?
        .parse()
        .context("PORT is not a port")?;
    Ok(UdpSocket::bind(("0.0.0.0", port))?)
}

fn serve() -> anyhow::Result<()> {
    let socket = socket()?;
    let notifier = activation::Notifier::from_env().context("NOTIFY_SOCKET")?;
    let identity = format!(
        "slot={} pid={}\n",
        std::env::var("CK_SLOT").unwrap_or_else(|_| "0".into()),
        std::process::id()
    );
    let mut config = quinn::EndpointConfig::default();
    if let Some(cids) = CookieCids::from_env()? {
        config.cid_generator(move || Box::new(cids.clone()));
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let endpoint = quinn::Endpoint::new(
            config,
            Some(tls::server_config()?),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?;
        let _ = notifier.notify("READY=1");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let spawn = |incoming: quinn::Incoming| {
            let (identity, stopped) = (identity.clone(), stopped.clone());
            tokio::spawn(async move {
                if let Err(e) = answer(incoming, identity, stopped).await {
                    eprintln!("connection: {e:#}");
                }
            });
        };
        loop {
            tokio::select! {
                incoming = endpoint.accept() => match incoming {
                    Some(incoming) => spawn(incoming),
                    None => break,
                },
                _ = sigterm.recv() => break,
            }
        }
        let _ = notifier.notify("STOPPING=1");
        let _ = stop.send(true);
        // ck sends new handshakes elsewhere before it signals; those it sent here before are
        // still taken (and moved on with GOAWAY at once) until none came for a moment.
        while let Ok(Some(incoming)) = tokio::time::timeout(ACCEPT_QUIET, endpoint.accept()).await {
            spawn(incoming);
        }
        endpoint.set_server_config(None);
        let _ = tokio::time::timeout(Duration::from_secs(8), endpoint.wait_idle()).await;
        anyhow::Ok(())
    })
}

/// Serves one connection: every request answered with `identity`; on `stopped`, GOAWAY, then
/// the requests already sent are finished.
async fn answer(
    incoming: quinn::Incoming,
    identity: String,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let connection = incoming.await?;
    let mut h3 = h3::server::builder()
        .build::<_, bytes::Bytes>(h3_quinn::Connection::new(connection))
        .await?;
    // A handshake taken after SIGTERM is moved on at once.
    let mut going_away = *stopped.borrow_and_update();
    if going_away {
        h3.shutdown(0).await?;
    }
    // Requests in flight: the connection is kept until each has its answer.
    let mut requests = tokio::task::JoinSet::new();
    let ended = loop {
        tokio::select! {
            request = h3.accept() => match request {
                Ok(Some(resolver)) => {
                    let identity = identity.clone();
                    requests.spawn(async move {
                        let (_, mut stream) = match resolver.resolve_request().await {
                            Ok(request) => request,
                            Err(e) => return eprintln!("a request not read: {e}"),
                        };
                        // The request read to its end (the client's FIN): a stream dropped
                        // before that asks the client to stop sending (STOP_SENDING 0), which
                        // fails a client whose FIN comes after the answer.
                        while let Ok(Some(_)) = stream.recv_data().await {}
                        let response = http::Response::builder().status(200).body(()).expect("a response");
                        if let Err(e) = stream.send_response(response).await {
                            return eprintln!("a response not sent: {e}");
                        }
                        if let Err(e) = stream.send_data(bytes::Bytes::from(identity)).await {
                            return eprintln!("a response body not sent: {e}");
                        }
                        if let Err(e) = stream.finish().await {
                            eprintln!("a response not finished: {e}");
                        }
                    });
                }
                Ok(None) => break Ok(()),
                Err(e) if e.is_h3_no_error() => break Ok(()),
                Err(e) => break Err(e.into()),
            },
            changed = stopped.changed(), if !going_away => {
                if changed.is_ok() && !*stopped.borrow() {
                    continue;
                }
                going_away = true;
                h3.shutdown(0).await?;
            }
        }
    };
    while requests.join_next().await.is_some() {}
    ended
}

/// The body of an answer: the `pid=` it names.
fn pid_of(body: &[u8]) -> Option<u32> {
    std::str::from_utf8(body)
        .ok()?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid=")?.parse().ok())
}

/// Reads a whole response body.
async fn read_body<S>(
    stream: &mut h3::client::RequestStream<S, bytes::Bytes>,
) -> Result<Vec<u8>, h3::error::StreamError>
where
    S: h3::quic::RecvStream,
{
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await? {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            body.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(body)
}

/// After SIGTERM, handshakes are still taken until none came for this long.
const ACCEPT_QUIET: Duration = Duration::from_millis(100);

/// How long a client waits for a handshake or an answer before it counts it broken.
const WAIT: Duration = Duration::from_secs(5);

/// A loopback UDP socket on a new port of `addr`'s family.
fn local_socket(addr: SocketAddr) -> anyhow::Result<UdpSocket> {
    let any: SocketAddr = match addr {
        SocketAddr::V4(_) => "127.0.0.1:0".parse()?,
        SocketAddr::V6(_) => "[::1]:0".parse()?,
    };
    Ok(UdpSocket::bind(any)?)
}
