//! ck's end of a connection to a worker (a health or readiness probe's, the accept probe's, the
//! steering check's when it reached one), ended as a well-behaved client ends it: ck shuts down
//! writing (a FIN: the worker reads the end of the request, not an error), reads and discards
//! what the worker sends until it closes (at most [`CLOSE_LIMIT`]), then closes. Never
//! `SO_LINGER 0`: a reset makes a server that reads or writes after `accept` fail (Python's
//! `recv` raises `ConnectionResetError`, a later `send` raises `BrokenPipeError` or dies of
//! SIGPIPE), and a server written in a hurry dies of it.
//!
//! The consequence: ck closes first, so its end of every probe connection waits in TIME_WAIT
//! on the slot's fixed probe port (`base + slot`, the source port probe steering maps to the
//! slot), and the next probe from that port to the same worker socket has the same four-tuple.
//! The kernel lets it through at once: the socket is bound to the port explicitly, with
//! SO_REUSEADDR (so the bind does not conflict with the TIME_WAIT entry), and a `connect` from
//! an explicitly bound port checks the TIME_WAIT entry with `tcp_twsk_unique(.., twp = NULL)`,
//! which takes it over whenever the old connection carried TCP timestamps
//! (`net.ipv4.tcp_timestamps`, on by default: the new connection starts beyond the old one's
//! sequence numbers, and PAWS tells their segments apart), whatever `net.ipv4.tcp_tw_reuse`
//! says. Checked on Linux 6.18: five connections in a row from one bound port, each closed by
//! the client first, IPv4 and IPv6, with `tcp_tw_reuse` 2 (the default) and 0 (in a network
//! namespace). With timestamps off, the `connect` fails with EADDRNOTAVAIL until the entry
//! expires (60 s), as it does while ck's earlier connection is still open (the worker has not
//! closed it): the accept probe tries again at the next tick (the `/proc` scan decides
//! meanwhile), a health probe waits within its timeout (`super::probe_once`).
use std::{
    io,
    net::{Shutdown, SocketAddr},
    time::Duration,
};

use socket2::{Domain, SockAddr, Socket, Type};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// How long ck reads, once it has shut down writing, before it closes a connection the worker
/// has not closed.
pub const CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// A non-blocking TCP socket for a connection to `target`, bound to `source` with SO_REUSEADDR
/// (and the default linger: a close sends a FIN, never a reset).
pub fn bound_socket(target: SocketAddr, source: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM.nonblocking(),
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&SockAddr::from(source))?;
    Ok(socket)
}

/// A connection of ck's to a worker started without waiting for its handshake (the accept
/// probe's), ended politely ([`end_politely`]) when dropped, whatever state it is in.
#[derive(Debug)]
pub struct ProbeConn {
    /// Taken by the drop.
    socket: Option<Socket>,
}

