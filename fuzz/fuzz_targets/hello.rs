//! A lane's hello and its reply, as a peer sends them before it is a lane.
#![no_main]

use braid::core::wire::{Hello, HelloReply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(hello) = Hello::decode(data) {
        assert_eq!(Hello::decode(&hello.encode()).expect("re-encoded"), hello);
    }
    if let Ok(reply) = HelloReply::decode(data) {
        HelloReply::decode(&reply.encode()).expect("re-encoded");
    }
});
