//! A hyper 1 web server that runs under ck, on the `ck-worker` crate: it serves the listening
//! socket ck hands over (socket activation, fd 3), says `READY=1` once it can serve, and on
//! SIGTERM says `STOPPING=1` and closes gracefully: it accepts what is still queued, answers each
//! keep-alive connection's next request with `Connection: close`, closes connections that stay
//! idle, and exits once every connection is done. A `ck reload` then fails no request, even for
//! a keep-alive client that never retries.
//!
//! ```sh
//! cargo build --release -p ck-example-rust
//! ck run --port 8080 -w 2 -- target/release/ck-example-rust
//! ```
//!
//! `GET /` answers which worker served it (`slot=S pid=P`), `GET /healthz` answers `ok`.
use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::sync::Arc;

use anyhow::Context as _;
use bytes::Bytes;
use ck_worker::activation::{Notifier, listen_fds};
use ck_worker::close::{self, Close};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;

fn main() -> anyhow::Result<()> {
    // Before the runtime starts its threads: this takes LISTEN_FDS and friends out of the
    // environment.
    let socket = listen_fds()?
        .into_iter()
        .next()
        .context("ck passed no socket: run this with `ck run --port PORT -- ...`")?
        .1;
    let notifier = Notifier::from_env().context("NOTIFY_SOCKET is unusable")?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?
        .block_on(serve(StdListener::from(socket), notifier))
}

/// Serves `listener` until SIGTERM, then closes its connections and returns.
async fn serve(listener: StdListener, notifier: Notifier) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener).context("the socket is not a TCP listener")?;
    let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let slot = std::env::var("CK_SLOT").unwrap_or_default();
    let hello: Arc<str> = format!("slot={slot} pid={}\n", std::process::id()).into();

    let (stop, close) = close::channel();
    let accepting = close.clone();
    let accept = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        let result = accepting
            .accept_until_closed(listener, |stream| {
                while connections.try_join_next().is_some() {}
                connections.spawn(connection(stream, accepting.clone(), hello.clone()));
            })
            .await;
        while connections.join_next().await.is_some() {}
        result
    });
    notifier.ready()?;

    sigterm.recv().await;
    // First tell ck, so that it sends no more connections here, then close.
    notifier.stopping()?;
    stop.trigger();
    accept.await.context("the accept loop panicked")?
}

/// Serves one connection; once the close starts, every answer says `Connection: close` and
/// the connection is closed when idle.
async fn connection(stream: TcpStream, close: Close, hello: Arc<str>) {
    let _ = stream.set_nodelay(true);
    let closing = close.clone();
    let service = hyper::service::service_fn(move |request| {
        respond(request, hello.clone(), closing.is_requested())
    });
    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    // An error (a reset, a malformed request) ends only this connection.
    let _ = close
        .connection(conn, |conn| conn.graceful_shutdown())
        .await;
}

/// The app: `/` and `/healthz`, anything else 404.
async fn respond(
    request: Request<Incoming>,
    hello: Arc<str>,
    closing: bool,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match request.uri().path() {
        "/" => (StatusCode::OK, hello.to_string()),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if closing {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}
