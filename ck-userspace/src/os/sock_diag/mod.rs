//! TCP and UDP sockets as the kernel reports them (`NETLINK_SOCK_DIAG`, `inet_diag` dumps): who
//! else listens on a group's port (UDP: is bound to it), every TCP listener of the host with the
//! cgroup that created it (what a worker listens on by itself), which established connections
//! were accepted on a port, and which of those hold bytes their server has not read.
use std::{collections::HashSet, io, net::SocketAddr, os::fd::AsFd};

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla as _,
};
use netlink_packet_sock_diag::{
    SockDiagMessage,
    constants::{AF_INET, AF_INET6, IPPROTO_TCP, IPPROTO_UDP},
    inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags, nlas::Nla},
};
use netlink_sys::{Socket, SocketAddr as NetlinkAddr, protocols::NETLINK_SOCK_DIAG};

/// One listening TCP socket, or one bound (unconnected) UDP socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its local address.
    pub addr: SocketAddr,
    /// Its inode (the number in `/proc/PID/fd/N -> socket:[INODE]`).
    pub inode: u64,
    /// Its owner's uid.
    pub uid: u32,
    /// Its cookie (`SO_COOKIE`).
    pub cookie: u64,
    /// The cgroup (v2 id: the inode of its directory) of the process that created it, where
    /// the kernel says (`INET_DIAG_CGROUP_ID`, Linux 5.9).
    pub cgroup: Option<u64>,
    /// A TCP listener's backlog (the `listen()` argument, capped by `net.core.somaxconn`); 0 for
    /// a UDP socket.
    pub backlog: u32,
    /// Its receive queue as the kernel reports it: for a TCP listener, the connections waiting
    /// in its accept queue; for a UDP socket, the bytes waiting.
    pub queued: u32,
}

/// One established TCP connection, server side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Its local address (the port it was accepted on).
    pub local: SocketAddr,
    /// The client's address.
    pub peer: SocketAddr,
    /// Its inode: 0 while it waits in an accept queue (no process holds it yet).
    pub inode: u64,
}

/// An established TCP connection holding bytes its server has not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unread {
    /// Its local address (the port it was accepted on).
    pub local: SocketAddr,
    /// Its inode (0 while it waits in an accept queue: nobody accepted it yet).
    pub inode: u64,
    /// Bytes received and not read.
    pub bytes: u32,
    /// Time since the last data arrived (`tcpi_last_data_recv`), when the kernel says.
    pub since_data: Option<std::time::Duration>,
}

/// `INET_DIAG_CGROUP_ID`: the attribute that carries a socket's cgroup id.
const INET_DIAG_CGROUP_ID: u16 = 21;
/// Offset of `tcpi_last_data_recv` (u32, ms) in `struct tcp_info`: 8 bytes of u8 fields, then
/// `rto`, `ato`, `snd_mss`, `rcv_mss`, `unacked`, `sacked`, `lost`, `retrans`, `fackets`,
/// `last_data_sent`, `last_ack_sent` (u32 each).
const LAST_DATA_RECV: usize = 8 + 11 * 4;

/// Every TCP socket in LISTEN on `port` in the family of `ipv6`.
pub fn listeners(port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    on_port(IPPROTO_TCP, StateFlags::LISTEN, port, ipv6)
}

/// Every TCP socket in LISTEN on the host (both families), whatever its port.
pub fn all_listeners() -> io::Result<Vec<Listener>> {
    let mut found = Vec::new();
    for ipv6 in [false, true] {
        dump(
            ipv6,
            IPPROTO_TCP,
            StateFlags::LISTEN,
            ExtensionFlags::empty(),
            |response| found.push(listener_of(response)),
        )?;
    }
    Ok(found)
}

/// Every UDP socket bound to `port` and not connected (the kernel reports those in the CLOSE
/// state) in the family of `ipv6`: the UDP sockets that take a group's datagrams.
pub fn bound_udp(port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    on_port(IPPROTO_UDP, StateFlags::CLOSE, port, ipv6)
}