impl ProbeConn {
    /// Starts a connection from `source` to `target`.
    pub fn connect(target: SocketAddr, source: SocketAddr) -> io::Result<ProbeConn> {
        let socket = bound_socket(target, source)?;
        match socket.connect(&SockAddr::from(target)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(ProbeConn {
            socket: Some(socket),
        })
    }

    fn socket(&self) -> &Socket {
        self.socket.as_ref().expect("taken only by the drop")
    }

    /// Whether the handshake has completed (`Ok(false)`: not yet; `Err`: it failed).
    pub fn connected(&self) -> io::Result<bool> {
        let socket = self.socket();
        if let Some(e) = socket.take_error()? {
            return Err(e);
        }
        match socket.peer_addr() {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Shuts down writing (a FIN): the worker reads the end of the connection once it takes it.
    pub fn shut_down_writing(&self) -> io::Result<()> {
        self.socket().shutdown(Shutdown::Write)
    }
}

impl Drop for ProbeConn {
    fn drop(&mut self) {
        if let Some(socket) = self.socket.take() {
            end_politely(socket);
        }
    }
}

/// Ends `socket` (ck's end of a connection to a worker, connected or still connecting) in the
/// background, as [`finish`] does: a task of ck's runtime, or, where there is none (a unit
/// test), a thread of its own.
pub fn end_politely(socket: Socket) {
    if let Err(e) = socket.set_nonblocking(true) {
        tracing::debug!("ending a probe connection: {e}");
    }
    let stream = std::net::TcpStream::from(socket);
    let end = async move {
        match TcpStream::from_std(stream) {
            Ok(stream) => finish(stream).await,
            Err(e) => tracing::debug!("ending a probe connection: {e}"),
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(end)),
        Err(_) => drop(std::thread::spawn(
            move || match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(end),
                Err(e) => tracing::debug!("ending a probe connection: {e}"),
            },
        )),
    }
}

/// Ends ck's end of a connection to a worker: once it is connected (if it is still
/// connecting), shuts down writing, reads and discards until the worker closes or fails the
/// connection, at most [`CLOSE_LIMIT`], then closes.
pub async fn finish(mut stream: TcpStream) {
    let _ = tokio::time::timeout(CLOSE_LIMIT, async {
        if stream.writable().await.is_err() || !matches!(stream.take_error(), Ok(None)) {
            return;
        }
        // Already shut down (the accept probe's), or reset: nothing more to say.
        let _ = stream.shutdown().await;
        let mut buf = [0u8; 4096];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    use super::*;

    /// A connection from `conn`'s side, accepted by `listener` once it has completed.
    fn accepted(listener: &TcpListener, conn: &ProbeConn) -> std::net::TcpStream {
        for _ in 0..1000 {
            if conn.connected().unwrap() {
                return listener.accept().unwrap().0;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the probe connection never completed");
    }

    #[test]
    fn the_worker_reads_the_end_and_its_answer_is_read_never_reset() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let conn = ProbeConn::connect(target, "127.0.0.1:0".parse().unwrap()).unwrap();
        let mut worker = accepted(&listener, &conn);
        conn.shut_down_writing().unwrap();
        drop(conn);
        // What a server written in a hurry does: read the request, answer, read again, close.
        let mut buf = [0u8; 64];
        assert_eq!(worker.read(&mut buf).unwrap(), 0, "an end, not an error");
        for _ in 0..50 {
            worker.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(worker.read(&mut buf).unwrap(), 0);
    }

    #[tokio::test]
    async fn a_connection_dropped_as_soon_as_it_is_started_ends_with_a_fin() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let conn = ProbeConn::connect(target, "127.0.0.1:0".parse().unwrap()).unwrap();
        drop(conn);
        let (mut worker, _) = tokio::task::spawn_blocking(move || listener.accept())
            .await
            .unwrap()
            .unwrap();
        let mut buf = [0u8; 8];
        let n = tokio::task::spawn_blocking(move || worker.read(&mut buf))
            .await
            .unwrap();
        assert_eq!(n.unwrap(), 0, "an end, not an error");
    }

    #[test]
    fn the_next_connection_from_the_same_port_takes_over_the_time_wait() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = listener.local_addr().unwrap();
        let mut source: SocketAddr = "127.0.0.1:0".parse().unwrap();
        for round in 0..3 {
            let conn = ProbeConn::connect(target, source).unwrap();
            source = conn.socket().local_addr().unwrap().as_socket().unwrap();
            let mut worker = accepted(&listener, &conn);
            conn.shut_down_writing().unwrap();
            let mut buf = [0u8; 8];
            assert_eq!(worker.read(&mut buf).unwrap(), 0, "round {round}");
            drop(worker);
            // ck sent the first FIN: once the worker's arrives, ck's end is in TIME_WAIT.
            let socket = conn.socket();
            for _ in 0..1000 {
                let mut byte = [std::mem::MaybeUninit::new(0u8)];
                match socket.recv(&mut byte) {
                    Ok(0) => break,
                    _ => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        }
    }
}
