//! Three ck hosts behind a Kubernetes Service's data path (nftables `numgen` DNAT over the
//! ready endpoints, kept current from each host's `/readyz` by the rig's endpoint controller:
//! probes every 200 ms, failure threshold 2, 300 ms propagation), in network namespaces, under
//! load from a client namespace: every scenario (0 failed where ck promises it), and nothing of
//! the rig left afterwards. `cargo xtask fleet` runs the same with Kubernetes' defaults.

mod fleet_support;

use ck_tests::fleet::scenario::TESTED;
use ck_tests::fleet::{FrontKind, RigSpec};

#[test]
fn every_scenario_through_a_kubernetes_service() {
    fleet_support::run(RigSpec::fast(FrontKind::Service), &TESTED);
}
