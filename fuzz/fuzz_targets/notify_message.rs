//! The notify message parser: any datagram a worker (or anyone who reaches its socket) sends.
//! One message per non-empty line, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let messages = ck::os::notify::parse(data);
    let lines = String::from_utf8_lossy(data)
        .lines()
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(messages.len(), lines);
});
