//! Reads from a TUN device with offloads (a virtio-net header, then a packet or a TCP
//! super-packet), cut into packets and merged again as the receiving side merges
//! before its TUN writes: every packet must be written once, in order, and a merged
//! packet must cut back into packets of the same lengths. (What the cut packets do in
//! the data path is `inner_packet`'s: they are ordinary packets.)
#![no_main]

use braid::core::offload::{Coalescer, TunRead, VNET_HDR_LEN};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(read) = TunRead::parse(data) else {
        return;
    };
    let mut coalescer = Coalescer::new(true);
    let mut packets = Vec::new();
    for i in 0..read.segments() {
        let mut packet = BytesMut::new();
        read.write_segment(i, &mut packet);
        assert_eq!(packet.len(), read.segment_len(i), "a packet of its length");
        let packet = packet.freeze();
        coalescer.push(packet.clone());
        packets.push(packet);
    }
    let mut written = 0;
    coalescer.flush(|write| {
        let bytes: Vec<u8> = write.parts.iter().flat_map(|p| p.iter().copied()).collect();
        if write.packets == 1 {
            assert_eq!(&bytes[VNET_HDR_LEN..], &packets[written][..], "a packet written as it came");
        } else {
            let merged = TunRead::parse(&bytes).expect("a merged packet parses");
            assert_eq!(merged.segments(), write.packets, "merged packets cut back");
            for i in 0..write.packets {
                assert_eq!(merged.segment_len(i), packets[written + i].len());
            }
        }
        written += write.packets;
    });
    assert_eq!(written, packets.len(), "every packet written");
});
