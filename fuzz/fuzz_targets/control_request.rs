//! The control socket's request parser: any bytes a client sends on one line. A request that
//! parses must survive a round trip (what ck's own client sends is what the server reads).
#![no_main]

use ck::control::Request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = serde_json::from_slice::<Request>(data) {
        let text = serde_json::to_string(&request).expect("a request serializes");
        let again: Request = serde_json::from_str(&text).expect("a serialized request parses");
        assert_eq!(again, request);
    }
});
