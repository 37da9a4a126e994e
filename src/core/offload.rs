//! TUN offloads: the virtio-net header in front of every packet of a TUN device opened
//! with `IFF_VNET_HDR`, the cutting of the TCP super-packets the kernel hands over once
//! the device claims TSO ([`TunRead`]), and the merging of consecutive TCP segments of
//! a flow into one super-packet that the kernel takes in one write ([`Coalescer`]).
//! Both save the kernel's per-packet work, which is most of a gateway's CPU: one read
//! instead of up to 45, one trip through the receiving host's stack instead of 45.
//!
//! The rules are Linux's own GSO and GRO, as wireguard-go's `tun/offload_linux.go`
//! applies them for WireGuard: segments get consecutive sequence numbers and IPv4 ids,
//! FIN and PSH only on the last, CWR only on the first; only segments that Linux's GRO
//! would merge are merged (equal headers but for length, id and checksum; ACK, and PSH
//! only on the last; contiguous sequence numbers; equal sizes but the last), and only
//! with valid checksums, so that the kernel never gives a corrupt packet a fresh one.
//! Pure: bytes in, bytes out.

use std::io::IoSlice;

use bytes::{Bytes, BytesMut};

use super::packet::{PROTO_TCP, checksum_add, checksum_finish};

/// Length of `struct virtio_net_hdr`, TUN's default header size.
pub const VNET_HDR_LEN: usize = 10;
/// The header of a packet that needs nothing done.
pub const PLAIN_VNET_HDR: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];
/// The largest packet the kernel hands over or takes: the IP length field's limit.
pub const MAX_SUPER_PACKET: usize = 65_535;

const F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
/// Set beside a TCP GSO type when the flow uses ECN; the CWR rule covers it.
const GSO_ECN: u8 = 0x80;

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
const TCP_CWR: u8 = 0x80;
/// Offset of the checksum in a TCP header.
const TCP_CHECKSUM: usize = 16;
const IPV4_DF: u8 = 0x40;

/// Why a read from the TUN device cannot be taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    #[error("shorter than its virtio-net header")]
    NoHeader,
    #[error("GSO type {0} was not asked for")]
    UnsupportedGso(u8),
    #[error("a TCP super-packet whose IP and TCP headers do not parse")]
    BadTcpHeaders,
    #[error("a checksum to complete outside the packet")]
    BadChecksumOffsets,
}

/// One read from a TUN device with offloads: a packet as it is, a packet whose
/// transport checksum is left to braid, or a TCP super-packet to cut into segments.
#[derive(Debug)]
pub struct TunRead<'a> {
    packet: &'a [u8],
    kind: ReadKind,
}

#[derive(Debug, Clone, Copy)]
enum ReadKind {
    Plain,
    /// The checksum at `start + offset` covers everything from `start` and holds the
    /// pseudo-header's sum so far.
    Checksum {
        start: usize,
        offset: usize,
    },
    Tcp(TcpLayout),
}

/// Where a TCP packet's parts are.
#[derive(Debug, Clone, Copy)]
struct TcpLayout {
    v6: bool,
    /// Length of the IP header, where the TCP header starts.
    ip_len: usize,
    /// Length of the IP and TCP headers, where the payload starts.
    headers: usize,
    /// Payload bytes per segment.
    mss: usize,
    segments: usize,
}

