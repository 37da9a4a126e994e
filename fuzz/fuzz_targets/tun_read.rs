//! Reads from a TUN device with offloads (a virtio-net header, then a packet or a TCP
//! super-packet), cut into packets and through the sending side of the data path; the
//! packets also go through the merging the receiving side does before its TUN writes,
//! and every merged packet must cut back into what went in.
#![no_main]

use braid::core::engine::Role;
use braid::core::offload::{Coalescer, TunRead};
use braid::core::time::Instant;
use braid::core::wire::DATAGRAM_HEADER_LEN;
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

#[path = "engine.rs"]
mod engine;

fuzz_target!(|data: &[u8]| {
    let Ok(read) = TunRead::parse(data) else {
        return;
    };
    let (mut e, _) = engine::data_path(Role::Entry);
    let now = Instant::from_nanos(1_000_000);
    let mut coalescer = Coalescer::new(true);
    let mut packets = Vec::new();
    for i in 0..read.segments() {
        let mut datagram = BytesMut::zeroed(DATAGRAM_HEADER_LEN + read.segment_len(i));
        read.write_segment(i, &mut datagram[DATAGRAM_HEADER_LEN..]);
        let packet = Bytes::copy_from_slice(&datagram[DATAGRAM_HEADER_LEN..]);
        coalescer.push(packet.clone());
        packets.push(packet);
        e.handle_tun_packet(datagram, now);
        engine::drain(&mut e, now);
    }
    let mut written = 0;
    coalescer.flush(|write| {
        if write.packets == 1 {
            assert_eq!(write.body, &packets[written][..], "a packet written as it came");
        } else {
            let merged = TunRead::parse(write.head).expect("a merged packet parses");
            assert_eq!(merged.segments(), write.packets, "merged packets cut back");
            for i in 0..write.packets {
                assert_eq!(merged.segment_len(i), packets[written + i].len());
            }
        }
        written += write.packets;
    });
    assert_eq!(written, packets.len(), "every packet written");
});
