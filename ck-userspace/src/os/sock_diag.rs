//! TCP and UDP sockets as the kernel reports them (`NETLINK_SOCK_DIAG`, `inet_diag` dumps): who
//! else listens on a group's port (UDP: is bound to it), and which established connections
//! were accepted on it.
use std::{collections::HashSet, io, net::SocketAddr, os::fd::AsFd};

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_sock_diag::{
    SockDiagMessage,
    constants::{AF_INET, AF_INET6, IPPROTO_TCP, IPPROTO_UDP},
    inet::{ExtensionFlags, InetRequest, InetResponse, SocketId, StateFlags},
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
    /// Its receive queue (`idiag_rqueue`): for a TCP listener the connections waiting to be
    /// accepted, for a UDP socket the bytes of the datagrams waiting to be read.
    pub queued: u32,
}

/// Every TCP socket in LISTEN on `port` in the family of `ipv6`.
pub fn listeners(port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    on_port(IPPROTO_TCP, StateFlags::LISTEN, port, ipv6)
}

/// Every UDP socket bound to `port` and not connected (the kernel reports those in the CLOSE
/// state) in the family of `ipv6`: the UDP sockets that take a group's datagrams.
pub fn bound_udp(port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    on_port(IPPROTO_UDP, StateFlags::CLOSE, port, ipv6)
}

/// Every `protocol` socket in `states` on `port` in the family of `ipv6`.
fn on_port(protocol: u8, states: StateFlags, port: u16, ipv6: bool) -> io::Result<Vec<Listener>> {
    let mut found = Vec::new();
    dump(ipv6, protocol, states, |response| {
        let id = &response.header.socket_id;
        if id.source_port == port {
            found.push(Listener {
                addr: SocketAddr::new(id.source_address, id.source_port),
                inode: u64::from(response.header.inode),
                uid: response.header.uid,
                cookie: cookie_of(id.cookie),
                queued: response.header.recv_queue,
            });
        }
    })?;
    Ok(found)
}

/// The inodes of every established TCP socket (both families) whose local port is one of
/// `ports`: the connections accepted on those ports, but ck's own probes (from loopback and a
/// port of the probe range from `probe_base`; 0: none). A connection still waiting in an
/// accept queue has no file yet (inode 0) and is left out.
pub fn established_inodes(ports: &[u16], probe_base: u16) -> io::Result<HashSet<u64>> {
    let probe_ports = u32::from(probe_base)..u32::from(probe_base) + ck_common::MAX_SLOTS;
    let mut found = HashSet::new();
    for ipv6 in [false, true] {
        dump(ipv6, IPPROTO_TCP, StateFlags::ESTABLISHED, |response| {
            let id = &response.header.socket_id;
            let inode = u64::from(response.header.inode);
            let probe = probe_base != 0
                && probe_ports.contains(&u32::from(id.destination_port))
                && id.destination_address.is_loopback();
            if inode != 0 && !probe && ports.contains(&id.source_port) {
                found.insert(inode);
            }
        })?;
    }
    Ok(found)
}

/// Dumps the `protocol` sockets of one family in `states`, calling `visit` for each.
fn dump(
    ipv6: bool,
    protocol: u8,
    states: StateFlags,
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
            extensions: ExtensionFlags::empty(),
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
mod tests {
    use super::*;

    #[test]
    fn finds_a_listener_by_port_and_inode() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let inode = inode_of(&listener).unwrap();
        let found = listeners(port, false).unwrap();
        assert!(
            found
                .iter()
                .any(|l| l.inode == inode && l.addr.port() == port),
            "{found:?}"
        );
        assert_eq!(
            holder_of(inode).map(|(pid, _)| pid),
            Some(std::process::id())
        );
        drop(listener);
        assert!(
            listeners(port, false)
                .unwrap()
                .iter()
                .all(|l| l.inode != inode)
        );
    }

    #[test]
    fn finds_a_bound_udp_socket_and_not_a_connected_one_or_a_tcp_listener() {
        let bound = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = bound.local_addr().unwrap().port();
        let inode = inode_of(&bound).unwrap();
        let found = bound_udp(port, false).unwrap();
        assert!(found.iter().any(|l| l.inode == inode), "{found:?}");
        assert_eq!(found[0].cookie, cookie(&bound).unwrap());
        assert!(
            listeners(port, false).unwrap().is_empty(),
            "no TCP listener"
        );
        assert_eq!(found[0].queued, 0, "nothing to read");
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"queued", ("127.0.0.1", port)).unwrap();
        let queued = bound_udp(port, false).unwrap();
        assert!(queued[0].queued > 0, "a datagram waits: {queued:?}");
        let mut buf = [0u8; 16];
        assert_eq!(bound.recv(&mut buf).unwrap(), 6);
        assert_eq!(bound_udp(port, false).unwrap()[0].queued, 0, "read");
        bound.connect("127.0.0.1:9").unwrap();
        assert!(
            bound_udp(port, false).unwrap().is_empty(),
            "a connected socket takes only its peer's datagrams"
        );
    }
}
