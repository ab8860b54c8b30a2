//! `--adopt` with UDP groups: servers that bind the UDP port themselves (an unmodified Python
//! server, and the demo worker binding `CK_LISTEN`'s `udp://` address) join the instance's
//! group (the bind hook adds `SO_REUSEPORT`), ck adopts each socket once it is bound (UDP
//! sockets never listen), and from then on every flow keeps its worker: through a scale-up,
//! and another worker's SIGKILL, whose replacement is adopted in turn.

use std::net::SocketAddr;

use ck_tests::{
    Ck, READY_TIMEOUT,
    udp::{Flows, answered_by, moved, pid_of, udp_fleet},
};
use nix::sys::signal::Signal;

/// An unmodified UDP server: binds `127.0.0.1:$PORT` itself (no `SO_REUSEPORT` of its own) and
/// answers every datagram with its slot and pid, as the demo worker does.
const PYTHON_SERVER: &str = r#"
import os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", int(os.environ["PORT"])))
me = ("slot=%s pid=%d\n" % (os.environ.get("CK_SLOT", "?"), os.getpid())).encode()
while True:
    data, peer = s.recvfrom(2048)
    s.sendto(me, peer)
"#;

/// Starts `workers` adopted UDP workers (`app`, or the demo worker when empty) on a free port,
/// waits until they are ready, and returns the instance with its address.
fn adopted_fleet(what: &str, workers: usize, app: &[&str]) -> (Ck, SocketAddr) {
    let mut args = vec!["--adopt"];
    if !app.is_empty() {
        args.push("--");
        args.extend_from_slice(app);
    }
    udp_fleet(what, workers, &args)
}

/// The fleet's flows stay with their workers through a scale-up and another worker's death;
/// new flows reach every worker; the replacement is adopted.
fn flows_keep_their_workers(mut ck: Ck, addr: SocketAddr) {
    let status = ck.status().expect("ck status");
    assert!(status.adopt && status.bpf, "{status:#?}");
    let flows = Flows::open(addr, 32);
    let first = flows.round();
    assert_eq!(answered_by(&first), status.worker_pids(), "{first:?}");
    let log = ck.log();
    assert!(log.contains("(adopted)"), "{log}");

    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    let grown = ck
        .wait_status("3 ready slots", READY_TIMEOUT, |s| {
            s.slots.len() == 3 && s.ready_count() == 3
        })
        .expect("wait for the status");
    let after = flows.round();
    assert_eq!(moved(&first, &after), 0, "{first:?}\n{after:?}");
    let fresh = Flows::open(addr, 32).round();
    assert_eq!(answered_by(&fresh), grown.worker_pids(), "{fresh:?}");

    // A SIGKILL: only the victim's flows move; its replacement is adopted and serves.
    let victim = after
        .iter()
        .flatten()
        .find_map(|a| pid_of(a))
        .expect("an answer");
    ck_tests::sys::signal(victim, Signal::SIGKILL);
    let healed = ck
        .wait_status("the victim replaced", READY_TIMEOUT, |s| {
            s.ready_count() == 3 && !s.worker_pids().contains(&victim)
        })
        .expect("wait for the status");
    let later = flows.round();
    for (was, now) in after.iter().zip(&later) {
        if was.as_deref().and_then(pid_of) != Some(victim) {
            assert_eq!(
                was, now,
                "a flow of a survivor moved:\n{after:?}\n{later:?}"
            );
        }
    }
    let fresh = Flows::open(addr, 32).round();
    assert_eq!(answered_by(&fresh), healed.worker_pids(), "{fresh:?}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn an_unmodified_udp_server_is_adopted_and_its_flows_keep_their_workers() {
    let (ck, addr) = adopted_fleet("udp-adopt-py", 2, &["python3", "-c", PYTHON_SERVER]);
    flows_keep_their_workers(ck, addr);
}

#[test]
fn the_demo_worker_binding_its_udp_address_itself_is_adopted() {
    let (ck, addr) = adopted_fleet("udp-adopt-demo", 2, &[]);
    flows_keep_their_workers(ck, addr);
}