impl<'a> TunRead<'a> {
    /// Takes apart `buf`: the virtio-net header, then the packet.
    pub fn parse(buf: &'a [u8]) -> Result<TunRead<'a>, OffloadError> {
        let (hdr, packet) = buf
            .split_first_chunk::<VNET_HDR_LEN>()
            .ok_or(OffloadError::NoHeader)?;
        let field = |at: usize| usize::from(u16::from_ne_bytes([hdr[at], hdr[at + 1]]));
        let kind = match hdr[1] & !GSO_ECN {
            GSO_NONE if hdr[0] & F_NEEDS_CSUM == 0 => ReadKind::Plain,
            GSO_NONE => {
                let (start, offset) = (field(6), field(8));
                if start + offset + 2 > packet.len() {
                    return Err(OffloadError::BadChecksumOffsets);
                }
                ReadKind::Checksum { start, offset }
            }
            gso @ (GSO_TCPV4 | GSO_TCPV6) => {
                let layout = tcp_layout(packet).ok_or(OffloadError::BadTcpHeaders)?;
                let mss = field(4);
                if layout.v6 != (gso == GSO_TCPV6) || mss == 0 {
                    return Err(OffloadError::BadTcpHeaders);
                }
                let payload = packet.len() - layout.headers;
                ReadKind::Tcp(TcpLayout {
                    mss,
                    segments: payload.div_ceil(mss).max(1),
                    ..layout
                })
            }
            other => return Err(OffloadError::UnsupportedGso(other)),
        };
        Ok(TunRead { packet, kind })
    }

    /// How many packets this read carries.
    pub fn segments(&self) -> usize {
        match self.kind {
            ReadKind::Tcp(t) => t.segments,
            _ => 1,
        }
    }

    /// Length of packet `i` (below [`Self::segments`]).
    pub fn segment_len(&self, i: usize) -> usize {
        match self.kind {
            ReadKind::Tcp(t) => t.headers + t.payload_range(i, self.packet.len()).len(),
            _ => self.packet.len(),
        }
    }

    /// Appends packet `i` to `out`, headers and checksums complete: built where it
    /// ends up, without a zeroed buffer to write it into first.
    pub fn write_segment(&self, i: usize, out: &mut BytesMut) {
        let at = out.len();
        match self.kind {
            ReadKind::Plain => out.extend_from_slice(self.packet),
            ReadKind::Checksum { start, offset } => {
                out.extend_from_slice(self.packet);
                let out = &mut out[at..];
                let sum = checksum_finish(checksum_add(0, &out[start..]));
                // Zero means "no checksum" to UDP; Linux sends its equal, all ones.
                let sum = if sum == 0 { 0xffff } else { sum };
                out[start + offset..start + offset + 2].copy_from_slice(&sum.to_be_bytes());
            }
            ReadKind::Tcp(t) => t.write_segment(self.packet, i, out),
        }
    }
}

impl TcpLayout {
    fn payload_range(&self, i: usize, len: usize) -> std::ops::Range<usize> {
        let start = (self.headers + i * self.mss).min(len);
        start..(start + self.mss).min(len)
    }

