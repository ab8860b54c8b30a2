//! Several groups and IPv6: `--port A --listen tcp://[::]:B` gives every worker a socket in an
//! IPv4 group and in an IPv6 group, each with the program attached; new connections on either
//! are spread over every worker. The same with `--adopt`, where each worker binds both itself
//! (the bind4 and bind6 hooks add SO_REUSEPORT) and ck adopts both.

use std::net::SocketAddr;

use ck_tests::sys::free_port;
use ck_tests::{burst_pinned, local, start_ready};

fn both_groups_spread(what: &str, extra: &[&str]) {
    let v6_port = free_port();
    let listen = format!("tcp://[::]:{v6_port}");
    let mut args = vec!["--policy", "round-robin", "--listen", &listen];
    args.extend_from_slice(extra);
    let (ck, port, _) = start_ready(what, 2, &args).expect("start a ready ck");
    let status = ck.status().expect("ck status");
    assert_eq!(status.groups.len(), 2, "{status:#?}");
    assert_eq!(status.steering.len(), 2, "{status:#?}");
    assert!(
        status.steering.iter().all(|g| g.attached == Some(true)),
        "{status:#?}"
    );
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v6_port));
    for addr in [local(port), v6] {
        let tally = burst_pinned(addr, 40);
        assert_eq!(tally.ok, 40, "{addr}: {tally:?}");
        assert_eq!(
            (tally.slot(0), tally.slot(1)),
            (20, 20),
            "{addr}: {tally:?}"
        );
    }
}

#[test]
fn an_ipv4_and_an_ipv6_group_both_reach_every_worker() {
    both_groups_spread("groups", &[]);
}

#[test]
fn an_ipv4_and_an_ipv6_group_both_reach_every_adopted_worker() {
    both_groups_spread("groups-adopt", &["--adopt"]);
}
