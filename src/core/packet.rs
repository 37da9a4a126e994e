//! Checked view of one inner IP packet (IPv4 or IPv6) as read from the TUN device or a
//! lane datagram.
//!
//! Contract: [`PacketInfo::parse`] accepts a buffer only if it holds exactly one IP
//! packet (the header's length fields cover the whole buffer); afterwards every
//! accessor is infallible. Parsing is delegated to etherparse (IPv6 extension headers,
//! fragments); this module adds the flow key, the TCP MSS clamp and the fields the data
//! path needs. No allocation, no I/O.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

use etherparse::{IpNumber, IpSlice, LenSource};

/// IP protocol numbers braid looks at.
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

/// Identity of a flow: a hash of (src, dst, proto, src port, dst port), or of
/// (src, dst, proto) for fragments and protocols without ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey(pub u64);

/// Why a buffer is not one well-formed IP packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("not an IP packet: {0}")]
    Header(String),
    #[error("IP length fields say {declared} bytes but the buffer holds {actual}")]
    LengthMismatch { declared: usize, actual: usize },
}

/// What the data path needs to know about one packet, read once at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    /// (source, destination) port for TCP and UDP packets that are not fragments.
    pub ports: Option<(u16, u16)>,
    /// Inner DSCP (6 bits).
    pub dscp: u8,
    /// Total length of the packet in bytes.
    pub len: usize,
    /// IPv4 DF bit; always true for IPv6, where routers never fragment.
    pub dont_fragment: bool,
    /// Offset of the transport header when the packet is not a fragment.
    transport_offset: Option<usize>,
    /// The flow, hashed once at parsing: classifier, scheduler and reordering share it.
    flow: FlowKey,
}

/// What a packet carries for its application ([`PacketInfo::data`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data {
    /// Bytes of data.
    pub len: usize,
    /// It ends its flow: a TCP FIN or RST.
    pub ends: bool,
    /// For TCP, the sequence number after its data: a retransmission does not
    /// carry the flow further.
    pub seq_end: Option<u32>,
}

/// Fixed seed so that flow keys, and everything derived from them, are reproducible.
const FLOW_HASH_SEED: u64 = 0x6272_6169_645f_666c;

impl PacketInfo {
    /// Parses `buf`, which must hold exactly one IP packet.
    pub fn parse(buf: &[u8]) -> Result<PacketInfo, PacketError> {
        let ip = IpSlice::from_slice(buf).map_err(|e| PacketError::Header(e.to_string()))?;
        let (header_len, dscp, dont_fragment) = match &ip {
            IpSlice::Ipv4(v4) => {
                let h = v4.header();
                let opts = v4.extensions().auth.map_or(0, |a| a.slice().len());
                (h.slice().len() + opts, h.dcp().value(), h.dont_fragment())
            }
            IpSlice::Ipv6(v6) => (
                v6.header().slice().len() + v6.extensions().slice().len(),
                v6.header().dscp().value(),
                true,
            ),
        };
        let payload = ip.payload();
        let declared = header_len + payload.payload.len();
        if declared != buf.len() && payload.len_source != LenSource::Slice {
            return Err(PacketError::LengthMismatch {
                declared,
                actual: buf.len(),
            });
        }
        let proto = payload.ip_number.0;
        let whole = !payload.fragmented;
        let l4 = payload.payload;
        let ports = match payload.ip_number {
            IpNumber::TCP | IpNumber::UDP if whole && l4.len() >= 4 => Some((
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            )),
            _ => None,
        };
        let (src, dst) = (ip.source_addr(), ip.destination_addr());
        Ok(PacketInfo {
            src,
            dst,
            proto,
            ports,
            dscp,
            len: buf.len(),
            dont_fragment,
            transport_offset: whole.then_some(header_len),
            flow: hash_flow(src, dst, proto, ports),
        })
    }

    /// True for destinations that a router never forwards: IPv4 169.254/16 and
    /// 224.0.0.0/24, IPv6 fe80::/10 and link-scope multicast (ff02::/16).
    pub fn to_link_local(&self) -> bool {
        match self.dst {
            IpAddr::V4(a) => a.is_link_local() || (a.octets()[..3] == [224, 0, 0]),
            IpAddr::V6(a) => {
                let s = a.segments();
                (s[0] & 0xffc0) == 0xfe80 || (s[0] & 0xff0f) == 0xff02
            }
        }
    }

    pub fn is_ipv6(&self) -> bool {
        self.dst.is_ipv6()
    }

