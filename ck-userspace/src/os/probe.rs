//! One probe of one worker through its own listening socket: the connection comes from the
//! source port that the BPF program maps to the worker's slot (probe steering), so it reaches
//! that worker whatever its state. Used by the supervisor's periodic probes, by `ck probe`, and
//! by `--ready auto`'s accept probe ([`open_accept_probe`]: one connection left in a starting
//! worker's accept queue, so that its first `accept` shows in the queue's length).
use std::{
    io,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use socket2::{Domain, SockAddr, Socket, Type};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpSocket,
};

use crate::settings::health::ProbeKind;

/// Largest probe answer read.
const MAX_ANSWER: usize = 16 * 1024;

/// What a passing probe saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// HTTP status (None for a TCP probe).
    pub status: Option<u16>,
    /// The response body (empty for a TCP probe).
    pub body: String,
}

/// Where to connect to reach a group bound to `bound`: its own address, or loopback of the same
/// family for a wildcard address.
pub fn target_of(bound: SocketAddr) -> SocketAddr {
    let ip = match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bound.port())
}

/// The probe source address of `slot`: loopback of the target's family, port `base + slot`.
pub fn source_of(target: SocketAddr, base: u16, slot: u32) -> Option<SocketAddr> {
    let port = u16::try_from(u32::from(base) + slot).ok()?;
    let ip = if target.is_ipv4() {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V6(Ipv6Addr::LOCALHOST)
    };
    Some(SocketAddr::new(ip, port))
}

/// Starts the accept probe's connection from `source` to `target` without waiting for it: a
/// non-blocking socket that closes with RST when dropped (no TIME_WAIT on the probe port,
/// as for every probe). Once [`connected`], dropping it leaves the connection in the worker's
/// accept queue (reset, as a client that gave up: `accept` still returns it).
pub fn open_accept_probe(target: SocketAddr, source: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM.nonblocking(),
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_linger(Some(Duration::ZERO))?;
    socket.bind(&SockAddr::from(source))?;
    match socket.connect(&SockAddr::from(target)) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(socket),
        Err(e) => Err(e),
    }
}

/// Whether a socket from [`open_accept_probe`] has completed its handshake (`Ok(false)`: not
/// yet; `Err`: it failed).
pub fn connected(socket: &Socket) -> io::Result<bool> {
    if let Some(e) = socket.take_error()? {
        return Err(e);
    }
    match socket.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Probes `target` from `source`. `Err` says why the probe failed.
pub async fn probe(
    target: SocketAddr,
    source: SocketAddr,
    kind: &ProbeKind,
    timeout: Duration,
) -> Result<ProbeAnswer, String> {
    tokio::time::timeout(timeout, probe_inner(target, source, kind))
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}

async fn probe_inner(
    target: SocketAddr,
    source: SocketAddr,
    kind: &ProbeKind,
) -> Result<ProbeAnswer, String> {
    let socket = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_reuseaddr(true)
        .map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    // Close with RST: no TIME_WAIT left on the probe port, so the next probe can reuse it.
    socket
        .set_zero_linger()
        .map_err(|e| format!("SO_LINGER: {e}"))?;
    socket.bind(source).map_err(|e| {
        format!(
            "cannot bind probe source {source}: {e} (another socket holds that port; \
             choose another --probe-port-base)"
        )
    })?;
    let mut stream = socket
        .connect(target)
        .await
        .map_err(|e| format!("connect {target}: {e}"))?;
    let path = match kind {
        ProbeKind::Tcp => {
            return Ok(ProbeAnswer {
                status: None,
                body: String::new(),
            });
        }
        ProbeKind::Http(path) => path,
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: ck-probe\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.len() > MAX_ANSWER || complete(&answer) {
            break;
        }
    }
    parse_answer(&answer)
}

/// Whether `answer` holds the whole response (head, and the body its Content-Length announces).
fn complete(answer: &[u8]) -> bool {
    let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&answer[..head_end]);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    length.is_some_and(|len| answer.len() >= head_end + 4 + len)
}

/// Reads the status and body of an HTTP answer; a non-2xx status is a failure.
fn parse_answer(answer: &[u8]) -> Result<ProbeAnswer, String> {
    let text = String::from_utf8_lossy(answer);
    let status: u16 = text
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| "no HTTP answer".to_string())?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(ProbeAnswer {
            status: Some(status),
            body,
        })
    } else {
        Err(format!("HTTP {status}: {}", body.trim()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_sources() {
        let t = target_of("0.0.0.0:8080".parse().unwrap());
        assert_eq!(t, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            target_of("[::]:8080".parse().unwrap()),
            "[::1]:8080".parse().unwrap()
        );
        assert_eq!(
            source_of(t, 19800, 3),
            Some("127.0.0.1:19803".parse().unwrap())
        );
        assert_eq!(source_of(t, 65535, 3), None);
    }

    #[test]
    fn answers_parse() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
        assert!(complete(ok));
        assert_eq!(parse_answer(ok).unwrap().body, "ok\n");
        assert!(!complete(
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nok\n"
        ));
        let bad = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\n\r\nunhealthy\n";
        assert!(parse_answer(bad).unwrap_err().contains("503"));
        assert!(parse_answer(b"garbage").is_err());
    }

    #[tokio::test]
    async fn http_probe_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
                .await
                .unwrap();
        });
        let source = SocketAddr::from(([127, 0, 0, 1], 0));
        let answer = probe(
            target,
            source,
            &ProbeKind::Http("/healthz".into()),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
        assert_eq!(answer.status, Some(200));
        assert_eq!(answer.body, "ok\n");
    }
}