/// Every `protocol` socket in `states` on `port` in the family of `ipv6`.
fn on_port(protocol: u8, states: StateFlags, port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    let mut found = Vec::new();
    dump(
        ipv6,
        protocol,
        states,
        ExtensionFlags::empty(),
        |response| {
            if response.header.socket_id.source_port == port {
                let mut listener = listener_of(response);
                if protocol != IPPROTO_TCP {
                    listener.backlog = 0;
                }
                found.push(listener);
            }
        },
    )?;
    Ok(found)
}

/// The listener (or bound socket) `response` describes.
fn listener_of(response: &InetResponse) -> Listener {
    let id = &response.header.socket_id;
    Listener {
        addr: SocketAddr::new(id.source_address, id.source_port),
        inode: u64::from(response.header.inode),
        uid: response.header.uid,
        cookie: cookie_of(id.cookie),
        cgroup: cgroup_of(response),
        // For a listener the kernel reports its backlog as the send queue.
        backlog: response.header.send_queue,
        queued: response.header.recv_queue,
    }
}

/// The socket's cgroup id, when the kernel sent it.
fn cgroup_of(response: &InetResponse) -> Option<u64> {
    response.nlas.iter().find_map(|nla| match nla {
        Nla::Other(other) if other.kind() == INET_DIAG_CGROUP_ID && other.value_len() == 8 => {
            let mut bytes = [0u8; 8];
            other.emit_value(&mut bytes);
            Some(u64::from_ne_bytes(bytes))
        }
        _ => None,
    })
}

/// Every established TCP connection (both families) on one of `ports` whose receive queue
/// holds bytes its server has not read, with how long ago the last of them arrived; also those
/// whose client has closed its side since (`CLOSE_WAIT`: a client that gave up waiting), since
/// their request is as unread.
pub fn unread(ports: &[u16]) -> io::Result<Vec<Unread>> {
    let mut found = Vec::new();
    for ipv6 in [false, true] {
        dump(
            ipv6,
            IPPROTO_TCP,
            StateFlags::ESTABLISHED | StateFlags::CLOSE_WAIT,
            ExtensionFlags::INFO,
            |response| {
                let id = &response.header.socket_id;
                if response.header.recv_queue == 0 || !ports.contains(&id.source_port) {
                    return;
                }
                found.push(Unread {
                    local: SocketAddr::new(id.source_address, id.source_port),
                    inode: u64::from(response.header.inode),
                    bytes: response.header.recv_queue,
                    since_data: last_data_recv(response),
                });
            },
        )?;
    }
    Ok(found)
}

/// `tcpi_last_data_recv` of the connection's `tcp_info`, when the kernel sent it.
fn last_data_recv(response: &InetResponse) -> Option<std::time::Duration> {
    response.nlas.iter().find_map(|nla| match nla {
        Nla::TcpInfo(info) => {
            let bytes: [u8; 4] = info
                .get(LAST_DATA_RECV..LAST_DATA_RECV + 4)?
                .try_into()
                .ok()?;
            Some(std::time::Duration::from_millis(u64::from(
                u32::from_ne_bytes(bytes),
            )))
        }
        _ => None,
    })
}

/// The inodes of every established TCP socket (both families) whose local port is one of
/// `ports`: the connections accepted on those ports, but ck's own probes (from loopback and a
/// port of the probe range from `probe_base`; 0: none). A connection still waiting in an
/// accept queue has no file yet (inode 0) and is left out.
pub fn established_inodes(ports: &[u16], probe_base: u16) -> io::Result<HashSet<u64>> {
    let probe_ports = u32::from(probe_base)..u32::from(probe_base) + ck_common::MAX_SLOTS;
    let probe = |c: &Connection| {
        probe_base != 0
            && probe_ports.contains(&u32::from(c.peer.port()))
            && c.peer.ip().is_loopback()
    };
    Ok(established(ports)?
        .into_iter()
        .filter(|c| c.inode != 0 && !probe(c))
        .map(|c| c.inode)
        .collect())
}