    /// The flow this packet belongs to.
    pub fn flow_key(&self) -> FlowKey {
        self.flow
    }

    /// The application data `buf` (the packet this info was parsed from) carries:
    /// the transport's payload for TCP and UDP, the IP payload for the rest.
    pub fn data(&self, buf: &[u8]) -> Data {
        const FIN_OR_RST: u8 = 0x05;
        const SYN: u8 = 0x02;
        let Some(off) = self.transport_offset else {
            return Data {
                len: self.len,
                ends: false,
                seq_end: None,
            };
        };
        let l4 = buf.get(off..).unwrap_or_default();
        let (len, ends, seq_end) = match self.proto {
            PROTO_TCP if l4.len() >= 20 => {
                let header = usize::from(l4[12] >> 4) * 4;
                let len = l4.len().saturating_sub(header);
                let seq = u32::from_be_bytes([l4[4], l4[5], l4[6], l4[7]]);
                let syn = u32::from(l4[13] & SYN != 0);
                let end = seq.wrapping_add(syn).wrapping_add(len as u32);
                (len, l4[13] & FIN_OR_RST != 0, Some(end))
            }
            PROTO_UDP => (l4.len().saturating_sub(8), false, None),
            _ => (l4.len(), false, None),
        };
        Data { len, ends, seq_end }
    }

    /// For a TCP SYN in `buf` (the packet this info was parsed from) with an MSS
    /// option: where its TCP header starts, where the option's value is, and the
    /// value; `None` for anything else.
    fn syn_mss(&self, buf: &[u8]) -> Option<(usize, usize, u16)> {
        const SYN: u8 = 0x02;
        if self.proto != PROTO_TCP {
            return None;
        }
        let off = self.transport_offset?;
        let tcp = buf.get(off..)?;
        if tcp.len() < 20 || tcp[13] & SYN == 0 {
            return None;
        }
        let data_offset = usize::from(tcp[12] >> 4) * 4;
        if data_offset < 20 || data_offset > tcp.len() {
            return None;
        }
        let mut i = 20;
        while i < data_offset {
            match tcp[i] {
                0 => return None, // end of option list
                1 => i += 1,      // no-op
                kind => {
                    let len = usize::from(*tcp.get(i + 1)?);
                    if len < 2 || i + len > data_offset {
                        return None;
                    }
                    if kind == 2 && len == 4 {
                        let mss = u16::from_be_bytes([tcp[i + 2], tcp[i + 3]]);
                        return Some((off, off + i + 2, mss));
                    }
                    i += len;
                }
            }
        }
        None
    }

    /// True if `buf` is a TCP SYN whose MSS option exceeds `max_mss()`, which is
    /// asked only for SYNs: [`PacketInfo::clamp_tcp_mss`] would change it.
    pub fn needs_mss_clamp(&self, buf: &[u8], max_mss: impl FnOnce() -> u16) -> bool {
        self.syn_mss(buf).is_some_and(|(_, _, mss)| mss > max_mss())
    }

    /// Lowers the MSS option of a TCP SYN in `buf` (the packet this info was parsed
    /// from) to at most `max_mss()`, fixing the TCP checksum incrementally (RFC 1624).
    /// `max_mss` is asked only for SYNs. Returns true if the packet was changed.
    pub fn clamp_tcp_mss(&self, buf: &mut [u8], max_mss: impl FnOnce() -> u16) -> bool {
        let Some((tcp, at, old)) = self.syn_mss(buf) else {
            return false;
        };
        let max_mss = max_mss();
        if old <= max_mss {
            return false;
        }
        buf[at..at + 2].copy_from_slice(&max_mss.to_be_bytes());
        let sum_at = tcp + 16;
        let sum = u16::from_be_bytes([buf[sum_at], buf[sum_at + 1]]);
        let sum = checksum_replace(sum, old, max_mss);
        buf[sum_at..sum_at + 2].copy_from_slice(&sum.to_be_bytes());
        true
    }
}

/// The flow key of (source, destination, protocol, ports): fragments and protocols
/// without ports hash only the first three.
fn hash_flow(src: IpAddr, dst: IpAddr, proto: u8, ports: Option<(u16, u16)>) -> FlowKey {
    let mut h = foldhash::fast::FixedState::with_seed(FLOW_HASH_SEED).build_hasher();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.write_u32(s.to_bits());
            h.write_u32(d.to_bits());
        }
        (s, d) => {
            h.write_u128(ip_bits(s));
            h.write_u128(ip_bits(d));
        }
    }
    h.write_u8(proto);
    if let Some((sp, dp)) = ports {
        h.write_u32((u32::from(sp) << 16) | u32::from(dp));
    }
    FlowKey(h.finish())
}