    fn write_segment(&self, packet: &[u8], i: usize, out: &mut BytesMut) {
        let payload = self.payload_range(i, packet.len());
        let at = out.len();
        out.extend_from_slice(&packet[..self.headers]);
        out.extend_from_slice(&packet[payload]);
        let out = &mut out[at..];
        let ip_len = self.ip_len;
        let len = out.len();
        if self.v6 {
            put_u16(out, 4, (len - ip_len) as u16);
        } else {
            put_u16(out, 2, len as u16);
            put_u16(out, 4, get_u16(out, 4).wrapping_add(i as u16));
            put_ipv4_checksum(out);
        }
        let tcp = ip_len;
        let seq = u32::from_be_bytes([out[tcp + 4], out[tcp + 5], out[tcp + 6], out[tcp + 7]]);
        let seq = seq.wrapping_add((i * self.mss) as u32);
        out[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
        if i + 1 != self.segments {
            out[tcp + 13] &= !(TCP_FIN | TCP_PSH);
        }
        if i != 0 {
            out[tcp + 13] &= !TCP_CWR;
        }
        put_u16(out, tcp + TCP_CHECKSUM, 0);
        let sum = checksum_add(pseudo_header_sum(out, self.v6, len - ip_len), &out[tcp..]);
        put_u16(out, tcp + TCP_CHECKSUM, checksum_finish(sum));
    }
}

/// The layout of a TCP packet over IPv4 without options' worth of checks, or over
/// IPv6 without extension headers: what a TCP super-packet from the kernel is.
fn tcp_layout(packet: &[u8]) -> Option<TcpLayout> {
    let (v6, ip_len) = match packet.first()? >> 4 {
        4 => (false, usize::from(packet[0] & 0x0f) * 4),
        6 => (true, 40),
        _ => return None,
    };
    let proto = *packet.get(if v6 { 6 } else { 9 })?;
    if proto != PROTO_TCP || ip_len < 20 {
        return None;
    }
    let doff = usize::from(*packet.get(ip_len + 12)? >> 4) * 4;
    let headers = ip_len + doff;
    (doff >= 20 && headers <= packet.len()).then_some(TcpLayout {
        v6,
        ip_len,
        headers,
        mss: 0,
        segments: 1,
    })
}

fn get_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

fn put_u16(buf: &mut [u8], at: usize, value: u16) {
    buf[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Rewrites the checksum of the IPv4 header at the start of `packet`.
fn put_ipv4_checksum(packet: &mut [u8]) {
    let ihl = usize::from(packet[0] & 0x0f) * 4;
    put_u16(packet, 10, 0);
    let sum = checksum_finish(checksum_add(0, &packet[..ihl]));
    put_u16(packet, 10, sum);
}

/// The folded sum of the TCP pseudo-header of `packet` for `tcp_len` bytes of TCP.
fn pseudo_header_sum(packet: &[u8], v6: bool, tcp_len: usize) -> u32 {
    let addresses = if v6 { &packet[8..40] } else { &packet[12..20] };
    let tcp_len = tcp_len as u32;
    checksum_add(
        u32::from(PROTO_TCP) + (tcp_len >> 16) + (tcp_len & 0xffff),
        addresses,
    )
}

/// A TCP segment that Linux's GRO could merge with its neighbours: ACK and at most
/// PSH set, payload, IPv4 with DF and no options or IPv6 without extension headers,
/// and valid checksums.
#[derive(Debug, Clone, Copy)]
struct Mergeable {
    layout: TcpLayout,
    seq: u32,
    payload: usize,
    push: bool,
}

impl Mergeable {
    fn parse(packet: &[u8], layout: TcpLayout) -> Option<Mergeable> {
        let (ip_len, v6) = (layout.ip_len, layout.v6);
        let declared = if v6 {
            40 + usize::from(get_u16(packet, 4))
        } else {
            usize::from(get_u16(packet, 2))
        };
        let unfragmented_df = v6 || (packet[6] == IPV4_DF && packet[7] == 0);
        let flags = packet[ip_len + 13];
        let payload = packet.len() - layout.headers;
        if declared != packet.len()
            || !unfragmented_df
            || (!v6 && ip_len != 20)
            || flags & !TCP_PSH != TCP_ACK
            || payload == 0
        {
            return None;
        }
        let ip_valid = v6 || checksum_add(0, &packet[..20]) == 0xffff;
        let tcp_sum = checksum_add(
            pseudo_header_sum(packet, v6, packet.len() - ip_len),
            &packet[ip_len..],
        );
        if !ip_valid || tcp_sum != 0xffff {
            return None;
        }
        let tcp = ip_len;
        Some(Mergeable {
            layout,
            seq: u32::from_be_bytes([
                packet[tcp + 4],
                packet[tcp + 5],
                packet[tcp + 6],
                packet[tcp + 7],
            ]),
            payload,
            push: flags & TCP_PSH != 0,
        })
    }
}

/// True if the TCP packets `a` and `b` (laid out as `x` and `y`) are of one connection
/// and direction.
fn same_tcp_flow(a: &[u8], x: &TcpLayout, b: &[u8], y: &TcpLayout) -> bool {
    let addresses = if x.v6 { 8..40 } else { 12..20 };
    x.v6 == y.v6
        && x.ip_len == y.ip_len
        && a[addresses.clone()] == b[addresses]
        && a[x.ip_len..x.ip_len + 4] == b[y.ip_len..y.ip_len + 4]
}

/// True if `next`'s headers are `head`'s but for what differs between segments of one
/// super-packet: IP length, id and checksum, sequence number, PSH and TCP checksum.
fn same_headers(head: &[u8], next: &[u8], layout: &TcpLayout) -> bool {
    let (tcp, headers) = (layout.ip_len, layout.headers);
    let ip_equal = if layout.v6 {
        head[..4] == next[..4] && head[6..40] == next[6..40]
    } else {
        head[..2] == next[..2] && head[6..10] == next[6..10] && head[12..20] == next[12..20]
    };
    ip_equal
        && head[tcp..tcp + 4] == next[tcp..tcp + 4]
        && head[tcp + 8..tcp + 13] == next[tcp + 8..tcp + 13]
        && head[tcp + 13] == next[tcp + 13] & !TCP_PSH
        && head[tcp + 14..tcp + 16] == next[tcp + 14..tcp + 16]
        && head[tcp + 18..headers] == next[tcp + 18..headers]
}

/// Packets one wake-up writes to the TUN device, merged where Linux's GRO would merge
/// them. The packets of a flow keep their order: a packet joins only its flow's latest
/// group, and groups are written in the order they began. A merged packet is written
/// from the packets themselves, one `writev` with a piece per payload: only its
/// headers are built anew.
pub struct Coalescer {
    merge: bool,
    packets: Vec<Bytes>,
    /// Per packet: the next packet of its group.
    next: Vec<Option<usize>>,
    groups: Vec<Group>,
    /// The virtio-net header and the IP and TCP headers of the packet being written.
    headers: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct Group {
    first: usize,
    last: usize,
    count: usize,
    /// Length of the packet the group becomes.
    len: usize,
    /// The first packet's layout, if it is TCP that may be merged with.
    tcp: Option<TcpLayout>,
    /// What the next segment must look like; `None` once nothing may join.
    open: Option<Opening>,
    push: bool,
}

#[derive(Debug, Clone, Copy)]
struct Opening {
    layout: TcpLayout,
    next_seq: u32,
}

/// What a flush writes: one packet behind its virtio-net header, in pieces.
pub struct TunWrite<'a> {
    /// The pieces of the write, in order, for one `writev`.
    pub parts: &'a [IoSlice<'a>],
    /// How many packets of the engine this write carries.
    pub packets: usize,
}

impl Coalescer {
    /// Packets held before the driver must flush.
    pub const CAPACITY: usize = 128;
    /// The most pieces a write has: the headers, then every packet's payload.
    const MAX_PARTS: usize = Self::CAPACITY + 1;

    /// `merge` false writes every packet as it is (a kernel without TUN offloads).
    pub fn new(merge: bool) -> Coalescer {
        Coalescer {
            merge,
            packets: Vec::with_capacity(Self::CAPACITY),
            next: Vec::with_capacity(Self::CAPACITY),
            groups: Vec::with_capacity(Self::CAPACITY),
            // IP and TCP headers are at most 60 bytes each.
            headers: Vec::with_capacity(VNET_HDR_LEN + 120),
        }
    }

    /// Takes a packet to write; true when [`Self::CAPACITY`] packets wait.
    pub fn push(&mut self, packet: Bytes) -> bool {
        let index = self.packets.len();
        self.next.push(None);
        let tcp = if self.merge {
            tcp_layout(&packet)
        } else {
            None
        };
        let segment = tcp.and_then(|layout| Mergeable::parse(&packet, layout));
        let latest = tcp.and_then(|layout| {
            self.groups.iter().rposition(|g| {
                g.tcp.is_some_and(|first| {
                    same_tcp_flow(&self.packets[g.first], &first, &packet, &layout)
                })
            })
        });
        let joined = match (segment, latest) {
            (Some(segment), Some(g)) => self.join(g, index, &packet, segment),
            _ => false,
        };
        if !joined {
            self.groups.push(Group {
                first: index,
                last: index,
                count: 1,
                len: packet.len(),
                tcp,
                open: segment.filter(|s| !s.push).map(|s| Opening {
                    layout: TcpLayout {
                        mss: s.payload,
                        ..s.layout
                    },
                    next_seq: s.seq.wrapping_add(s.payload as u32),
                }),
                push: segment.is_some_and(|s| s.push),
            });
        }
        self.packets.push(packet);
        self.packets.len() >= Self::CAPACITY
    }

    /// Adds packet `index` to group `g` if it continues it.
    fn join(&mut self, g: usize, index: usize, packet: &[u8], segment: Mergeable) -> bool {
        let group = &mut self.groups[g];
        let Some(open) = group.open else {
            return false;
        };
        // A group fits one write's pieces even when the caller pushes on past
        // [`Self::CAPACITY`].
        let fits = group.count < Self::CAPACITY
            && segment.seq == open.next_seq
            && segment.payload <= open.layout.mss
            && group.len + segment.payload <= MAX_SUPER_PACKET
            && segment.layout.headers == open.layout.headers
            && same_headers(&self.packets[group.first], packet, &open.layout);
        if !fits {
            return false;
        }
        self.next[group.last] = Some(index);
        group.last = index;
        group.count += 1;
        group.len += segment.payload;
        group.push = segment.push;
        // A short segment or PSH ends a super-packet, as it ends a GRO run.
        group.open = (!segment.push && segment.payload == open.layout.mss).then_some(Opening {
            next_seq: open.next_seq.wrapping_add(segment.payload as u32),
            ..open
        });
        true
    }

    /// Hands every group to `write` in order and forgets them.
    pub fn flush(&mut self, mut write: impl FnMut(TunWrite<'_>)) {
        for group in &self.groups {
            match group.tcp.filter(|_| group.count > 1) {
                Some(layout) => {
                    super_packet_headers(
                        &mut self.headers,
                        &self.packets[group.first],
                        &layout,
                        group,
                    );
                    let mut parts = [IoSlice::new(&[]); Self::MAX_PARTS];
                    parts[0] = IoSlice::new(&self.headers);
                    let mut n = 1;
                    let mut member = Some(group.first);
                    while let Some(i) = member {
                        parts[n] = IoSlice::new(&self.packets[i][layout.headers..]);
                        n += 1;
                        member = self.next[i];
                    }
                    write(TunWrite {
                        parts: &parts[..n],
                        packets: group.count,
                    });
                }
                None => {
                    // Only a TCP segment is ever joined.
                    debug_assert_eq!(group.count, 1);
                    write(TunWrite {
                        parts: &[
                            IoSlice::new(&PLAIN_VNET_HDR),
                            IoSlice::new(&self.packets[group.first]),
                        ],
                        packets: 1,
                    })
                }
            }
        }
        self.packets.clear();
        self.next.clear();
        self.groups.clear();
    }
}

/// Builds in `out` the front of the super-packet `group` becomes: the virtio-net
/// header that asks the kernel to cut it back into segments of the first one's size,
/// and the first packet's headers with the super-packet's length, PSH if its last
/// segment had it, and the partial checksum the kernel completes per segment.
fn super_packet_headers(out: &mut Vec<u8>, first: &[u8], layout: &TcpLayout, group: &Group) {
    let mss = first.len() - layout.headers;
    let (ip_len, v6) = (layout.ip_len, layout.v6);
    out.clear();
    out.push(F_NEEDS_CSUM);
    out.push(if v6 { GSO_TCPV6 } else { GSO_TCPV4 });
    for field in [layout.headers, mss, ip_len, TCP_CHECKSUM] {
        out.extend_from_slice(&(field as u16).to_ne_bytes());
    }
    out.extend_from_slice(&first[..layout.headers]);
    let headers = &mut out[VNET_HDR_LEN..];
    let len = group.len;
    if v6 {
        put_u16(headers, 4, (len - 40) as u16);
    } else {
        put_u16(headers, 2, len as u16);
        put_ipv4_checksum(headers);
    }
    if group.push {
        headers[ip_len + 13] |= TCP_PSH;
    }
    // CHECKSUM_PARTIAL: the field holds the pseudo-header's sum, the kernel adds the
    // rest for each segment it cuts.
    let partial = pseudo_header_sum(headers, v6, len - ip_len) as u16;
    put_u16(headers, ip_len + TCP_CHECKSUM, partial);
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, SlicedPacket, TransportSlice};

    const MSS: usize = 1000;

    fn v4_segment(seq: u32, payload: &[u8], psh: bool) -> Vec<u8> {
        let mut b = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 5201, seq, 512)
            .ack(77);
        if psh {
            b = b.psh();
        }
        let mut out = Vec::new();
        b.write(&mut out, payload).expect("write");
        // etherparse leaves DF clear; TCP sets it.
        out[6] = IPV4_DF;
        put_ipv4_checksum(&mut out);
        out
    }

    fn v6_segment(seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 1;
        let mut dst = src;
        dst[15] = 2;
        let b = PacketBuilder::ipv6(src, dst, 64)
            .tcp(40000, 5201, seq, 512)
            .ack(77);
        let mut out = Vec::new();
        b.write(&mut out, payload).expect("write");
        out
    }

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// The checksums of a packet are valid and its payload is `expected`; its sequence
    /// number is returned.
    fn check(packet: &[u8], expected: &[u8]) -> u32 {
        let sliced = SlicedPacket::from_ip(packet).expect("parses");
        let Some(TransportSlice::Tcp(tcp)) = sliced.transport else {
            panic!("not TCP")
        };
        let sum = match &sliced.net {
            Some(etherparse::NetSlice::Ipv4(ip)) => {
                let h = ip.header();
                assert_eq!(checksum_add(0, h.slice()), 0xffff, "IPv4 header checksum");
                assert_eq!(usize::from(h.total_len()), packet.len());
                tcp.calc_checksum_ipv4(h.source(), h.destination())
            }
            Some(etherparse::NetSlice::Ipv6(ip)) => {
                let h = ip.header();
                tcp.calc_checksum_ipv6(h.source(), h.destination())
            }
            _ => panic!("not IP"),
        };
        assert_eq!(sum.expect("checksum"), tcp.checksum(), "TCP checksum");
        assert_eq!(tcp.payload(), expected);
        tcp.sequence_number()
    }

    fn with_header(hdr: [u8; VNET_HDR_LEN], packet: &[u8]) -> Vec<u8> {
        let mut buf = hdr.to_vec();
        buf.extend_from_slice(packet);
        buf
    }

    fn gso_header(gso: u8, mss: usize, headers: usize, ip_len: usize) -> [u8; VNET_HDR_LEN] {
        let mut hdr = [0u8; VNET_HDR_LEN];
        hdr[0] = F_NEEDS_CSUM;
        hdr[1] = gso;
        for (i, field) in [headers, mss, ip_len, TCP_CHECKSUM].into_iter().enumerate() {
            hdr[2 + 2 * i..4 + 2 * i].copy_from_slice(&(field as u16).to_ne_bytes());
        }
        hdr
    }

    fn cut(buf: &[u8]) -> Vec<Vec<u8>> {
        let read = TunRead::parse(buf).expect("parses");
        (0..read.segments())
            .map(|i| {
                let mut out = BytesMut::new();
                read.write_segment(i, &mut out);
                assert_eq!(out.len(), read.segment_len(i), "segment {i}'s length");
                out.to_vec()
            })
            .collect()
    }

    #[test]
    fn a_plain_read_is_the_packet() {
        let packet = v4_segment(1, &payload(300, 1), false);
        assert_eq!(cut(&with_header(PLAIN_VNET_HDR, &packet)), vec![packet]);
        assert_eq!(TunRead::parse(&[0; 9]).unwrap_err(), OffloadError::NoHeader);
    }

    #[test]
    fn a_partial_checksum_is_completed() {
        let data = payload(333, 2);
        let mut packet = v4_segment(1, &data, true);
        // What the kernel hands over: the pseudo-header's sum in the checksum field.
        let partial = pseudo_header_sum(&packet, false, packet.len() - 20) as u16;
        put_u16(&mut packet, 20 + TCP_CHECKSUM, partial);
        let mut hdr = gso_header(GSO_NONE, 0, 0, 20);
        let segments = cut(&with_header(hdr, &packet));
        assert_eq!(segments.len(), 1);
        check(&segments[0], &data);
        hdr[6..8].copy_from_slice(&(packet.len() as u16).to_ne_bytes());
        assert_eq!(
            TunRead::parse(&with_header(hdr, &packet)).unwrap_err(),
            OffloadError::BadChecksumOffsets
        );
    }

    #[test]
    fn a_tcp_super_packet_is_cut_into_segments_with_valid_headers() {
        for v6 in [false, true] {
            let data = payload(4 * MSS + 123, 3);
            let mut packet = if v6 {
                v6_segment(u32::MAX - 1500, &data)
            } else {
                v4_segment(u32::MAX - 1500, &data, true)
            };
            let ip_len = if v6 { 40 } else { 20 };
            packet[ip_len + 13] |= TCP_FIN | TCP_CWR;
            let gso = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
            let segments = cut(&with_header(
                gso_header(gso, MSS, ip_len + 20, ip_len),
                &packet,
            ));
            assert_eq!(segments.len(), 5);
            for (i, segment) in segments.iter().enumerate() {
                let expected = &data[i * MSS..((i + 1) * MSS).min(data.len())];
                let seq = check(segment, expected);
                assert_eq!(seq, (u32::MAX - 1500).wrapping_add((i * MSS) as u32));
                let flags = segment[ip_len + 13];
                assert_eq!(flags & TCP_CWR != 0, i == 0, "CWR on the first only");
                assert_eq!(
                    flags & (TCP_FIN | TCP_PSH) != 0,
                    i == 4,
                    "FIN, PSH on the last"
                );
                if !v6 {
                    assert_eq!(get_u16(segment, 4), get_u16(&packet, 4) + i as u16);
                }
            }
        }
    }

    #[test]
    fn unreadable_super_packets_are_refused() {
        let packet = v4_segment(1, &payload(2000, 4), false);
        let bad = [
            (
                gso_header(GSO_TCPV6, MSS, 40, 20),
                OffloadError::BadTcpHeaders,
            ),
            (
                gso_header(GSO_TCPV4, 0, 40, 20),
                OffloadError::BadTcpHeaders,
            ),
            (gso_header(3, MSS, 40, 20), OffloadError::UnsupportedGso(3)),
        ];
        for (hdr, error) in bad {
            assert_eq!(
                TunRead::parse(&with_header(hdr, &packet)).unwrap_err(),
                error
            );
        }
        let udp = crate::core::packet::tests::udp_v6(100);
        let hdr = gso_header(GSO_TCPV6, MSS, 40, 40);
        assert_eq!(
            TunRead::parse(&with_header(hdr, &udp)).unwrap_err(),
            OffloadError::BadTcpHeaders
        );
    }

    fn flush(c: &mut Coalescer) -> Vec<(Vec<u8>, usize)> {
        let mut writes = Vec::new();
        c.flush(|w| writes.push((w.parts.iter().flat_map(|p| p.to_vec()).collect(), w.packets)));
        writes
    }

    #[test]
    fn consecutive_segments_merge_into_one_super_packet_that_cuts_back_to_them() {
        for v6 in [false, true] {
            let data = payload(3 * MSS + 400, 5);
            let segment = |i: usize, psh| {
                let range = i * MSS..((i + 1) * MSS).min(data.len());
                let seq = 7 + range.start as u32;
                if v6 {
                    v6_segment(seq, &data[range])
                } else {
                    v4_segment(seq, &data[range], psh)
                }
            };
            let originals: Vec<Vec<u8>> = (0..4).map(|i| segment(i, i == 3)).collect();
            let mut c = Coalescer::new(true);
            for packet in &originals {
                c.push(Bytes::from(packet.clone()));
            }
            let writes = flush(&mut c);
            assert_eq!(writes.len(), 1, "one write");
            assert_eq!(writes[0].1, 4);
            // What the kernel does with it: cut it again, checksums and all.
            let mut merged = writes[0].0.clone();
            let ip_len = if v6 { 40 } else { 20 };
            let hdr = &merged[..VNET_HDR_LEN];
            assert_eq!(hdr[0], F_NEEDS_CSUM);
            assert_eq!(usize::from(u16::from_ne_bytes([hdr[4], hdr[5]])), MSS);
            let packet = &mut merged[VNET_HDR_LEN..];
            let partial = get_u16(packet, ip_len + TCP_CHECKSUM);
            assert_eq!(
                u32::from(partial),
                pseudo_header_sum(packet, v6, packet.len() - ip_len)
            );
            let again = cut(&merged);
            assert_eq!(again.len(), 4);
            for (i, segment) in again.iter().enumerate() {
                check(segment, &data[i * MSS..((i + 1) * MSS).min(data.len())]);
                if v6 {
                    assert_eq!(segment, &originals[i], "IPv6 segment {i} as it was");
                } else {
                    assert_eq!(segment[20 + 13], originals[i][20 + 13], "flags of {i}");
                }
            }
        }
    }

    #[test]
    fn only_what_gro_would_merge_is_merged_and_flows_keep_their_order() {
        let data = payload(MSS, 6);
        let at = |seq: u32| v4_segment(seq, &data, false);
        let other_flow = {
            let mut p = at(1);
            p[21] ^= 1; // another source port
            put_u16(&mut p, 20 + TCP_CHECKSUM, 0);
            let sum = checksum_add(pseudo_header_sum(&p, false, p.len() - 20), &p[20..]);
            put_u16(&mut p, 20 + TCP_CHECKSUM, checksum_finish(sum));
            p
        };
        let corrupt = {
            let mut p = at(1 + 2 * MSS as u32);
            let last = p.len() - 1;
            p[last] ^= 1;
            p
        };
        let gap = at(1 + 10 * MSS as u32);
        let pure_ack = v4_segment(1, &[], false);
        let mut c = Coalescer::new(true);
        let order = [
            at(1),
            other_flow.clone(),
            at(1 + MSS as u32),
            corrupt.clone(),
            at(1 + 3 * MSS as u32),
            gap.clone(),
            pure_ack.clone(),
        ];
        for p in &order {
            c.push(Bytes::from(p.clone()));
        }
        let writes = flush(&mut c);
        let counts: Vec<usize> = writes.iter().map(|w| w.1).collect();
        // The first two segments merge; the corrupt one stands alone and ends the run,
        // so the next segment starts a group of its own after it.
        assert_eq!(counts, vec![2, 1, 1, 1, 1, 1]);
        assert_eq!(&writes[1].0[VNET_HDR_LEN..], &other_flow[..]);
        assert_eq!(&writes[2].0[VNET_HDR_LEN..], &corrupt[..]);
        assert_eq!(&writes[4].0[VNET_HDR_LEN..], &gap[..]);
        assert_eq!(&writes[5].0[VNET_HDR_LEN..], &pure_ack[..]);

        let mut off = Coalescer::new(false);
        off.push(Bytes::from(at(1)));
        off.push(Bytes::from(at(1 + MSS as u32)));
        assert_eq!(flush(&mut off).len(), 2, "no merging without offloads");
    }

    /// Found by fuzzing `tun_read`: a super-packet cut into more segments than the
    /// coalescer holds, pushed without a flush in between.
    #[test]
    fn a_group_never_outgrows_one_write_when_pushed_past_capacity() {
        let mss = 10;
        let data = payload(mss, 8);
        let mut c = Coalescer::new(true);
        let n = Coalescer::CAPACITY + 7;
        for i in 0..n {
            c.push(Bytes::from(v4_segment(1 + (i * mss) as u32, &data, false)));
        }
        let counts: Vec<usize> = flush(&mut c).iter().map(|w| w.1).collect();
        assert_eq!(counts, vec![Coalescer::CAPACITY, 7]);
    }

    #[test]
    fn a_super_packet_stops_at_the_ip_length_limit() {
        let data = payload(MSS, 7);
        let mut c = Coalescer::new(true);
        let n = 70;
        for i in 0..n {
            c.push(Bytes::from(v4_segment(1 + (i * MSS) as u32, &data, false)));
        }
        let writes = flush(&mut c);
        assert!(
            writes
                .iter()
                .all(|w| w.0.len() - VNET_HDR_LEN <= MAX_SUPER_PACKET)
        );
        assert_eq!(writes.iter().map(|w| w.1).sum::<usize>(), n);
        assert_eq!(writes.len(), 2);
    }
}
