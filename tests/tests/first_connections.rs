//! Connections made in a fleet's first moments are counted exactly: a client that starts before
//! ck and opens connections as soon as the port answers (the first ones land while the first
//! worker boots) finds every one of them in `ck status`, per slot, in both modes: on ck's own
//! sockets (tagged for the kernel's count before they listen) and `--adopt` (a worker's own
//! socket tagged when it binds, before it listens and before ck adopts it). The policy is
//! least-conn, which steers by these counts: an uncounted connection would also skew it. (The
//! checks are `ck_tests::promises::counts`', shared with the promise suite.)

use ck_tests::promises::counts;

#[test]
fn connections_of_the_first_moments_are_counted_on_cks_sockets() {
    counts::first_connections_counted_on_cks_sockets();
}

#[test]
fn connections_of_the_first_moments_are_counted_on_adopted_sockets() {
    counts::first_connections_counted_with_adopt();
}
