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
//!
//! And ngtcp2's example client against the quinn example server: clients that move to a new
//! port mid-connection (NAT rebinding) while the fleet grows keep their connections in `quic`
//! mode (the cookie routes them); in `flow` mode the new port is a new flow, and most break.

use ck_tests::quic_client::{finish, load, ngtcp2_rebinding, quic_bin};
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
    let before = ck.status().expect("ck status").worker_pids();
    ck.ctl_ok(&["reload"]).expect("ck reload");
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let seen = finish(client);
    let mut ck = ck;
    let now = ck
        .wait_status("two new workers, the old ones gone", READY_TIMEOUT, |s| {
            s.ready_count() == 2 && s.worker_pids().is_disjoint(&before)
        })
        .expect("wait for the status");
    assert!(now.bpf, "{now:#?}");
    (ck, seen)
}

#[test]
fn an_ngtcp2_server_that_ignores_the_stop_signal_keeps_every_connection_through_rolls() {
    let (mut ck, seen) = rolled_ngtcp2("quic-ngtcp2", Stop::IgnoredUntilQuiet);
    let log = ck.log();
    assert!(ck.status().expect("ck status").adopt);
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{log}");
    assert!(seen.ok > 500 && seen.handshakes >= 32, "{seen:#?}");
    assert!(log.contains("(adopted)"), "{log}");
    assert!(
        log.contains("no datagram and no connection for --udp-linger"),
        "the old servers are killed once quiet: {log}"
    );
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn an_ngtcp2_server_that_dies_on_sigterm_breaks_the_connections_it_held() {
    let (mut ck, seen) = rolled_ngtcp2("quic-ngtcp2-term", Stop::Term);
    assert!(seen.broken > 0, "{seen:#?}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn an_aioquic_server_finishes_its_connections_through_rolls() {
    let (mut ck, seen) = rolled("quic-aioquic", &aioquic());
    let log = ck.log();
    assert_eq!(seen.broken, 0, "{seen:#?}\n--- ck log ---\n{log}");
    assert!(seen.ok > 500 && seen.handshakes >= 32, "{seen:#?}");
    // On SIGTERM each old server exited by itself once its connections were closed.
    assert!(log.contains("reason=exit 0"), "{log}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

/// A fleet of 4 quinn example servers in `mode` against 16 of ngtcp2's clients that move to a
/// new port mid-connection (`grow`: while the fleet grows to 6); their answers.
fn rebinding_clients(what: &str, mode: &str, grow: bool) -> Vec<Option<String>> {
    let bin = quic_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let (mut ck, addr) = udp_fleet(what, 4, &["--udp-mode", mode, "--", bin, "serve"]);
    let answers = ngtcp2_rebinding(addr, 16, || {
        if grow {
            ck.ctl_ok(&["scale", "6"]).expect("ck scale");
        }
    });
    if grow {
        ck.wait_ready(6, READY_TIMEOUT)
            .expect("wait for ready slots");
    }
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    answers
}

#[test]
fn ngtcp2_clients_that_move_to_a_new_port_keep_their_connections_in_quic_mode() {
    let quic = rebinding_clients("quic-ngtcp2-client", "quic", true);
    assert!(quic.iter().all(Option::is_some), "{quic:?}");
    // The same clients in flow mode: each new port is a new flow, most reach another worker.
    let flow = rebinding_clients("quic-ngtcp2-client-flow", "flow", false);
    assert!(flow.iter().any(Option::is_none), "{flow:?}");
}
