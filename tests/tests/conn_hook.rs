//! Where the kernel counts open connections: by default a `sock_ops` program on the cgroups
//! where ck creates its listening sockets (with `--adopt`, on each worker's, where it binds its
//! own), so the kernel runs it for the fleet's connections and not for a server beside it on
//! the host; `CK_CONN_COUNT=host` puts it on the
//! host-wide tracepoint, which counts the same; a mistyped value is refused, naming the fix,
//! and the scan counts instead. The kernel's own run counts (`bpf_stats`) are the evidence.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use ck_tests::bpf_stats::{self, StatsOn};
use ck_tests::http::hold;
use ck_tests::{local, start_ready, start_ready_with_env};

/// Connections made to the server that is not ck's.
const FOREIGN: usize = 200;

/// `FOREIGN` connections, accepted and closed, to a listener of this test process.
fn foreign_connections() {
    let other = TcpListener::bind("127.0.0.1:0").expect("a listener of our own");
    let addr = other.local_addr().unwrap();
    for _ in 0..FOREIGN {
        let client = TcpStream::connect(addr).expect("connect to our own listener");
        let (server, _) = other.accept().expect("accept");
        drop((client, server));
    }
}

#[test]
fn the_counter_runs_for_the_fleets_connections_and_not_for_the_hosts_others() {
    let _stats = StatsOn::enable().expect("BPF run-time statistics (root)");
    let (mut ck, port, status) =
        start_ready("hook-cgroup", 2, &["--policy", "round-robin"]).expect("start a ready ck");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    assert_eq!(
        status.connection_hook.as_deref(),
        Some("cgroup"),
        "{status:#?}"
    );
    let program = bpf_stats::program_using(ck.name(), "ck_conns_ops", "conns")
        .expect("the instance's sock_ops counter is loaded");

    let before = bpf_stats::read(program).expect("run count");
    foreign_connections();
    let after_foreign = bpf_stats::read(program).expect("run count");
    // ck's own canary and probes may run it a few times meanwhile; the host-wide hook would
    // have run about 10 times per connection (both ends' state changes).
    let foreign_runs = after_foreign.runs - before.runs;
    assert!(
        foreign_runs < FOREIGN as u64 / 10,
        "{foreign_runs} runs of ck's counter for {FOREIGN} connections that are not ck's"
    );

    let (conns, answered) = hold(local(port), 10);
    let after_fleet = bpf_stats::read(program).expect("run count");
    assert!(
        after_fleet.runs - after_foreign.runs >= 10 * 2,
        "{} runs for 10 connections of the fleet (established: 2 each at least)",
        after_fleet.runs - after_foreign.runs
    );
    let status = ck.status().expect("ck status");
    assert_eq!(status.connections(), answered, "{status:#?}");
    drop(conns);
    ck.wait_connections_closed(Duration::from_secs(10))
        .expect("every connection counted closed");
}

#[test]
fn the_host_wide_hook_counts_the_same_and_says_so() {
    let (mut ck, port, status) = start_ready_with_env(
        "hook-host",
        2,
        &["--policy", "round-robin"],
        &[("CK_CONN_COUNT", "host")],
    )
    .expect("start a ready ck");
    assert_eq!(
        status.connection_hook.as_deref(),
        Some("host"),
        "{status:#?}"
    );
    bpf_stats::program_using(ck.name(), "ck_conns", "conns")
        .expect("the instance's tracepoint counter is loaded");
    let (conns, answered) = hold(local(port), 8);
    assert_eq!(answered, BTreeMap::from([(0, 4), (1, 4)]), "round-robin");
    let status = ck.status().expect("ck status");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    assert_eq!(status.connections(), answered, "{status:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("counted on a host-wide tracepoint"), "{text}");
    drop(conns);
    ck.wait_connections_closed(Duration::from_secs(10))
        .expect("every connection counted closed");
}

#[test]
fn a_mistyped_hook_is_refused_naming_the_fix_and_the_scan_counts() {
    let (mut ck, port, _) = start_ready_with_env(
        "hook-typo",
        2,
        &["--policy", "round-robin"],
        &[("CK_CONN_COUNT", "hots")],
    )
    .expect("start a ready ck");
    let (conns, answered) = hold(local(port), 4);
    let status = ck.status().expect("ck status");
    assert!(
        status
            .connection_count
            .starts_with("scan (CK_CONN_COUNT=hots is neither `scan` nor `host`; unset it"),
        "{status:#?}"
    );
    assert_eq!(status.connection_hook, None, "{status:#?}");
    assert_eq!(status.connections(), answered, "{status:#?}");
    drop(conns);
    ck.wait_connections_closed(Duration::from_secs(10))
        .expect("every connection counted closed");
}

/// `-w 1`: the group's one socket is held across its worker's SIGKILL (created once, in the
/// instance's cgroup): the dead worker's connections are counted closed by the cgroup's
/// program once their clients close, and its replacement's are counted on the same socket.
#[test]
fn with_one_worker_the_held_socket_counts_across_a_kill() {
    counts_across_a_kill("hook-one", &[]);
}

/// `--adopt`, `-w 1`: the counter runs on each worker's cgroup, for its own socket. The killed
/// worker's connections, still open when its replacement is ready (its cgroup removed by
/// then), are counted closed once their clients close; the replacement's count on its socket.
#[test]
fn with_adopt_a_killed_workers_connections_are_counted_off_after_its_cgroup_went() {
    counts_across_a_kill("hook-adopt", &["--adopt"]);
}

/// One worker started with `args`, 3 connections held, the worker killed and replaced, then
/// the connections closed: counted exactly all along, and down to none.
fn counts_across_a_kill(name: &str, args: &[&str]) {
    let (mut ck, port, status) = start_ready(name, 1, args).expect("start a ready ck");
    assert_eq!(
        status.connection_hook.as_deref(),
        Some("cgroup"),
        "{status:#?}"
    );
    let (conns, answered) = hold(local(port), 3);
    assert_eq!(answered, BTreeMap::from([(0, 3)]));
    let status = ck.status().expect("ck status");
    assert_eq!(status.connections(), answered, "{status:#?}");
    let victim = status.worker_pid(0);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the worker");
    let status = ck
        .wait_status("a ready replacement", Duration::from_secs(15), |s| {
            s.ready_count() == 1 && s.worker_pid(0) != victim
        })
        .expect("the worker is replaced");
    assert_eq!(
        status.connection_hook.as_deref(),
        Some("cgroup"),
        "{status:#?}"
    );
    drop(conns);
    ck.wait_connections_closed(Duration::from_secs(10))
        .expect("the dead worker's connections counted closed");
    let (conns, answered) = hold(local(port), 2);
    assert_eq!(answered, BTreeMap::from([(0, 2)]));
    let status = ck.status().expect("ck status");
    assert_eq!(status.connections(), answered, "{status:#?}");
    drop(conns);
    ck.wait_connections_closed(Duration::from_secs(10))
        .expect("every connection counted closed");
}
