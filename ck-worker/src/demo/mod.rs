//! `ck demo-worker`: a tiny HTTP server that speaks ck's worker protocol, for trying ck out and
//! for its tests. It takes its listening sockets by socket activation (`LISTEN_FDS`; a UDP socket
//! among them is answered by [`udp`]: each datagram with its slot and pid), or binds
//! `$PORT` itself when it has none (as under `ck run --adopt`), reports
//! `READY=1` over `NOTIFY_SOCKET` (optionally after a delay), answers `GET /` with its slot and
//! pid, and on SIGTERM or SIGINT sends `STOPPING=1`, closes its connections
//! ([`crate::close`]) and exits 0. Fault switches (`--stall-ms`, `--fail-health-after`,
//! `--slow-ms`, ...) make it misbehave on purpose.
mod faults;
mod http;
mod server;
#[cfg(test)]
mod tests;
mod udp;

use std::{
    net::SocketAddr,
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use anyhow::{Context as _, ensure};
use nix::sys::socket::{getsockopt, sockopt};
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    activation::{self, Notifier},
    close, say,
};

pub use faults::Faults;
pub use server::{Identity, serve};

/// Command-line options of `ck demo-worker`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DemoOptions {
    /// Report READY=1 only this long after starting (e.g. 500ms, 2.5s, 1m), to simulate a
    /// slow boot.
    #[arg(
        long,
        value_name = "DUR",
        default_value = "0s",
        value_parser = crate::units::duration::parse_duration
    )]
    pub ready_after: Duration,
    /// Ignore SIGTERM (a misbehaving worker, for testing ck's drain timeout); SIGINT still stops.
    #[arg(long)]
    pub ignore_sigterm: bool,
    /// Fault: block the whole event loop for this long (nothing is accepted or answered, the
    /// accept queue grows) every --stall-every. A bare number is in milliseconds.
    #[arg(long, value_name = "DUR", requires = "stall_every", value_parser = faults::parse_ms)]
    pub stall_ms: Option<Duration>,
    /// Fault: the period of the --stall-ms stalls, counted from the start; the first stall
    /// begins this long after the start. Must be longer than --stall-ms.
    #[arg(
        long,
        value_name = "DUR",
        requires = "stall_ms",
        value_parser = crate::units::duration::parse_duration
    )]
    pub stall_every: Option<Duration>,
    /// Fault: from this long after the start, GET /healthz answers 503 `unhealthy`.
    #[arg(long, value_name = "DUR", value_parser = crate::units::duration::parse_duration)]
    pub fail_health_after: Option<Duration>,
    /// Fault: from this long after the start (later than --fail-health-after), GET /healthz
    /// answers 200 again.
    #[arg(
        long,
        value_name = "DUR",
        requires = "fail_health_after",
        value_parser = crate::units::duration::parse_duration
    )]
    pub recover_health_after: Option<Duration>,
    /// Fault: every request to / waits this long before it is answered (without blocking
    /// other connections). A bare number is in milliseconds.
    #[arg(long, value_name = "DUR", value_parser = faults::parse_ms)]
    pub slow_ms: Option<Duration>,
    /// Fault: stop sending watchdog heartbeats this long after the start. (The worker sends
    /// WATCHDOG=1 every half WATCHDOG_USEC when ck sets it, i.e. with `ck run --watchdog`.)
    #[arg(long, value_name = "DUR", value_parser = crate::units::duration::parse_duration)]
    pub watchdog_stop_after: Option<Duration>,
    /// Fault: every request to / allocates this much memory (e.g. 64K) and never frees it, for
    /// testing ck's `--max-memory` recycling.
    #[arg(long, value_name = "SIZE", value_parser = crate::units::size::parse_size)]
    pub leak_per_request: Option<u64>,
    /// Fault: answer requests to / one after another, at most N a second (a server with a
    /// fixed capacity: past it, requests queue).
    #[arg(long, value_name = "N")]
    pub capacity: Option<u32>,
    /// Fault (with --capacity): a cold start. For DUR after the start the capacity is a
    /// tenth of --capacity at first, rising linearly to all of it (caches and JIT warming up).
    #[arg(long, value_name = "DUR", requires = "capacity", value_parser = crate::units::duration::parse_duration)]
    pub warm_up: Option<Duration>,
    /// Fault: every request to / is answered with a reset (the connection closed with
    /// SO_LINGER 0): a release that fails every request it takes. /healthz answers as usual.
    #[arg(long)]
    pub reset_requests: bool,
    /// Fault: call listen() again on each TCP socket with this backlog (a server that lowers
    /// the backlog ck set): past N connections waiting to be accepted, the kernel drops new
    /// ones.
    #[arg(long, value_name = "N")]
    pub listen_backlog: Option<i32>,
    /// When it binds $PORT itself (no LISTEN_FDS): with SO_REUSEPORT, so that several share the
    /// port with no supervisor at all (the kernel's plain hash over them: the benchmarks'
    /// baseline of what ck is held to).
    #[arg(long)]
    pub reuse_port: bool,
}

