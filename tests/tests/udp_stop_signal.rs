//! A UDP worker gets its stop signal only once what reached its socket before the flip has been
//! read: a server that refuses new flows once told to stop (as a QUIC server refuses new
//! connections after GOAWAY) refuses none through two rolls and a scale up and down, in `flow`
//! mode and in `quic` mode (where a handshake's Initials are kept together by ck's `pending`
//! table across the flip).
use ck_tests::udp_refusals::{Mode, check};

fn refuses_no_flow(mode: Mode) {
    let refusals = check(mode).expect("the check ran");
    println!("{}: {}", mode.name(), refusals.summary());
    assert!(refusals.flows > 100, "{}", refusals.summary());
    assert_eq!(refusals.refused, 0, "{}", refusals.summary());
    assert_eq!(refusals.refused_by_servers, 0, "{}", refusals.summary());
    assert_eq!(
        refusals.moved + refusals.unanswered,
        0,
        "{}",
        refusals.summary()
    );
}

#[test]
fn no_flow_is_refused_through_rolls_and_scaling() {
    refuses_no_flow(Mode::Flow);
}

#[test]
fn no_quic_handshake_is_refused_through_rolls_and_scaling() {
    refuses_no_flow(Mode::Quic);
}
