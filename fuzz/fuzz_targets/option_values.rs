//! The parsers of `ck run`'s option values (durations, backoff, sizes, listen addresses, probe
//! kinds): the first byte picks the parser, the rest is the text. Each must return a value or an
//! error message, never panic; a listen address that parses must parse again from its display.
#![no_main]

use std::str::FromStr as _;

use ck::settings::run_config::ListenAddr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((which, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    match which % 5 {
        0 => {
            let _ = ck_worker::units::duration::parse_duration(text);
        }
        1 => {
            let _ = ck::settings::restart_policy::parse_backoff(text);
        }
        2 => {
            let _ = ck_worker::units::size::parse_size(text);
        }
        3 => {
            if let Ok(addr) = ListenAddr::from_str(text) {
                let again = ListenAddr::from_str(&addr.to_string()).expect("display parses");
                assert_eq!(again, addr);
            }
        }
        _ => {
            let _ = ck::settings::health::ProbeKind::from_str(text);
        }
    }
});
