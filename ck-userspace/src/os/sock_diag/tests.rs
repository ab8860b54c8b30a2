//! Unit tests of `sock_diag`.
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
fn tells_a_queued_connection_from_an_accepted_one() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let first = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let second = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    let found = established(&[port]).unwrap();
    let by_peer = |client: &std::net::TcpStream| {
        let peer = client.local_addr().unwrap();
        found.iter().find(|c| c.peer == peer).copied()
    };
    let (first, second) = (by_peer(&first).unwrap(), by_peer(&second).unwrap());
    assert_eq!(first.inode, inode_of(&accepted).unwrap(), "{found:?}");
    assert_eq!(second.inode, 0, "still queued: {found:?}");
    let listening = listeners(port, false).unwrap();
    assert_eq!(listening[0].queued, 1, "{listening:?}");
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

#[test]
fn a_connection_with_bytes_not_read_is_found_also_once_its_client_left_until_they_are_read() {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut accepted, _) = listener.accept().unwrap();
    let inode = inode_of(&accepted).unwrap();
    assert!(unread(&[port]).unwrap().is_empty());
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut found = Vec::new();
    for _ in 0..200 {
        found = unread(&[port]).unwrap();
        if !found.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].inode, found[0].bytes), (inode, 18), "{found:?}");
    assert!(found[0].since_data.is_some(), "{found:?}");
    // The client gives up: its request is still unread (CLOSE_WAIT).
    drop(client);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let found = unread(&[port]).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].inode, inode);
    let mut buf = [0u8; 64];
    assert_eq!(accepted.read(&mut buf).unwrap(), 18);
    assert!(unread(&[port]).unwrap().is_empty());
}
