//! Three ck hosts behind HAProxy (`option httpchk GET /readyz` on each host's metrics port,
//! checks every 200 ms), in network namespaces, under load from a client namespace: every
//! scenario through `mode tcp` (0 failed where ck promises it), ck's rolling replacement through
//! `mode http`, and nothing of the rigs left afterwards. `cargo xtask fleet` runs the same with
//! operators' timings.

mod fleet_support;

use ck_tests::fleet::scenario::{Kind, TESTED};
use ck_tests::fleet::{FrontKind, RigSpec};

#[test]
fn every_scenario_through_haproxy_mode_tcp() {
    fleet_support::run(RigSpec::fast(FrontKind::HaproxyTcp), &TESTED);
}

#[test]
fn rolling_replacement_through_haproxy_mode_http() {
    fleet_support::run(RigSpec::fast(FrontKind::HaproxyHttp), &[Kind::Rolling]);
}
