//! Steering as the kernel sees it: a foreign member of the group is reported and never
//! selected; a program detached behind ck's back is noticed by the canary and attached again;
//! the program writes no log record unless `--bpf-log` asks for them.

use std::net::SocketAddr;
use std::os::fd::AsRawFd as _;
use std::time::Duration;

use aya::maps::{Map, MapData, RingBuf};
use ck_tests::ck::pins_dir;
use ck_tests::http::burst_without;
use ck_tests::sys::poll_until;
use ck_tests::{burst_pinned, get_new_conn, local, start_one_starting, start_ready};
use socket2::{Domain, Socket, Type};

/// A listener of the test's own on `0.0.0.0:port` with `SO_REUSEPORT`: it joins ck's group.
fn foreign_member(port: u16) -> Socket {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.set_reuse_port(true).expect("SO_REUSEPORT");
    let addr: SocketAddr = ([0, 0, 0, 0], port).into();
    socket.bind(&addr.into()).expect("joining the group");
    socket.listen(128).expect("listen");
    socket.set_nonblocking(true).expect("nonblocking");
    socket
}

/// Connections waiting in `socket`'s accept queue (accepts and drops them).
fn accepted(socket: &Socket) -> usize {
    std::iter::from_fn(|| socket.accept().ok()).count()
}

fn inode(socket: &Socket) -> u64 {
    let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let link = std::fs::read_link(path).expect("fd link");
    let link = link.to_string_lossy();
    link.trim_start_matches("socket:[")
        .trim_end_matches(']')
        .parse()
        .expect("socket inode")
}

#[test]
fn a_foreign_member_of_the_group_is_reported_and_never_selected() {
    let (mut ck, port, _) =
        start_ready("foreign", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    let foreign = foreign_member(port);
    let ino = inode(&foreign);
    let status = ck
        .wait_status(
            "the foreign listener reported",
            Duration::from_secs(5),
            |s| s.foreign.iter().any(|f| f.inode == ino),
        )
        .expect("wait for the status");
    let reported = status
        .foreign
        .iter()
        .find(|f| f.inode == ino)
        .expect("reported");
    assert_eq!(reported.pid, Some(std::process::id()), "{status:#?}");
    let tally = burst_pinned(local(port), 200);
    assert_eq!(tally.ok, 200, "{tally:?}");
    assert_eq!(accepted(&foreign), 0, "the foreign socket got connections");
    let logged = poll_until(Duration::from_secs(5), Duration::from_millis(50), || {
        ck.log()
            .contains("a socket that is not ck's listens on the group's port")
    });
    assert!(logged, "{}", ck.log());
    drop(foreign);
    ck.wait_status("the foreign listener gone", Duration::from_secs(5), |s| {
        s.foreign.is_empty()
    })
    .expect("wait for the status");
}

/// How long the detach, and then the re-attach, may take to show.
const REATTACH_WAIT: Duration = Duration::from_secs(20);

#[test]
fn a_program_detached_behind_cks_back_is_attached_again() {
    let (mut ck, port, _) =
        start_ready("detach", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    let member = foreign_member(port);
    // SO_DETACH_REUSEPORT_BPF on any member detaches the group's program (the kernel wants
    // an int-sized value, which it ignores).
    let unused: libc::c_int = 0;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `unused`, a live c_int, on a
    // socket we own.
    let rc = unsafe {
        libc::setsockopt(
            member.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DETACH_REUSEPORT_BPF,
            (&unused as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "detach: {}", std::io::Error::last_os_error());
    // A canary a second: one to see the detach and one to confirm the re-attach, each of which
    // may find the previous one's 4-tuple still in TIME_WAIT and wait a tick; a loaded
    // machine (the whole suite on 2 cores) stretches the ticks, so the waits are generous.
    let noticed = poll_until(REATTACH_WAIT, Duration::from_millis(20), || {
        ck.log()
            .contains("BPF steering is not in effect on the group")
    });
    assert!(noticed, "{}", ck.log());
    let status = ck
        .wait_status("steering back on", REATTACH_WAIT, |s| s.bpf)
        .expect("wait for the status");
    assert!(
        status.steering.iter().all(|g| g.attached == Some(true)),
        "{status:#?}"
    );

    // While the group had no program the kernel hashed over every member, the foreign one
    // included (ck's canary may have landed there): only what comes after counts.
    accepted(&member);
    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    let tally = burst_without(burst_pinned, local(port), 200, 1, "drained");
    assert_eq!(tally.slot(0), 200, "{tally:?}");
    assert_eq!(accepted(&member), 0, "the foreign socket got connections");
}

/// The program's log ring buffer of instance `name`: the `AYA_LOGS` map of the program that
/// uses the instance's pinned `sockets` map.
fn log_ring(name: &str, group: &str) -> RingBuf<MapData> {
    let pinned =
        MapData::from_pin(pins_dir(name).join(group).join("sockets")).expect("sockets pin");
    let sockets_id = pinned.info().expect("map info").id();
    for program in aya::programs::loaded_programs().flatten() {
        let Ok(Some(ids)) = program.map_ids() else {
            continue;
        };
        if !ids.contains(&sockets_id) {
            continue;
        }
        for id in ids {
            let info = aya::maps::MapInfo::from_id(id).expect("map info");
            if info.name_as_str() == Some("AYA_LOGS") {
                let map = Map::RingBuf(MapData::from_id(id).expect("ring buffer"));
                return RingBuf::try_from(map).expect("a ring buffer");
            }
        }
    }
    panic!("no AYA_LOGS map found for instance {name}");
}

#[test]
fn the_program_writes_no_log_record_without_bpf_log() {
    let (ck, port, status) =
        start_one_starting("nolog", &[]).expect("start ck with a starting worker");
    let mut ring = log_ring(ck.name(), &status.groups[0]);
    // Connections while nothing is ready fall back to the starting worker: each one is a
    // fallback the program would log.
    let answer = get_new_conn(local(port)).expect("the queued connection is answered");
    assert_eq!(Some(answer.pid), status.slots[0].pid);
    let status = ck.status().expect("ck status");
    assert!(status.slots[0].fallbacks >= 1, "{status:#?}");
    let mut records = 0;
    while ring.next().is_some() {
        records += 1;
    }
    assert_eq!(
        records, 0,
        "the program wrote log records without --bpf-log"
    );
}
