//! The listening sockets: one `SO_REUSEPORT` socket per slot and group (a listening TCP socket, or
//! a bound UDP one), created and owned by the supervisor, plus the check that a port is not
//! already held by someone else.
use std::{io, net::SocketAddr};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::{os::cgroup::InstanceCgroup, settings::run_config::ListenAddr};

/// Listen backlog of every slot socket (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: i32 = 4096;

/// A socket error, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// The address is in use by a socket that is not ours.
    #[error(
        "{addr} is already in use by another socket{holder} (another server, or a ck instance with \
         another name); stop it (`ss -lntup 'sport = :{port}'` shows who holds it) or choose \
         another port"
    )]
    InUse {
        /// The address.
        addr: ListenAddr,
        /// Its port, for the hint.
        port: u16,
        /// Who holds it (` of pid P (command)`), when the kernel says.
        holder: String,
    },
    /// Binding needs privileges.
    #[error("{addr}: permission denied; ports below 1024 need root or CAP_NET_BIND_SERVICE")]
    Permission {
        /// The address.
        addr: ListenAddr,
    },
    /// The address is not on this host.
    #[error(
        "{addr}: this host has no such address; listen on 0.0.0.0, [::] or one of its own addresses"
    )]
    NotLocal {
        /// The address.
        addr: ListenAddr,
    },
    /// Anything else.
    #[error("{addr}: {error}")]
    Other {
        /// The address.
        addr: ListenAddr,
        /// The OS error (part of the message, not a separate cause).
        error: io::Error,
    },
}

fn classify(addr: ListenAddr, err: io::Error) -> SocketError {
    match err.raw_os_error() {
        Some(libc::EADDRINUSE) => SocketError::InUse {
            addr,
            port: addr.addr.port(),
            holder: match addr.is_udp() {
                true => String::new(),
                false => holder_of_port(addr.addr),
            },
        },
        Some(libc::EACCES) | Some(libc::EPERM) => SocketError::Permission { addr },
        Some(libc::EADDRNOTAVAIL) => SocketError::NotLocal { addr },
        _ => SocketError::Other { addr, error: err },
    }
}

/// ` of pid P (command)` for a listener on `addr`'s port, from sock_diag and `/proc`; empty
/// when none is found.
pub fn holder_of_port(addr: SocketAddr) -> String {
    let listeners =
        crate::os::sock_diag::listeners(addr.port(), addr.is_ipv6()).unwrap_or_default();
    listeners
        .iter()
        .find_map(|l| crate::os::sock_diag::holder_of(l.inode))
        .map_or_else(String::new, |(pid, comm)| format!(" of pid {pid} ({comm})"))
}

