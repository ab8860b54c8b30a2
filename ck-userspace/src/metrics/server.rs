//! The metrics listener (`--metrics ADDR`, hyper on ck's runtime): `GET /metrics`,
//! `GET /healthz` and `GET /readyz`. Every answer comes from the event loop through a [`Call`],
//! bounded by [`LOOP_TIMEOUT`]: `/healthz` is 200 only when the loop itself answers.
use std::{convert::Infallible, io, net::SocketAddr, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode, body::Incoming, header::CONTENT_TYPE,
    server::conn::http1, service::service_fn,
};
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, oneshot};

use super::{Call, connections, families::Exposition, process};

/// How long the event loop has to answer before a request gets 503.
pub const LOOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The content type of `/metrics` (what `prometheus-client` writes).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics listener could not be opened, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Something listens there already.
    #[error(
        "--metrics {addr}: the address is already in use by another socket{holder}; stop it \
         (`ss -ltnp 'sport = :{port}'` shows who holds it) or give --metrics another address \
         (port 0 takes any free port; `ck status` shows which)",
        port = addr.port()
    )]
    InUse {
        /// The address.
        addr: SocketAddr,
        /// Who holds it (` of pid P (command)`), when the kernel says.
        holder: String,
    },
    /// Binding needs privileges.
    #[error(
        "--metrics {addr}: permission denied; ports below 1024 need root or CAP_NET_BIND_SERVICE"
    )]
    Permission {
        /// The address.
        addr: SocketAddr,
    },
    /// The address is not on this host.
    #[error(
        "--metrics {addr}: this host has no such address; use 127.0.0.1, 0.0.0.0 or one of its \
         own addresses"
    )]
    NotLocal {
        /// The address.
        addr: SocketAddr,
    },
    /// Anything else.
    #[error("--metrics {addr}: {error}")]
    Other {
        /// The address.
        addr: SocketAddr,
        /// The OS error (part of the message, not a separate cause).
        error: io::Error,
    },
}

fn classify(addr: SocketAddr, source: io::Error) -> MetricsError {
    match source.raw_os_error() {
        Some(libc::EADDRINUSE) => MetricsError::InUse {
            addr,
            holder: crate::os::sockets::holder_of_port(addr),
        },
        Some(libc::EACCES) | Some(libc::EPERM) => MetricsError::Permission { addr },
        Some(libc::EADDRNOTAVAIL) => MetricsError::NotLocal { addr },
        _ => MetricsError::Other {
            addr,
            error: source,
        },
    }
}

/// Parses `--metrics`: `HOST:PORT` with an IP address (`127.0.0.1:9100`, `[::1]:9100`), or a
/// port alone for `127.0.0.1:PORT`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not an address: give HOST:PORT with an IP address, e.g. 127.0.0.1:9100 \
             or [::1]:9100 (a port alone means 127.0.0.1)"
        )
    })
}

/// The running listener; it stops accepting when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    /// A copy of the listening socket, handed to the new image by `ck upgrade`.
    listener: std::os::fd::OwnedFd,
}

impl MetricsServer {
    /// The address it listens on (the port the kernel chose, for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listening socket (a copy), for `ck upgrade` to hand over.
    pub fn listener(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        self.listener.as_fd()
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Binds `addr` and serves it on the current tokio runtime, asking the event loop through
/// `calls`.
pub fn start(
    addr: SocketAddr,
    calls: mpsc::UnboundedSender<Call>,
) -> Result<MetricsServer, MetricsError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| classify(addr, e))?;
    serve(listener, calls)
}

/// Serves `listener` (bound by [`start`], or inherited from the image `ck upgrade` replaced)
/// on the current tokio runtime.
pub fn serve(
    listener: std::net::TcpListener,
    calls: mpsc::UnboundedSender<Call>,
) -> Result<MetricsServer, MetricsError> {
    let addr = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let other = |error| MetricsError::Other { addr, error };
    listener.set_nonblocking(true).map_err(other)?;
    let bound = listener.local_addr().map_err(other)?;
    let copy = std::os::fd::OwnedFd::from(listener.try_clone().map_err(other)?);
    let listener = tokio::net::TcpListener::from_std(listener).map_err(other)?;
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let calls = calls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| answer(req, calls.clone()));
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!("metrics connection: {e}");
                }
            });
        }
    });
    tracing::info!(addr = %bound, "metrics on http://{bound}/metrics (and /healthz, /readyz)");
    Ok(MetricsServer {
        addr: bound,
        accept,
        listener: copy,
    })
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(CONTENT_TYPE, value);
    }
    response
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body)
}

/// Asks the event loop, waiting at most [`LOOP_TIMEOUT`]; `Err` says why there is no answer.
async fn ask<T>(
    calls: &mpsc::UnboundedSender<Call>,
    call: fn(oneshot::Sender<T>) -> Call,
) -> Result<T, String> {
    let (tx, rx) = oneshot::channel();
    calls
        .send(call(tx))
        .map_err(|_| "ck is shutting down".to_string())?;
    match tokio::time::timeout(LOOP_TIMEOUT, rx).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(_)) => Err("ck is shutting down".into()),
        Err(_) => Err(format!(
            "ck's event loop did not answer within {LOOP_TIMEOUT:?}"
        )),
    }
}

async fn answer(
    req: Request<Incoming>,
    calls: mpsc::UnboundedSender<Call>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into()));
    }
    let unavailable = |why: String| text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n"));
    Ok(match req.uri().path() {
        "/metrics" => match metrics(&calls).await {
            Ok(body) => reply(StatusCode::OK, OPENMETRICS, body),
            Err(why) => unavailable(why),
        },
        "/healthz" => match ask(&calls, Call::Alive).await {
            Ok(()) => text(StatusCode::OK, "ok: ck's event loop is running\n".into()),
            Err(why) => unavailable(why),
        },
        "/readyz" => match ask(&calls, Call::Ready).await {
            Ok(Ok(why)) => text(StatusCode::OK, format!("ready: {why}\n")),
            Ok(Err(why)) => unavailable(format!("not ready: {why}")),
            Err(why) => unavailable(format!("not ready: {why}")),
        },
        other => text(
            StatusCode::NOT_FOUND,
            format!("no {other} here: try /metrics, /healthz or /readyz\n"),
        ),
    })
}

/// The `/metrics` text: the loop's scrape (with the kernel's open-connection counts), then the
/// sock_diag scan of open connections where the kernel does not count them and ck's own process,
/// read on a blocking thread (sock_diag and `/proc` take longer than the loop should wait).
async fn metrics(calls: &mpsc::UnboundedSender<Call>) -> Result<String, String> {
    let scrape = ask(calls, Call::Scrape).await?;
    tokio::task::spawn_blocking(move || {
        let connections = scrape.connections.clone().unwrap_or_else(|| {
            let workers: Vec<(u32, Vec<u32>)> = scrape
                .slots
                .iter()
                .filter(|s| !s.pids.is_empty())
                .map(|s| (s.slot, s.pids.clone()))
                .collect();
            connections::per_worker(&scrape.ports, scrape.probe_base, &workers)
        });
        Exposition {
            scrape,
            connections,
            process: process::read(),
        }
        .encode()
    })
    .await
    .map_err(|e| format!("encoding the metrics failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        assert_eq!(
            parse_addr("9100"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9100)))
        );
        assert_eq!(parse_addr("0.0.0.0:9100").unwrap().port(), 9100);
        assert!(parse_addr("[::1]:9100").unwrap().is_ipv6());
        assert!(
            parse_addr("localhost:9100")
                .unwrap_err()
                .contains("HOST:PORT")
        );
    }
}