/// An address as 128 bits (IPv4 in the low 32), for hashing and prefix lookups.
pub fn ip_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(a.to_bits()),
        IpAddr::V6(a) => a.to_bits(),
    }
}

/// Incremental update of an Internet checksum when one 16-bit word changes from `old`
/// to `new` (RFC 1624, equation 3: HC' = ~(~HC + ~m + m')).
pub fn checksum_replace(checksum: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!checksum) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Ones'-complement sum of `data` folded into 16 bits, starting from `initial`. Only
/// the last piece of a checksummed whole may have an odd length.
pub fn checksum_add(initial: u32, data: &[u8]) -> u32 {
    // Four bytes at a time in the machine's byte order, which the compiler vectorises:
    // the ones'-complement sum does not depend on byte order but for a final swap
    // (RFC 1071), and 2^16 is 1 modulo 2^16 - 1, so 32-bit words fold to the same
    // 16-bit sum. A 64-bit accumulator cannot overflow on a packet.
    let mut words = data.chunks_exact(4);
    let mut native: u64 = 0;
    for w in &mut words {
        native += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut sum = u64::from(initial) + u64::from(u16::from_be(fold(native) as u16));
    let mut pairs = words.remainder().chunks_exact(2);
    for c in &mut pairs {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = pairs.remainder() {
        sum += u64::from(*last) << 8;
    }
    fold(sum) as u32
}

/// A ones'-complement sum folded into 16 bits.
fn fold(mut sum: u64) -> u64 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// Final Internet checksum from a running sum.
pub fn checksum_finish(sum: u32) -> u16 {
    !(checksum_add(sum, &[]) as u16)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    pub fn tcp_syn_v4(mss: u16) -> Vec<u8> {
        let builder = PacketBuilder::ipv4([198, 18, 0, 2], [198, 19, 0, 2], 64)
            .tcp(40000, 80, 1, 65535)
            .syn()
            .options(&[
                etherparse::TcpOptionElement::MaximumSegmentSize(mss),
                etherparse::TcpOptionElement::Noop,
                etherparse::TcpOptionElement::WindowScale(7),
            ])
            .expect("options fit");
        let mut out = Vec::new();
        builder.write(&mut out, &[]).expect("write to vec");
        out
    }

    fn v4(addr: &str) -> [u8; 4] {
        addr.parse::<std::net::Ipv4Addr>()
            .expect("IPv4 address")
            .octets()
    }

    /// A TCP segment with 100 bytes of payload.
    pub fn tcp_v4(src: &str, sport: u16, dst: &str, dport: u16) -> Vec<u8> {
        let builder = PacketBuilder::ipv4(v4(src), v4(dst), 64).tcp(sport, dport, 1, 65535);
        let mut out = Vec::new();
        builder.write(&mut out, &[0; 100]).expect("write to vec");
        out
    }

    pub fn icmp_echo_v4(src: &str, dst: &str) -> Vec<u8> {
        let builder = PacketBuilder::ipv4(v4(src), v4(dst), 64).icmpv4_echo_request(1, 1);
        let mut out = Vec::new();
        builder.write(&mut out, &[0; 56]).expect("write to vec");
        out
    }

    pub fn udp_v6(payload_len: usize) -> Vec<u8> {
        let builder = PacketBuilder::ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .udp(5000, 5001);
        let mut out = Vec::new();
        builder
            .write(&mut out, &vec![7u8; payload_len])
            .expect("write to vec");
        out
    }

    fn tcp_checksum_ok(buf: &[u8]) -> bool {
        let ip = etherparse::Ipv4Slice::from_slice(buf).expect("ipv4");
        let tcp = etherparse::TcpSlice::from_slice(ip.payload().payload).expect("tcp");
        let h = ip.header();
        tcp.calc_checksum_ipv4(h.source(), h.destination())
            .expect("checksum")
            == tcp.checksum()
    }

    #[test]
    fn parses_tcp_v4_fields() {
        let pkt = tcp_syn_v4(1460);
        let info = PacketInfo::parse(&pkt).expect("valid");
        assert_eq!(info.proto, PROTO_TCP);
        assert_eq!(info.ports, Some((40000, 80)));
        assert_eq!(info.len, pkt.len());
        assert!(!info.is_ipv6());
    }

    #[test]
    fn parses_udp_v6_and_keys_flows_by_five_tuple() {
        let pkt = udp_v6(100);
        let info = PacketInfo::parse(&pkt).expect("valid");
        assert!(info.is_ipv6());
        assert!(info.dont_fragment);
        assert_eq!(info.ports, Some((5000, 5001)));
        let mut other = pkt.clone();
        other[40..42].copy_from_slice(&5002u16.to_be_bytes()); // another source port
        let other_info = PacketInfo::parse(&other).expect("valid");
        assert_ne!(info.flow_key(), other_info.flow_key());
        assert_eq!(
            info.flow_key(),
            PacketInfo::parse(&pkt).expect("valid").flow_key()
        );
    }

    #[test]
    fn rejects_garbage_truncation_and_trailing_bytes() {
        assert!(PacketInfo::parse(&[]).is_err());
        assert!(PacketInfo::parse(&[0x45, 0, 0]).is_err());
        assert!(PacketInfo::parse(&[0x60; 30]).is_err());
        let pkt = udp_v6(10);
        assert!(PacketInfo::parse(&pkt[..pkt.len() - 1]).is_err());
        let mut two = pkt.clone();
        two.extend_from_slice(&pkt);
        assert!(matches!(
            PacketInfo::parse(&two),
            Err(PacketError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn mss_clamp_lowers_large_mss_and_keeps_checksum_valid() {
        let mut pkt = tcp_syn_v4(1460);
        let info = PacketInfo::parse(&pkt).expect("valid");
        assert!(info.clamp_tcp_mss(&mut pkt, || 1380));
        let tcp = etherparse::TcpSlice::from_slice(&pkt[20..]).expect("tcp");
        let mss = tcp.options_iterator().find_map(|o| match o {
            Ok(etherparse::TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
            _ => None,
        });
        assert_eq!(mss, Some(1380));
        assert!(tcp_checksum_ok(&pkt));
    }

    #[test]
    fn mss_clamp_leaves_small_mss_and_non_syn_alone() {
        let mut pkt = tcp_syn_v4(1200);
        let before = pkt.clone();
        let info = PacketInfo::parse(&pkt).expect("valid");
        assert!(!info.clamp_tcp_mss(&mut pkt, || 1380));
        assert_eq!(pkt, before);
        let mut udp = udp_v6(40);
        let info = PacketInfo::parse(&udp).expect("valid");
        assert!(!info.clamp_tcp_mss(&mut udp, || 100));
    }

    #[test]
    fn wide_checksum_matches_the_sum_of_16_bit_words_at_every_length() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in 0..data.len() {
            let slice = &data[..len];
            let mut reference = 0xfeed_u32;
            for (i, byte) in slice.iter().enumerate() {
                reference += u32::from(*byte) << if i % 2 == 0 { 8 } else { 0 };
            }
            while reference > 0xffff {
                reference = (reference & 0xffff) + (reference >> 16);
            }
            assert_eq!(checksum_add(0xfeed, slice), reference, "{len} bytes");
        }
    }

    #[test]
    fn data_is_the_transports_payload_and_a_fin_ends_the_flow() {
        let tcp = tcp_v4("198.18.1.2", 40000, "203.0.113.1", 443);
        let info = PacketInfo::parse(&tcp).expect("tcp");
        let data = info.data(&tcp);
        assert_eq!((data.len, data.ends, data.seq_end), (100, false, Some(101)));
        let fin = {
            let builder = PacketBuilder::ipv4(v4("203.0.113.1"), v4("198.18.1.2"), 64)
                .tcp(443, 40000, 1, 65535)
                .fin();
            let mut out = Vec::new();
            builder.write(&mut out, &[0; 10]).expect("write to vec");
            out
        };
        let info = PacketInfo::parse(&fin).expect("tcp");
        let data = info.data(&fin);
        assert_eq!((data.len, data.ends), (10, true));
        let udp = udp_v6(300);
        let info = PacketInfo::parse(&udp).expect("udp");
        assert_eq!(
            info.data(&udp),
            Data {
                len: 300,
                ends: false,
                seq_end: None
            }
        );
    }

    #[test]
    fn incremental_checksum_matches_full_recompute() {
        let data = [0x12u8, 0x34, 0xab, 0xcd, 0x00, 0x01];
        let full = checksum_finish(checksum_add(0, &data));
        let changed = [0x12u8, 0x34, 0x05, 0x64, 0x00, 0x01];
        let recomputed = checksum_finish(checksum_add(0, &changed));
        assert_eq!(checksum_replace(full, 0xabcd, 0x0564), recomputed);
    }
}
