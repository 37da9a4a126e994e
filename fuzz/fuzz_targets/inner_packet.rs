//! Packets read from the TUN device, through the whole sending side of the data path
//! (parsing, the MSS clamp, classification, pacing, AFMT, ICMP errors).
#![no_main]

use braid::core::engine::Role;
use braid::core::time::Instant;
use braid::core::wire::DATAGRAM_HEADER_LEN;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

#[path = "engine.rs"]
mod engine;

fuzz_target!(|data: &[u8]| {
    let (mut e, _) = engine::data_path(Role::Entry);
    // The same packet twice: as a new flow and as a known one.
    for ms in [1, 30] {
        let now = Instant::from_nanos(ms * 1_000_000);
        let mut datagram = BytesMut::zeroed(DATAGRAM_HEADER_LEN);
        datagram.extend_from_slice(data);
        e.handle_tun_packet(datagram, now);
        engine::drain(&mut e, now);
    }
});
