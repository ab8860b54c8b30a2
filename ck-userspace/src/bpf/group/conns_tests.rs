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

/// Where the counter runs in a test, and how the test's listeners are made for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hook {
    /// The host-wide tracepoint: listeners made anywhere, tagged.
    Host,
    /// The slots' cgroups: each listener made in its slot's cgroup, as ck makes its own.
    Slots,
    /// The workers' cgroups (`--adopt`): each listener made in a worker's cgroup of its slot.
    Workers,
    /// The instance's cgroup with tags (`--adopt` in an instance an earlier image began).
    Tagged,
}

/// One test's instance: its name (and pins), cgroup and hook.
pub(super) struct Place<'a> {
    /// The instance's name.
    pub(super) name: &'a str,
    /// Its cgroup (None: the host-wide hook).
    pub(super) cgroup: Option<&'a InstanceCgroup>,
    /// The hook the counter runs on.
    pub(super) hook: Hook,
}

impl Place<'_> {
    /// Loads the group `spec` (one of [`GroupSpec::tcp`]'s, named after this instance) with
    /// the counter on this place's hook.
    pub(super) fn load(&self, spec: GroupSpec<'_>) -> BpfGroup {
        super::super::conn_hook::test_seam::ask_tags_on_instance(self.hook == Hook::Tagged);
        let group = BpfGroup::load(&GroupSpec {
            cgroup: self.cgroup.map(InstanceCgroup::dir),
            own_sockets: self.hook == Hook::Slots,
            ..spec
        });
        super::super::conn_hook::test_seam::ask_tags_on_instance(false);
        group.expect("loading as root")
    }

    /// A listening `SO_REUSEPORT` socket of [`GROUP`]'s `slot` on a free loopback port, made
    /// where this place's hook wants it (see [`Hook`]) and put in `group` at `slot`.
    pub(super) fn listener(&self, group: &mut BpfGroup, slot: u32) -> Socket {
        let worker = (self.hook == Hook::Workers).then(|| {
            let cgroup = self.cgroup.expect("the workers' hook has a cgroup");
            cgroup.worker(u64::from(slot), None).unwrap()
        });
        let socket = match (&worker, self.cgroup) {
            (Some(worker), _) => {
                let dir = std::fs::File::open(worker.dir()).unwrap();
                let fd = crate::os::fork::socket_in(
                    std::os::fd::AsFd::as_fd(&dir),
                    libc::AF_INET,
                    libc::SOCK_STREAM,
                    0,
                )
                .unwrap();
                Socket::from(fd)
            }
            (None, Some(cgroup)) => {
                let place = crate::os::cgroup::slot_place(GROUP, slot);
                cgroup
                    .socket(&place, Domain::IPV4, Type::STREAM, None)
                    .unwrap()
            }
            (None, None) => Socket::new(Domain::IPV4, Type::STREAM, None).unwrap(),
        };
        socket.set_reuse_port(true).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        // As with `--adopt`: the counter is on the worker's cgroup before its socket listens.
        if let (Some(worker), Some(cgroup)) = (&worker, self.cgroup) {
            let addr = socket.local_addr().unwrap().as_socket().unwrap();
            group.tag_binds(cgroup.dir(), addr, true);
            group.bind_slot(worker.dir(), slot);
        }
        socket.listen(16).unwrap();
        group.insert(slot, &socket).expect("inserting the socket");
        socket
    }
}