/// A socket for `listen`, created in `cgroup`'s `sockets` cgroup if given.
fn new_socket(
    listen: ListenAddr,
    cgroup: Option<&InstanceCgroup>,
    slot: u32,
) -> io::Result<Socket> {
    let addr = listen.addr;
    let (kind, protocol) = match listen.is_udp() {
        true => (Type::DGRAM, Protocol::UDP),
        false => (Type::STREAM, Protocol::TCP),
    };
    let domain = Domain::for_address(addr);
    let socket = match cgroup {
        Some(cgroup) => {
            let place = crate::os::cgroup::slot_place(&listen.group_name(), slot);
            cgroup.socket(&place, domain, kind, Some(protocol))?
        }
        None => Socket::new(domain, kind, Some(protocol))?,
    };
    if addr.is_ipv6() {
        // `[::]` means IPv6 only: pair it with `--port` (IPv4) for both families. A dual-stack
        // socket would collide with an IPv4 group on the same port.
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    Ok(socket)
}

/// Fails when any socket already listens on (or is bound to) `addr`: before ck opens its group,
/// so that ck never joins a foreign `SO_REUSEPORT` group or fights a plain listener.
///
/// The probe socket has `SO_REUSEADDR` but not `SO_REUSEPORT`, so it binds despite TIME_WAIT
/// leftovers but not next to a listener.
pub fn ensure_free(addr: ListenAddr) -> Result<(), SocketError> {
    let socket = new_socket(addr, None, 0).map_err(|e| classify(addr, e))?;
    socket
        .bind(&SockAddr::from(addr.addr))
        .map_err(|e| classify(addr, e))?;
    Ok(())
}

/// Binds one member of the group: `SO_REUSEPORT`, bound, blocking (the worker shares the file
/// description, so it gets the flags we set; it picks its own blocking mode). A TCP member takes
/// no connection until [`listen_member`]: what must be in place for its first one (the counter
/// on its cgroup, or the tag the kernel counts its connections by) goes on it in between. A UDP
/// member is in the group once bound. It is created in `slot`'s cgroup of the group under the
/// instance's (`cgroup`), where its connections are counted.
pub fn bind_member(
    addr: ListenAddr,
    cgroup: Option<&InstanceCgroup>,
    slot: u32,
) -> Result<Socket, SocketError> {
    let socket = new_socket(addr, cgroup, slot).map_err(|e| classify(addr, e))?;
    socket.set_reuse_port(true).map_err(|e| classify(addr, e))?;
    socket
        .bind(&SockAddr::from(addr.addr))
        .map_err(|e| classify(addr, e))?;
    Ok(socket)
}

/// The backlog of a slot socket ck made: its own, capped by the kernel at
/// `net.core.somaxconn`. A smaller one means the worker called `listen()` on it again.
pub fn backlog() -> u32 {
    let cap = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(u32::MAX);
    cap.min(BACKLOG as u32)
}

/// Makes a TCP member bound by [`bind_member`] listen: it joins the group (a UDP member joined
/// when bound).
pub fn listen_member(socket: &Socket, addr: ListenAddr) -> Result<(), SocketError> {
    if addr.is_udp() {
        return Ok(());
    }
    socket.listen(BACKLOG).map_err(|e| classify(addr, e))
}

/// Connections waiting in a listening socket's accept queue (`TCP_INFO.tcpi_unacked`, which the
/// kernel fills with the accept backlog for a listener).
pub fn accept_queue_len(socket: &Socket) -> io::Result<u32> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: tcp_info is plain data; all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which is that large, and
    // updates `len`; the fd is a live socket we own.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info.tcpi_unacked)
}

/// Connections a listening socket's kernel has dropped: SYNs (and handshake-ending ACKs) it
/// could not take, mostly because the accept queue was full (`SO_MEMINFO`'s
/// `SK_MEMINFO_DROPS`, which `ss -tlm` shows as `d`). The kernel counts each dropped packet,
/// so a client that retries its SYN counts again.
pub fn listen_drops(socket: &Socket) -> io::Result<u32> {
    use std::os::fd::AsRawFd as _;
    /// `SO_MEMINFO` and the index of the drop count in its array (linux/sock_diag.h).
    const SO_MEMINFO: libc::c_int = 55;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which is that large, and
    // updates `len`; the fd is a live socket we own.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) <= SK_MEMINFO_DROPS * 4 {
        return Err(io::Error::other(
            "SO_MEMINFO has no drop count on this kernel",
        ));
    }
    Ok(info[SK_MEMINFO_DROPS])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A member bound and listening.
    fn open_member(addr: ListenAddr) -> Result<Socket, SocketError> {
        let socket = bind_member(addr, None, 0)?;
        listen_member(&socket, addr)?;
        Ok(socket)
    }

    #[test]
    fn members_share_a_port_and_foreigners_are_detected() {
        let port = free_port();
        let addr: ListenAddr = format!("tcp://127.0.0.1:{port}").parse().unwrap();
        ensure_free(addr).unwrap();
        let a = open_member(addr).unwrap();
        let _b = open_member(addr).unwrap();
        assert!(matches!(ensure_free(addr), Err(SocketError::InUse { .. })));
        drop(a);
        drop(_b);
        ensure_free(addr).unwrap();
        let plain = std::net::TcpListener::bind(addr.addr).unwrap();
        drop(plain);
        let member = open_member(addr).unwrap();
        assert_eq!(accept_queue_len(&member).unwrap(), 0);
        let _c1 = std::net::TcpStream::connect(addr.addr).unwrap();
        let _c2 = std::net::TcpStream::connect(addr.addr).unwrap();
        assert_eq!(accept_queue_len(&member).unwrap(), 2);
        drop(member);
        let plain = std::net::TcpListener::bind(addr.addr).unwrap();
        assert!(matches!(open_member(addr), Err(SocketError::InUse { .. })));
        drop(plain);
    }
}