impl Default for DemoOptions {
    fn default() -> DemoOptions {
        DemoOptions {
            ready_after: Duration::ZERO,
            ignore_sigterm: false,
            stall_ms: None,
            stall_every: None,
            fail_health_after: None,
            recover_health_after: None,
            slow_ms: None,
            watchdog_stop_after: None,
            leak_per_request: None,
            capacity: None,
            warm_up: None,
            reset_requests: false,
            listen_backlog: None,
            reuse_port: false,
        }
    }
}

/// Runs the demo worker until SIGTERM or SIGINT, then closes its connections and returns `Ok`.
///
/// Must be called at the start of the process, before any thread is started: it takes the
/// activation variables out of the environment (see [`activation::listen_fds`]). It builds its
/// own single-threaded tokio runtime.
///
/// # Errors
/// When the fault options contradict each other (see [`Faults::new`]), when the process was
/// not started with listening TCP sockets (`ck run`), when `NOTIFY_SOCKET` is malformed, or
/// when a listener fails beyond repair.
pub fn run(opts: DemoOptions) -> anyhow::Result<()> {
    let faults = Faults::new(&opts, tokio::time::Instant::now())?;
    let fds = match activation::listen_fds() {
        // Not socket-activated: it binds $PORT below.
        Err(activation::ActivationError::NotActivated) if std::env::var_os("PORT").is_some() => {
            Vec::new()
        }
        other => other?,
    };
    let notifier = Notifier::from_env().context("NOTIFY_SOCKET is unusable")?;
    report(notifier.status("booting"));
    let mut listeners = Vec::new();
    let mut datagrams = Vec::new();
    let mut addrs = Vec::new();
    for (name, fd) in fds {
        if getsockopt(&fd, sockopt::SockType).ok() == Some(nix::sys::socket::SockType::Datagram) {
            let socket = std::net::UdpSocket::from(fd);
            socket
                .set_nonblocking(true)
                .with_context(|| format!("making socket {name:?} non-blocking"))?;
            addrs.push(format!("udp {}", socket.local_addr()?));
            datagrams.push(socket);
            continue;
        }
        let (listener, addr) = tcp_listener(&name, fd)?;
        listeners.push(listener);
        addrs.push(addr.to_string());
    }
    if listeners.is_empty() && datagrams.is_empty() {
        // Not socket-activated: bind like any server, every address of $CK_LISTEN, else
        // 0.0.0.0:$PORT (under `ck run --adopt`, ck's bind hook adds SO_REUSEPORT and ck
        // adopts the sockets).
        for (addr, udp) in bind_addresses()? {
            let fd = bind(addr, udp, opts.reuse_port)?;
            if udp {
                let socket = std::net::UdpSocket::from(fd);
                addrs.push(format!("udp {}", socket.local_addr()?));
                datagrams.push(socket);
            } else {
                let listener = std::net::TcpListener::from(fd);
                addrs.push(listener.local_addr()?.to_string());
                listeners.push(listener);
            }
        }
    }
    ensure!(
        !listeners.is_empty() || !datagrams.is_empty(),
        "nothing to serve"
    );
    if let Some(backlog) = opts.listen_backlog {
        for listener in &listeners {
            let backlog = nix::sys::socket::Backlog::new(backlog).context("--listen-backlog")?;
            nix::sys::socket::listen(listener, backlog).context("listen() again")?;
        }
    }
    let identity = Identity::from_env();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let listeners = listeners
            .into_iter()
            .map(tokio::net::TcpListener::from_std)
            .collect::<Result<Vec<_>, _>>()
            .context("registering the listeners with tokio")?;
        let datagrams = datagrams
            .into_iter()
            .map(tokio::net::UdpSocket::from_std)
            .collect::<Result<Vec<_>, _>>()
            .context("registering the UDP sockets with tokio")?;
        let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let mut sigint = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let (slot, pid) = (identity.slot.clone(), identity.pid);
        say(format_args!(
            "demo worker slot={slot} pid={pid} listening on {}",
            addrs.join(", ")
        ));
        if let Some(faults) = faults.describe() {
            say(format_args!("demo worker slot={slot} pid={pid} faults: {faults}"));
        }
        let (stop, close) = close::channel();
        let heartbeat = watchdog_period();
        let heartbeats_until = opts
            .watchdog_stop_after
            .map(|d| tokio::time::Instant::now() + d);
        tokio::spawn(async move {
            let mut beat = tokio::time::interval(heartbeat.unwrap_or(Duration::from_secs(3600)));
            let ready = tokio::time::sleep(opts.ready_after);
            tokio::pin!(ready);
            let mut ready_sent = false;
            let signal_name = loop {
                tokio::select! {
                    () = &mut ready, if !ready_sent => {
                        ready_sent = true;
                        report(notifier.notify("READY=1\nSTATUS=serving"));
                    }
                    _ = sigterm.recv() => {
                        if !opts.ignore_sigterm {
                            break "SIGTERM";
                        }
                        say(format_args!("demo worker slot={slot} pid={pid} ignoring SIGTERM (--ignore-sigterm)"));
                    }
                    _ = sigint.recv() => break "SIGINT",
                    now = beat.tick(), if heartbeat.is_some() => {
                        if heartbeats_until.is_none_or(|until| now < until) {
                            report(notifier.watchdog());
                        }
                    }
                }
            };
            say(format_args!("demo worker slot={slot} pid={pid} stopping on {signal_name}"));
            report(notifier.stopping());
            stop.trigger();
        });
        let udp = udp::serve_udp(datagrams, identity.clone(), close.clone());
        let (tcp, udp) = tokio::join!(serve(listeners, identity, faults, close), udp);
        tcp.and(udp)
    })
}

