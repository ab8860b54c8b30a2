//! The connection counter (`bpf::conns`) through a loaded group, on each of its hooks: what
//! the kernel counts for a tagged listener, and what it leaves out (ck's own probes). These
//! load the program: root.
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ck_common::MAX_SLOTS;
use socket2::{Domain, Socket, Type};

use super::super::pins;
use super::{BpfGroup, GroupSpec};
use crate::os::cgroup::InstanceCgroup;

/// Removes an instance's pins when dropped, so a failed check leaves none behind.
pub(super) struct PinsGone<'a>(pub(super) &'a str);

impl Drop for PinsGone<'_> {
    fn drop(&mut self) {
        let _ = pins::remove_instance(self.0);
    }
}

/// The group every test here loads.
pub(super) const GROUP: &str = "tcp4-1";

/// Runs `check` on each hook: the host-wide tracepoint, then an instance cgroup of its own
/// (named after `what`), where the test's listeners are created, counted on the slots'
/// cgroups (`own_sockets`, untagged), then on the instance's (tagged, as with `--adopt`).
pub(super) fn on_each_hook(what: &str, check: impl Fn(&str, Option<&InstanceCgroup>, bool)) {
    check(
        &format!("unit-{what}-host-{}", std::process::id()),
        None,
        false,
    );
    for (kind, own_sockets) in [("slots", true), ("cg", false)] {
        let name = format!("unit-{what}-{kind}-{}", std::process::id());
        let cgroup = InstanceCgroup::create(&name, false).expect("creating cgroups as root");
        assert!(cgroup.holds_sockets());
        check(&name, Some(&cgroup), own_sockets);
    }
}

/// A listening `SO_REUSEPORT` socket on a free loopback port (created in `slot`'s cgroup of
/// [`GROUP`] under `cgroup` if given, as ck creates its own).
pub(super) fn listener(cgroup: Option<&InstanceCgroup>, slot: u32) -> Socket {
    let place = crate::os::cgroup::slot_place(GROUP, slot);
    let socket = match cgroup {
        Some(cgroup) => cgroup
            .socket(&place, Domain::IPV4, Type::STREAM, None)
            .unwrap(),
        None => Socket::new(Domain::IPV4, Type::STREAM, None).unwrap(),
    };
    socket.set_reuse_port(true).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(16).unwrap();
    socket
}

/// Polls `count` until it is `want` (closing is asynchronous: the FINs cross loopback).
fn settles(group: &BpfGroup, slot: u32, want: i64) -> Option<i64> {
    settles_to(Some(want), || group.connections(slot))
}

/// Polls `read` until it gives `want` or 5 s pass; the last reading.
pub(super) fn settles_to<T: PartialEq>(want: T, read: impl Fn() -> T) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = read();
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Connections of a tagged listener count for its slot while they are open, including
/// those not accepted yet; an untagged listener's count for nothing. (Loads the program:
/// root.)
#[test]
fn a_tagged_listeners_connections_count_until_they_close() {
    on_each_hook("conns", tagged_listeners_count);
}

fn tagged_listeners_count(name: &str, cgroup: Option<&InstanceCgroup>, own_sockets: bool) {
    let scope = cgroup.map(InstanceCgroup::dir);
    let _pins = PinsGone(name);
    let mut group = BpfGroup::load(&GroupSpec {
        cgroup: scope,
        own_sockets,
        ..GroupSpec::tcp(name, GROUP, 1)
    })
    .expect("loading as root");
    let tagged = listener(cgroup, 5);
    group.insert(5, &tagged).expect("inserting the socket");
    let addr = tagged.local_addr().unwrap().as_socket().unwrap();
    let untagged = TcpListener::bind("127.0.0.1:0").unwrap();
    let clients: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let others: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(untagged.local_addr().unwrap()).unwrap())
        .collect();
    let queued = settles(&group, 5, 3);
    let accepted: Vec<_> = (0..3).map(|_| tagged.accept().unwrap()).collect();
    let after_accept = group.connections(5);
    let conns = group.conns.as_ref().expect("counting");
    let tags = (conns.tag_of(&tagged), conns.tag_of(&accepted[0].0));
    drop((clients, accepted, others));
    let closed = settles(&group, 5, 0);
    let elsewhere: Vec<_> = (0..MAX_SLOTS)
        .filter_map(|s| group.connections(s))
        .collect();
    drop(group);
    let queued = queued.expect("the kernel counts here (both hooks load on this machine)");
    assert_eq!(queued, 3, "queued ones count");
    assert_eq!(after_accept, Some(3));
    assert_eq!(closed, Some(0));
    assert!(elsewhere.iter().all(|n| *n == 0), "{elsewhere:?}");
    // On the slots' cgroups nothing is written on the listener, so nothing is copied into (and
    // freed with) each connection; elsewhere the tag is, and says the slot.
    let slot = |t: Option<ck_common::ConnTag>| t.map(|t| t.slot);
    match own_sockets && cgroup.is_some() {
        true => assert_eq!((slot(tags.0), slot(tags.1)), (None, None), "{tags:?}"),
        false => assert_eq!((slot(tags.0), slot(tags.1)), (Some(5), Some(5)), "{tags:?}"),
    }
}

/// A loopback socket bound to a port the kernel picks, with `SO_REUSEADDR` as ck's probes
/// have.
fn bound_socket() -> Socket {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket
}

/// The port `socket` is bound to.
fn port_of(socket: &Socket) -> u16 {
    socket.local_addr().unwrap().as_socket().unwrap().port()
}

/// A connection from a port of the probe range on loopback is ck's probe: never counted,
/// while a client's next to it is. (Loads the program: root.)
///
/// The ports are the kernel's choice, not fixed ones, as other tests run alongside: the
/// probe's names the range (its port is slot 2's), and the client's is one outside it.
#[test]
fn a_probe_connection_is_not_counted() {
    on_each_hook("conns-probe", probe_not_counted);
}

fn probe_not_counted(name: &str, cgroup: Option<&InstanceCgroup>, own_sockets: bool) {
    let probe = bound_socket();
    let base = port_of(&probe) - 2;
    let in_range =
        |port: u16| (u32::from(base)..u32::from(base) + MAX_SLOTS).contains(&port.into());
    let client = std::iter::repeat_with(bound_socket)
        .take(64)
        .find(|c| !in_range(port_of(c)))
        .expect("a free port outside the probe range");
    let scope = cgroup.map(InstanceCgroup::dir);
    let _pins = PinsGone(name);
    let mut group = BpfGroup::load(&GroupSpec {
        probe_base: base,
        cgroup: scope,
        own_sockets,
        ..GroupSpec::tcp(name, GROUP, 1)
    })
    .expect("loading as root");
    let tagged = listener(cgroup, 2);
    group.insert(2, &tagged).expect("inserting the socket");
    let addr = tagged.local_addr().unwrap();
    probe.connect(&addr).unwrap();
    client.connect(&addr).unwrap();
    // Both established (the tracepoint has seen both) once both are accepted.
    let accepted: Vec<_> = (0..2).map(|_| tagged.accept().unwrap()).collect();
    let open = group.connections(2);
    drop((probe, client, accepted));
    let closed = settles(&group, 2, 0);
    drop(group);
    assert_eq!(open, Some(1), "the client's connection only");
    assert_eq!(closed, Some(0));
}
