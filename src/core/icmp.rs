//! ICMP "fragmentation needed" (IPv4) and ICMPv6 "packet too big" replies, written into
//! a caller-supplied buffer.
//!
//! Contract: given the offending packet and the largest size a lane can carry, produce
//! the reply the original sender needs for path MTU discovery (RFC 1191, RFC 8201).
//! No allocation, no I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::packet::{PROTO_ICMP, PROTO_ICMPV6, checksum_add, checksum_finish};

/// Largest reply written: an IPv6 reply may quote the packet up to the IPv6 minimum MTU.
pub const MAX_REPLY_LEN: usize = 1280;
/// RFC 1812 §4.3.2.3: an IPv4 ICMP error should quote as much as fits in 576 bytes.
const MAX_REPLY_LEN_V4: usize = 576;

/// Writes into `out` the "too big" reply to `packet` (whose source and destination are
/// `src` and `dst`), advertising `mtu`. The reply comes from the packet's destination:
/// the gateway writes it into its own TUN device, where a source address of the
/// gateway itself would be dropped by the kernel as martian, while the destination is
/// a plausible sender (PMTU discovery matches the quoted header, not the source).
/// Returns the reply's length, or `None` when the families differ.
pub fn write_too_big(
    packet: &[u8],
    src: IpAddr,
    dst: IpAddr,
    mtu: u16,
    out: &mut [u8; MAX_REPLY_LEN],
) -> Option<usize> {
    match (src, dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => Some(write_v4(packet, src, dst, mtu, out)),
        (IpAddr::V6(src), IpAddr::V6(dst)) => Some(write_v6(packet, src, dst, u32::from(mtu), out)),
        _ => None,
    }
}

fn write_v4(packet: &[u8], to: Ipv4Addr, from: Ipv4Addr, mtu: u16, out: &mut [u8]) -> usize {
    const IP_HDR: usize = 20;
    const ICMP_HDR: usize = 8;
    let quoted = packet.len().min(MAX_REPLY_LEN_V4 - IP_HDR - ICMP_HDR);
    let total = IP_HDR + ICMP_HDR + quoted;
    let ip = &mut out[..IP_HDR];
    ip.fill(0);
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64; // TTL
    ip[9] = PROTO_ICMP;
    ip[12..16].copy_from_slice(&from.octets());
    ip[16..20].copy_from_slice(&to.octets());
    let sum = checksum_finish(checksum_add(0, ip));
    ip[10..12].copy_from_slice(&sum.to_be_bytes());

    let icmp = &mut out[IP_HDR..total];
    icmp[..ICMP_HDR].fill(0);
    icmp[0] = 3; // destination unreachable
    icmp[1] = 4; // fragmentation needed and DF set
    icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
    icmp[ICMP_HDR..].copy_from_slice(&packet[..quoted]);
    let sum = checksum_finish(checksum_add(0, icmp));
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    total
}

fn write_v6(packet: &[u8], to: Ipv6Addr, from: Ipv6Addr, mtu: u32, out: &mut [u8]) -> usize {
    const IP_HDR: usize = 40;
    const ICMP_HDR: usize = 8;
    let quoted = packet.len().min(MAX_REPLY_LEN - IP_HDR - ICMP_HDR);
    let icmp_len = ICMP_HDR + quoted;
    let total = IP_HDR + icmp_len;
    let ip = &mut out[..IP_HDR];
    ip.fill(0);
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&(icmp_len as u16).to_be_bytes());
    ip[6] = PROTO_ICMPV6;
    ip[7] = 64; // hop limit
    ip[8..24].copy_from_slice(&from.octets());
    ip[24..40].copy_from_slice(&to.octets());

    let (ip, icmp) = out[..total].split_at_mut(IP_HDR);
    icmp[..ICMP_HDR].fill(0);
    icmp[0] = 2; // packet too big
    icmp[4..8].copy_from_slice(&mtu.to_be_bytes());
    icmp[ICMP_HDR..].copy_from_slice(&packet[..quoted]);
    // Pseudo-header: source, destination, upper-layer length, next header.
    let mut sum = checksum_add(0, &ip[8..40]);
    sum = checksum_add(sum, &(icmp_len as u32).to_be_bytes());
    sum = checksum_add(sum, &[0, 0, 0, PROTO_ICMPV6]);
    sum = checksum_add(sum, icmp);
    let sum = checksum_finish(sum);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::PacketInfo;
    use crate::core::packet::tests::{tcp_syn_v4, udp_v6};

    #[test]
    fn v4_reply_is_valid_icmp_with_mtu_and_quote() {
        let pkt = tcp_syn_v4(1460);
        let info = PacketInfo::parse(&pkt).expect("valid");
        let mut out = [0u8; MAX_REPLY_LEN];
        let n = write_too_big(&pkt, info.src, info.dst, 1400, &mut out).expect("reply");
        let reply = PacketInfo::parse(&out[..n]).expect("reply is one IP packet");
        assert_eq!(reply.dst, info.src);
        assert_eq!(reply.src, info.dst);
        assert_eq!(reply.proto, PROTO_ICMP);
        let ip = etherparse::Ipv4Slice::from_slice(&out[..n]).expect("v4");
        let icmp = etherparse::Icmpv4Slice::from_slice(ip.payload().payload).expect("icmp");
        assert_eq!(
            icmp.icmp_type(),
            etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1400
                }
            )
        );
        assert_eq!(icmp.payload(), &pkt[..]);
        assert_eq!(checksum_finish(checksum_add(0, ip.payload().payload)), 0);
    }

    #[test]
    fn v6_reply_has_valid_checksum_and_quotes_at_most_min_mtu() {
        let pkt = udp_v6(1400);
        let info = PacketInfo::parse(&pkt).expect("valid");
        let mut out = [0u8; MAX_REPLY_LEN];
        let n = write_too_big(&pkt, info.src, info.dst, 1414, &mut out).expect("reply");
        assert_eq!(n, MAX_REPLY_LEN);
        let ip = etherparse::Ipv6Slice::from_slice(&out[..n]).expect("v6");
        assert_eq!(IpAddr::V6(ip.header().source_addr()), info.dst);
        let icmp = etherparse::Icmpv6Slice::from_slice(ip.payload().payload).expect("icmp");
        assert_eq!(
            icmp.icmp_type(),
            etherparse::Icmpv6Type::PacketTooBig { mtu: 1414 }
        );
        let h = ip.header();
        assert_eq!(
            icmp.icmp_type()
                .calc_checksum(h.source(), h.destination(), icmp.payload())
                .expect("checksum"),
            icmp.checksum()
        );
    }
}
