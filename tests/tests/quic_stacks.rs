//! QUIC stacks other than quinn as servers in a UDP group, `--udp-mode flow`, with HTTP/3
//! connections held open through rolls (the quinn client):
//!
//! - ngtcp2's example HTTP/3 server, unmodified, under `--adopt`: it binds the port itself (ck's
//!   bind hook adds the `SO_REUSEPORT` it never sets). Stopped with a signal it ignores, each
//!   old server keeps its connections until ck's `--udp-linger` finds its slot quiet and kills
//!   it; stopped with SIGTERM, on which it dies, the connections it held break (what an app
//!   that cannot drain costs).
//! - aioquic (`examples/python/h3_server.py`) on ck's socket: it finishes its connections on
//!   SIGTERM, so nothing breaks.

use ck_tests::quic_client::{finish, load};
use ck_tests::quic_servers::{Stop, aioquic, ngtcp2};
use ck_tests::sys::TempDir;
use ck_tests::udp::udp_fleet;
use ck_tests::{Ck, READY_TIMEOUT};

/// Two workers of ngtcp2's server stopped with `stop`, under 32 held connections through two
/// rolls; returns ck and what the clients saw.
fn rolled_ngtcp2(what: &str, stop: Stop) -> (Ck, ck_tests::quic_client::Seen) {
    let htdocs = TempDir::new(what);
    let args = ngtcp2(htdocs.path(), stop).expect("writing the document root");
    rolled(what, &args)
}

/// Two workers started with `args`, under 32 held connections through two rolls; returns ck
/// and what the clients saw.
fn rolled(what: &str, args: &[String]) -> (Ck, ck_tests::quic_client::Seen) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ck, addr) = udp_fleet(what, 2, &args);
    let client = load(addr, 6000, &[]);
    std::thread::sleep(std::time::Duration::from_millis(800));
    let before = ck.status().worker_pids();
    ck.ctl_ok(&["reload"]);
    ck.ctl_ok(&["reload"]);
    let seen = finish(client);
    let mut ck = ck;
    let now = ck.wait_status("two new workers, the old ones gone", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.worker_pids().is_disjoint(&before)
    });
    assert!(now.bpf, "{now:#?}");
    (ck, seen)
}

#[test]
fn an_ngtcp2_server_that_ignores_the_stop_signal_keeps_every_connection_through_rolls() {
    let (mut ck, seen) = rolled_ngtcp2("quic-ngtcp2", Stop::IgnoredUntilQuiet);
    let log = ck.log();
    assert!(ck.status().adopt);
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{log}");
    assert!(seen.ok > 500 && seen.handshakes >= 32, "{seen:#?}");
    assert!(log.contains("(adopted)"), "{log}");
    assert!(
        log.contains("no datagram and no connection for --udp-linger"),
        "the old servers are killed once quiet: {log}"
    );
    ck.ctl_ok(&["stop"]);
    ck.wait_clean_exit();
}

#[test]
fn an_ngtcp2_server_that_dies_on_sigterm_breaks_the_connections_it_held() {
    let (mut ck, seen) = rolled_ngtcp2("quic-ngtcp2-term", Stop::Term);
    assert!(seen.broken > 0, "{seen:#?}");
    ck.ctl_ok(&["stop"]);
    ck.wait_clean_exit();
}

#[test]
fn an_aioquic_server_finishes_its_connections_through_rolls() {
    let (mut ck, seen) = rolled("quic-aioquic", &aioquic());
    let log = ck.log();
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{log}");
    assert!(seen.ok > 500 && seen.handshakes >= 32, "{seen:#?}");
    // On SIGTERM each old server exited by itself once its connections were closed.
    assert!(log.contains("reason=exit 0"), "{log}");
    ck.ctl_ok(&["stop"]);
    ck.wait_clean_exit();
}
