//! An HTTP server on hyper 1 that runs under ck, on `ck_worker`: it takes the listening
//! sockets ck hands over (`listen_fds`), says `READY=1`, serves keep-alive requests
//! (`GET /` answers `slot=S pid=P`, `GET /healthz` answers `ok`), and on SIGTERM (or SIGINT)
//! says `STOPPING=1` and drains gracefully with [`ck_worker::drain`]: it accepts what is still
//! queued on its sockets, answers each connection's next request with `Connection: close`,
//! closes keep-alive connections that stay idle, finishes requests in flight, and exits 0. A
//! rolling restart (`ck reload`) then fails no request, even for clients that never retry.
//!
//! Build: `cargo build -p ck-worker --example hyper_server`
//! Run:   `ck run --port 8080 -w 2 -- target/debug/examples/hyper_server`
use std::{convert::Infallible, sync::Arc};

use anyhow::Context as _;
use bytes::Bytes;
use ck_worker::{
    activation::{Notifier, listen_fds},
    drain::{self, Drain},
};
use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Incoming, header, server::conn::http1};
use hyper_util::rt::TokioIo;
use tokio::{
    net::{TcpListener, TcpStream},
    signal::unix::{SignalKind, signal},
    task::JoinSet,
};

fn main() -> anyhow::Result<()> {
    // First, before the runtime starts its threads: it takes the variables out of the
    // environment.
    let fds = listen_fds()?;
    let notifier = Notifier::from_env().context("NOTIFY_SOCKET is unusable")?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?
        .block_on(serve(fds, notifier))
}

/// Serves every passed socket until SIGTERM or SIGINT, then drains and returns.
async fn serve(fds: Vec<(String, std::os::fd::OwnedFd)>, notifier: Notifier) -> anyhow::Result<()> {
    anyhow::ensure!(
        !fds.is_empty(),
        "ck passed no socket: run this with `ck run` (LISTEN_FDS=0)"
    );
    let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut sigint = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let slot = std::env::var("CK_SLOT").unwrap_or_else(|_| "0".to_string());
    let body: Arc<str> = format!("slot={slot} pid={}\n", std::process::id()).into();
    let (stop, drain) = drain::channel();
    let mut listeners = JoinSet::new();
    for (name, fd) in fds {
        let listener = std::net::TcpListener::from(fd);
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)
            .with_context(|| format!("socket {name:?} is not a TCP listener"))?;
        listeners.spawn(accept(listener, drain.clone(), body.clone()));
    }
    notifier.ready()?;
    eprintln!("hyper server slot={slot} pid={} ready", std::process::id());
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = sigint.recv() => {}
        Some(ended) = listeners.join_next() => {
            // An accept loop ends before shutdown only on an error it cannot retry.
            ended.context("an accept loop panicked")??;
        }
    }
    // Tell ck first, so that it steers no more connections here while we drain.
    notifier.stopping()?;
    stop.trigger();
    while let Some(ended) = listeners.join_next().await {
        ended.context("an accept loop panicked")??;
    }
    eprintln!(
        "hyper server slot={slot} pid={} drained",
        std::process::id()
    );
    Ok(())
}

/// Accepts on `listener` until it is drained, then waits for its connections to finish.
async fn accept(listener: TcpListener, drain: Drain, body: Arc<str>) -> anyhow::Result<()> {
    let mut connections = JoinSet::new();
    drain
        .accept_until_drained(listener, |stream| {
            // Forget the connections that are done, so a long-lived server does not pile them up.
            while connections.try_join_next().is_some() {}
            connections.spawn(connection(stream, drain.clone(), body.clone()));
        })
        .await?;
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// Serves one connection with hyper, through the drain: once shutdown is requested, every
/// response says `Connection: close` (hyper then closes after it), and the connection is
/// closed by `graceful_shutdown` if it stays idle.
async fn connection(stream: TcpStream, drain: Drain, body: Arc<str>) {
    let _ = stream.set_nodelay(true);
    let closing = drain.clone();
    let service = hyper::service::service_fn(move |request| {
        respond(request, body.clone(), closing.is_requested())
    });
    let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    // Errors (resets, malformed requests) end only this connection; there is no one to tell.
    let _ = drain
        .connection(conn, |conn| conn.graceful_shutdown())
        .await;
}

/// `GET /` answers the slot and pid, `/healthz` `ok`, anything else 404.
async fn respond(
    request: Request<Incoming>,
    body: Arc<str>,
    closing: bool,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, text) = match request.uri().path() {
        "/" => (StatusCode::OK, body.to_string()),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain"),
    );
    if closing {
        headers.insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    Ok(response)
}