/// The addresses to bind when not socket-activated, each with whether it is UDP: `$CK_LISTEN`
/// (`HOST:PORT` or `tcp://HOST:PORT` for TCP, `udp://HOST:PORT` for UDP), else `0.0.0.0:$PORT`.
fn bind_addresses() -> anyhow::Result<Vec<(SocketAddr, bool)>> {
    if let Ok(list) = std::env::var("CK_LISTEN")
        && !list.trim().is_empty()
    {
        return list
            .split_whitespace()
            .map(|a| {
                let (text, udp) = match (a.strip_prefix("udp://"), a.strip_prefix("tcp://")) {
                    (Some(rest), _) => (rest, true),
                    (_, Some(rest)) => (rest, false),
                    _ => (a, false),
                };
                let addr = text
                    .parse()
                    .with_context(|| format!("CK_LISTEN has a bad address {a:?}"))?;
                Ok((addr, udp))
            })
            .collect();
    }
    let port = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok());
    let port =
        port.context("no sockets were passed (LISTEN_FDS) and PORT is not set: nothing to serve")?;
    Ok(vec![(SocketAddr::from(([0, 0, 0, 0], port)), false)])
}

/// Binds `addr` and, for TCP, listens on it (IPv6 only for an IPv6 address, as ck's own
/// sockets; with `SO_REUSEPORT` when `reuse_port`); a non-blocking socket, UDP when `udp`.
fn bind(addr: SocketAddr, udp: bool, reuse_port: bool) -> anyhow::Result<OwnedFd> {
    use nix::sys::socket::{
        AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage, setsockopt, socket,
    };
    let family = if addr.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let kind = if udp {
        SockType::Datagram
    } else {
        SockType::Stream
    };
    let fd = socket(family, kind, flags, None).context("creating a socket")?;
    if addr.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true).context("setting IPV6_V6ONLY")?;
    }
    setsockopt(&fd, sockopt::ReuseAddr, &true).context("setting SO_REUSEADDR")?;
    if reuse_port {
        setsockopt(&fd, sockopt::ReusePort, &true).context("setting SO_REUSEPORT")?;
    }
    nix::sys::socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))
        .with_context(|| format!("binding {addr}"))?;
    if !udp {
        nix::sys::socket::listen(&fd, Backlog::new(1024)?)
            .with_context(|| format!("listening on {addr}"))?;
    }
    Ok(fd)
}

/// Half of `WATCHDOG_USEC`, the heartbeat period systemd recommends, when it is set.
fn watchdog_period() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Checks that `fd` is a listening TCP socket and makes it a non-blocking std listener.
fn tcp_listener(name: &str, fd: OwnedFd) -> anyhow::Result<(std::net::TcpListener, SocketAddr)> {
    let what = || format!("socket {name:?} (fd {})", fd.as_raw_fd());
    let listening = getsockopt(&fd, sockopt::AcceptConn)
        .with_context(|| format!("{} is not a socket", what()))?;
    ensure!(
        listening,
        "{} is not listening; the demo worker needs listening TCP sockets",
        what()
    );
    let description = what();
    let listener = std::net::TcpListener::from(fd);
    let addr = listener
        .local_addr()
        .with_context(|| format!("{description} is not a TCP socket"))?;
    listener
        .set_nonblocking(true)
        .with_context(|| format!("making {description} non-blocking"))?;
    Ok((listener, addr))
}

/// Reports a failed notification; the worker carries on (the supervisor may be gone).
fn report(result: std::io::Result<()>) {
    if let Err(err) = result {
        say(format_args!(
            "demo worker: could not notify the supervisor: {err}"
        ));
    }
}
