//! Datagrams received on a lane, through the receiving side of the data path (the
//! datagram header, anti-spoofing, the resequencer).
#![no_main]

use braid::core::engine::Role;
use braid::core::time::Instant;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

#[path = "engine.rs"]
mod engine;

fuzz_target!(|data: &[u8]| {
    let (mut e, lane) = engine::data_path(Role::Exit);
    // The input holds several datagrams, each behind its length (2 bytes,
    // big-endian), so that the resequencer sees sequences.
    let mut rest = data;
    let mut ms = 0;
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let (datagram, tail) = tail.split_at(usize::from(u16::from_be_bytes(*len)).min(tail.len()));
        rest = tail;
        ms += 1;
        let now = Instant::from_nanos(ms * 1_000_000);
        e.handle_lane_datagram(lane, Bytes::copy_from_slice(datagram), now);
        engine::drain(&mut e, now);
    }
    engine::drain(&mut e, Instant::from_nanos(10_000_000_000));
});