/// Runs `check` on each [`Hook`]: the host-wide tracepoint, then, each in an instance cgroup
/// of its own (named after `what`), the slots' cgroups, the workers' and the instance's.
pub(super) fn on_each_hook(what: &str, check: impl Fn(&Place<'_>)) {
    let name = format!("unit-{what}-host-{}", std::process::id());
    check(&Place {
        name: &name,
        cgroup: None,
        hook: Hook::Host,
    });
    for (kind, hook) in [
        ("slots", Hook::Slots),
        ("workers", Hook::Workers),
        ("cg", Hook::Tagged),
    ] {
        let name = format!("unit-{what}-{kind}-{}", std::process::id());
        let cgroup = InstanceCgroup::create(&name, false).expect("creating cgroups as root");
        assert!(cgroup.holds_sockets());
        check(&Place {
            name: &name,
            cgroup: Some(&cgroup),
            hook,
        });
    }
}

/// A listening `SO_REUSEPORT` socket on a free loopback port, made anywhere (for the tests of
/// the select program, whose counter runs on the host-wide hook).
pub(super) fn plain_listener() -> Socket {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
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

fn tagged_listeners_count(place: &Place<'_>) {
    let _pins = PinsGone(place.name);
    let mut group = place.load(GroupSpec::tcp(place.name, GROUP, 1));
    let tagged = place.listener(&mut group, 5);
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
    // On the slots' and the workers' cgroups nothing is written on the listener, so nothing is
    // copied into (and freed with) each connection; elsewhere the tag is, and says the slot.
    let slot = |t: Option<ck_common::ConnTag>| t.map(|t| t.slot);
    match place.hook {
        Hook::Slots | Hook::Workers => {
            assert_eq!((slot(tags.0), slot(tags.1)), (None, None), "{tags:?}")
        }
        Hook::Host | Hook::Tagged => {
            assert_eq!((slot(tags.0), slot(tags.1)), (Some(5), Some(5)), "{tags:?}")
        }
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

fn probe_not_counted(place: &Place<'_>) {
    let probe = bound_socket();
    let base = port_of(&probe) - 2;
    let in_range =
        |port: u16| (u32::from(base)..u32::from(base) + MAX_SLOTS).contains(&port.into());
    let client = std::iter::repeat_with(bound_socket)
        .take(64)
        .find(|c| !in_range(port_of(c)))
        .expect("a free port outside the probe range");
    let _pins = PinsGone(place.name);
    let mut group = place.load(GroupSpec {
        probe_base: base,
        ..GroupSpec::tcp(place.name, GROUP, 1)
    });
    let tagged = place.listener(&mut group, 2);
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

/// `--adopt`: on a worker's cgroup, only the connections to the group's port count (the worker
/// may listen on others), and a connection that closes once the worker's cgroup is gone still
/// leaves the count. (Loads the program: root.)
#[test]
fn a_workers_cgroup_counts_its_groups_port_while_it_has_connections() {
    let name = format!("unit-conns-worker-{}", std::process::id());
    let _pins = PinsGone(&name);
    let cgroup = InstanceCgroup::create(&name, false).expect("creating cgroups as root");
    let place = Place {
        name: &name,
        cgroup: Some(&cgroup),
        hook: Hook::Workers,
    };
    let mut group = place.load(GroupSpec::tcp(&name, GROUP, 1));
    let served = place.listener(&mut group, 1);
    let addr = served.local_addr().unwrap().as_socket().unwrap();
    // The worker's other listener, made in its cgroup too (`w1`, as `Place::listener` named it).
    let worker = cgroup.dir().join("w1");
    let dir = std::fs::File::open(&worker).unwrap();
    let fd = crate::os::fork::socket_in(
        std::os::fd::AsFd::as_fd(&dir),
        libc::AF_INET,
        libc::SOCK_STREAM,
        0,
    )
    .unwrap();
    let other = Socket::from(fd);
    other
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    other.listen(16).unwrap();
    let other_addr = other.local_addr().unwrap().as_socket().unwrap();
    let clients: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let others: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(other_addr).unwrap())
        .collect();
    let accepted: Vec<_> = (0..2).map(|_| served.accept().unwrap()).collect();
    let open = settles(&group, 1, 2);
    // The worker is gone: ck forgets its cgroup and removes it (it holds no process).
    group.unbind_slot(&worker);
    drop(dir);
    std::fs::remove_dir(&worker).expect("removing the worker's cgroup");
    drop((clients, accepted, others, other));
    let closed = settles(&group, 1, 0);
    drop(group);
    assert_eq!(open, Some(2), "the group's port only");
    assert_eq!(
        closed,
        Some(0),
        "closed after the cgroup went, and counted off"
    );
}