/// Every established TCP connection (both families) whose local port is one of `ports`: those
/// accepted, and those still waiting in an accept queue (inode 0).
pub fn established(ports: &[u16]) -> io::Result<Vec<Connection>> {
    let mut found = Vec::new();
    for ipv6 in [false, true] {
        dump(
            ipv6,
            IPPROTO_TCP,
            StateFlags::ESTABLISHED,
            ExtensionFlags::empty(),
            |response| {
                let id = &response.header.socket_id;
                if ports.contains(&id.source_port) {
                    found.push(Connection {
                        local: SocketAddr::new(id.source_address, id.source_port),
                        peer: SocketAddr::new(id.destination_address, id.destination_port),
                        inode: u64::from(response.header.inode),
                    });
                }
            },
        )?;
    }
    Ok(found)
}

/// Dumps the `protocol` sockets of one family in `states`, with the attributes `extensions`
/// asks for, calling `visit` for each.
fn dump(
    ipv6: bool,
    protocol: u8,
    states: StateFlags,
    extensions: ExtensionFlags,
    mut visit: impl FnMut(&InetResponse),
) -> io::Result<()> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&NetlinkAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family: if ipv6 { AF_INET6 } else { AF_INET },
            protocol,
            extensions,
            states,
            socket_id: if ipv6 {
                SocketId::new_v6()
            } else {
                SocketId::new_v4()
            },
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;
    let mut answer = vec![0u8; 64 * 1024];
    loop {
        let size = socket.recv(&mut &mut answer[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let message = NetlinkMessage::<SockDiagMessage>::deserialize(&answer[offset..size])
                .map_err(|e| io::Error::other(format!("malformed sock_diag answer: {e}")))?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    visit(&response)
                }
                NetlinkPayload::Done(_) => return Ok(()),
                NetlinkPayload::Error(e) => {
                    return Err(io::Error::other(format!("sock_diag: {e:?}")));
                }
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}

/// The kernel writes the cookie as two host-order u32 halves, low one first.
fn cookie_of(raw: [u8; 8]) -> u64 {
    let low = u32::from_ne_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let high = u32::from_ne_bytes([raw[4], raw[5], raw[6], raw[7]]);
    u64::from(low) | (u64::from(high) << 32)
}

/// The cookie of an open socket (`SO_COOKIE`).
pub fn cookie(socket: &impl AsFd) -> io::Result<u64> {
    use std::os::fd::AsRawFd as _;
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` (8) bytes into `cookie`, a live u64, on a socket
    // we hold.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cookie)
}

/// Which of `pids` holds socket `inode`, and at which fd.
pub fn fd_of(inode: u64, pids: &[u32]) -> Option<(u32, i32)> {
    let target = format!("socket:[{inode}]");
    pids.iter().find_map(|pid| {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten().find_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            (link.as_os_str() == target.as_str())
                .then(|| fd.file_name().to_str()?.parse().ok())
                .flatten()
                .map(|n| (*pid, n))
        })
    })
}

/// The inodes of the sockets process `pid` holds (its `/proc/PID/fd` links `socket:[INODE]`).
pub fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            link.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// The inode of an open socket.
pub fn inode_of(socket: &impl AsFd) -> io::Result<u64> {
    let stat = nix::sys::stat::fstat(socket.as_fd()).map_err(io::Error::from)?;
    Ok(stat.st_ino)
}

/// The pid and command name of a process holding socket `inode` (scans `/proc/*/fd`).
pub fn holder_of(inode: u64) -> Option<(u32, String)> {
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str())
        });
        if holds {
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            return Some((pid, comm.trim().to_string()));
        }
    }
    None
}

#[cfg(test)]
mod tests;
