//! The supervisor's end of `NOTIFY_SOCKET`: one datagram socket per worker (abstract address, so
//! nothing is left on disk), so a message is attributed to its worker whatever process sent it.
use std::{io, os::linux::net::SocketAddrExt, os::unix::net::SocketAddr};

use tokio::net::UnixDatagram;

/// A message a worker sent (one datagram can carry several, one per line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyMsg {
    /// `READY=1`: serve me.
    Ready,
    /// `STOPPING=1`: stop sending me connections.
    Stopping,
    /// `WATCHDOG=1`: still alive.
    Watchdog,
    /// `STATUS=...`: free text for `ck status`.
    Status(String),
    /// Anything else (`MAINPID=`, `EXTEND_TIMEOUT_USEC=`, ...): proves the worker speaks the
    /// protocol.
    Other,
}

/// Parses one datagram.
pub fn parse(datagram: &[u8]) -> Vec<NotifyMsg> {
    String::from_utf8_lossy(datagram)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| match line.split_once('=') {
            Some(("READY", "1")) => NotifyMsg::Ready,
            Some(("STOPPING", "1")) => NotifyMsg::Stopping,
            Some(("WATCHDOG", "1")) => NotifyMsg::Watchdog,
            Some(("STATUS", text)) => NotifyMsg::Status(text.to_string()),
            _ => NotifyMsg::Other,
        })
        .collect()
}

/// A bound notify socket and the value of `NOTIFY_SOCKET` that reaches it.
pub struct NotifySocket {
    /// The value for the worker's `NOTIFY_SOCKET` (`@` + abstract name).
    pub env_value: String,
    /// The socket to read (shared: the reader task reads it, the supervisor peeks at it).
    pub socket: std::sync::Arc<UnixDatagram>,
}

/// Whether a message waits on `socket`, unread (without reading it).
pub fn pending(socket: &UnixDatagram) -> bool {
    let mut byte = [std::mem::MaybeUninit::new(0u8)];
    // The socket is non-blocking (tokio's): an empty queue answers WouldBlock.
    socket2::SockRef::from(socket).peek(&mut byte).is_ok()
}

impl NotifySocket {
    /// Binds a fresh abstract socket for worker `worker` (unique in the instance) on `slot` of
    /// instance `name`.
    pub fn bind(name: &str, slot: u32, worker: u64) -> io::Result<NotifySocket> {
        let abstract_name = format!("ck/{name}/{}/{slot}/{worker}", std::process::id());
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes())?;
        let std_socket = std::os::unix::net::UnixDatagram::bind_addr(&addr)?;
        std_socket.set_nonblocking(true)?;
        Ok(NotifySocket {
            env_value: format!("@{abstract_name}"),
            socket: std::sync::Arc::new(UnixDatagram::from_std(std_socket)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages() {
        assert_eq!(
            parse(b"READY=1\nSTATUS=serving\nMAINPID=4\n"),
            vec![
                NotifyMsg::Ready,
                NotifyMsg::Status("serving".into()),
                NotifyMsg::Other
            ]
        );
        assert_eq!(parse(b"STOPPING=1"), vec![NotifyMsg::Stopping]);
        assert_eq!(parse(b"READY=0"), vec![NotifyMsg::Other]);
    }

    #[tokio::test]
    async fn receives_from_abstract_address() {
        let n = NotifySocket::bind("unit-test", 1, 1).unwrap();
        let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
        let name = n.env_value.trim_start_matches('@');
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        client.send_to_addr(b"READY=1", &addr).unwrap();
        let mut buf = [0u8; 64];
        let len = n.socket.recv(&mut buf).await.unwrap();
        assert_eq!(parse(&buf[..len]), vec![NotifyMsg::Ready]);
    }
}
