//! Connections made in a fleet's first moments are counted exactly: a client that starts before
//! ck and opens connections as soon as the port answers (the first ones land while the first
//! worker boots) finds every one of them in `ck status`, per slot, in both modes: on ck's own
//! sockets (tagged for the kernel's count before they listen) and `--adopt` (a worker's own
//! socket tagged when it binds, before it listens and before ck adopts it). The policy is
//! least-conn, which steers by these counts: an uncounted connection would also skew it.

use std::collections::BTreeMap;
use std::thread;
use std::time::Duration;

use ck_tests::http::hold_from_first;
use ck_tests::sys::free_port;
use ck_tests::{READY_TIMEOUT, ck_bin, local, start_on};

/// Connections held from the first moment.
const HELD: usize = 200;

/// Starts a client that holds [`HELD`] connections from the moment the port answers, then ck
/// with `args` on that port; returns the slots' counts in `ck status` (those above 0) and what
/// the workers answered on the connections.
fn counts_from_first(
    what: &str,
    workers: usize,
    args: &[&str],
) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
    let port = free_port();
    let client = thread::spawn(move || hold_from_first(local(port), HELD, READY_TIMEOUT));
    let mut ck = start_on(what, port, args, &[]);
    let (conns, answered) = client.join().expect("the client");
    ck.wait_ready(workers, READY_TIMEOUT);
    let status = ck.wait_status(
        "the held connections counted",
        Duration::from_secs(5),
        |s| s.connections().values().sum::<u64>() == HELD as u64,
    );
    drop(conns);
    // A slot that got none (all came before its worker was ready) answers none.
    let mut counted = status.connections();
    counted.retain(|_, n| *n > 0);
    (counted, answered)
}

#[test]
fn connections_of_the_first_moments_are_counted_on_cks_sockets() {
    let (counted, answered) =
        counts_from_first("first-conns", 2, &["-w", "2", "--policy", "least-conn"]);
    assert_eq!(answered.values().sum::<u64>(), HELD as u64);
    assert_eq!(counted, answered);
}

#[test]
fn connections_of_the_first_moments_are_counted_on_adopted_sockets() {
    let bin = ck_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let args = [
        "-w",
        "2",
        "--adopt",
        "--policy",
        "least-conn",
        "--",
        bin,
        "demo-worker",
    ];
    let (counted, answered) = counts_from_first("first-conns-adopt", 2, &args);
    assert_eq!(answered.values().sum::<u64>(), HELD as u64);
    assert_eq!(counted, answered);
}
