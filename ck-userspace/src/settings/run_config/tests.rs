//! Unit tests of `run_config`.
use super::*;
use crate::settings::defaults;

#[test]
fn policy_words_and_codes_agree_with_the_flag_and_the_map() {
    use clap::ValueEnum as _;
    for policy in Policy::value_variants() {
        let flag = policy.to_possible_value().unwrap();
        assert_eq!(policy.name(), flag.get_name());
        assert_eq!(serde_json::to_value(policy).unwrap(), policy.name());
        assert_eq!(Policy::from_code(policy.code()), Some(*policy));
    }
    assert_eq!(Policy::from_code(99), None);
}

#[test]
fn parses_listen_addresses() {
    let a: ListenAddr = "tcp://0.0.0.0:8080".parse().unwrap();
    assert_eq!(a.group_name(), "tcp4-8080");
    let b: ListenAddr = "tcp://[::]:8080".parse().unwrap();
    assert_eq!(b.group_name(), "tcp6-8080");
    let c: ListenAddr = "tcp://127.0.0.1:9000".parse().unwrap();
    assert_eq!(c.group_name(), "tcp4-127_0_0_1-9000");
    let d: ListenAddr = "udp://[::]:443".parse().unwrap();
    assert_eq!(d.group_name(), "udp6-443");
    assert_eq!(d.to_string(), "udp://[::]:443");
    assert!(d.is_udp());
    assert!("quic://0.0.0.0:1".parse::<ListenAddr>().is_err());
    assert!("udp://0.0.0.0:0".parse::<ListenAddr>().is_err());
    assert!("tcp://0.0.0.0:0".parse::<ListenAddr>().is_err());
    assert!("tcp://nohost".parse::<ListenAddr>().is_err());
}

#[test]
fn names_are_checked() {
    assert!(validate_name("ck-8080").is_ok());
    assert!(validate_name("a_b").is_ok());
    for bad in ["", "a.b", "a/b", "../x", &"x".repeat(49), "sp ace"] {
        assert!(validate_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn listen_list_refuses_duplicates_and_defaults_to_8080() {
    assert_eq!(
        listen_addrs(&[], &[]).unwrap(),
        vec![ListenAddr::tcp4_any(defaults::PORT)]
    );
    let dup = listen_addrs(&[8080], &["tcp://0.0.0.0:8080".parse().unwrap()]);
    assert!(matches!(dup, Err(ConfigError::DuplicateListen(_))));
    assert_eq!(listen_addrs(&[1, 2], &[]).unwrap().len(), 2);
}

#[test]
fn workers_bounds() {
    assert!(validate_workers(0).is_err());
    assert!(validate_workers(1).is_ok());
    assert!(validate_workers(MAX_WORKERS + 1).is_err());
}

#[test]
fn apps_are_resolved() {
    assert!(resolve_app("sh", vec![]).is_ok());
    assert!(resolve_app("/nonexistent/app", vec![]).is_err());
    assert!(resolve_app("definitely-not-a-command-xyz", vec![]).is_err());
    assert!(resolve_app("/tmp", vec![]).is_err());
}
