//! Weights in the program (`--slow-start`, a canary): `least-conn` compares each candidate's
//! open connections per unit of its weight, so a slot listed three times holds about three
//! times the connections of one listed once (raw counts would hold them equal). Loads the
//! program: root.
use std::net::{SocketAddr, TcpStream};

use ck_common::{ActiveSet, SlotInfo, config_flags, policy};
use socket2::{Domain, Socket, Type};

use super::conns_tests::{PinsGone, settles_to};
use super::{BpfGroup, GroupSpec};

/// A listening `SO_REUSEPORT` socket on loopback port `port` (0: one the kernel picks), with
/// room for every connection the test leaves queued.
fn member(port: u16) -> Socket {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], port)).into())
        .unwrap();
    socket.listen(256).unwrap();
    socket
}

#[test]
fn least_conn_fills_each_slot_in_proportion_to_its_weight() {
    let name = format!("unit-weights-{}", std::process::id());
    let _pins = PinsGone(&name);
    let mut group = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-1", policy::LEAST_CONN))
        .expect("loading as root");
    let light = member(0);
    let port = light.local_addr().unwrap().as_socket().unwrap().port();
    let heavy = member(port);
    group.insert(1, &light).expect("inserting");
    group.insert(2, &heavy).expect("inserting");
    group.attach(&light).expect("attaching the program");
    for (slot, weight) in [(1, 1), (2, 3)] {
        let info = SlotInfo {
            weight,
            ..SlotInfo::default()
        };
        group.write_slot(slot, &info).expect("writing the record");
    }
    let mut set = ActiveSet::EMPTY;
    set.slots[..2].copy_from_slice(&[1, 2]);
    (set.ready_len, set.live_len) = (2, 2);
    let mut listed = ActiveSet::EMPTY;
    listed.slots[..4].copy_from_slice(&[1, 2, 2, 2]);
    (listed.ready_len, listed.live_len) = (4, 4);
    group.publish(&set, &listed, false).expect("publishing");
    let flags = group.config.flags;
    let clients: Vec<TcpStream> = (0..40)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let light_count = settles_to(Some(10), || group.connections(1));
    let heavy_count = group.connections(2);
    drop((clients, light, heavy, group));
    assert_ne!(flags & config_flags::WEIGHTED, 0);
    let (light_count, heavy_count) = (light_count.unwrap(), heavy_count.unwrap());
    assert_eq!(light_count + heavy_count, 40);
    assert!(
        (8..=12).contains(&light_count),
        "weights 1 and 3: {light_count} and {heavy_count} of 40"
    );
}
