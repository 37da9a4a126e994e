//! A UDP socket for quinn that writes each lane's ABE colour into the outer DSCP.
//!
//! quinn-udp sends every packet with an `IP_TOS` / `IPV6_TCLASS` control message that
//! holds only QUIC's two ECN bits, and on Linux that replaces the socket's TOS, DSCP
//! included (docs/architecture.md, "Outer DSCP"). So this socket does its own `sendmsg` with the
//! whole traffic class, `(dscp << 2) | ecn`, keeping quinn's segmentation offload (GSO)
//! and source address (`IP_PKTINFO`); receiving, GRO and path MTU discovery stay
//! quinn-udp's.
//!
//! The DSCP comes from a [`Marking`]: fixed for an entry's lane, which has a socket of
//! its own, or per peer address at the exit, whose one socket serves every lane: the
//! exit marks a lane's address once its hello has named the colour, and packets to
//! addresses it does not know (handshakes) carry the default.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use dashmap::DashMap;
use nix::libc;
use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use socket2::{MsgHdr, SockAddr, SockRef};
use tokio::io::Interest;
use tracing::{debug, info};

use crate::core::lane::Colour;

/// The outer DSCP of each colour's lanes (`abe.green_dscp`, `abe.blue_dscp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColourDscp {
    pub green: u8,
    pub blue: u8,
}

impl ColourDscp {
    pub fn of(self, colour: Colour) -> u8 {
        match colour {
            Colour::Green => self.green,
            Colour::Blue => self.blue,
        }
    }
}

/// Which DSCP a datagram to a destination carries.
#[derive(Debug)]
pub enum Marking {
    /// Every datagram (an entry's lane).
    Fixed(u8),
    /// By destination (the exit); `default` for destinations not marked.
    PerPeer {
        default: u8,
        /// Peer address -> (DSCP, the stable id of the connection that set it).
        peers: DashMap<SocketAddr, (u8, usize)>,
    },
}

impl Marking {
    pub fn per_peer(default: u8) -> Marking {
        Marking::PerPeer {
            default,
            peers: DashMap::new(),
        }
    }

    /// Datagrams to `peer` carry `dscp` from now on, for connection `conn_id`.
    pub fn mark(&self, peer: SocketAddr, dscp: u8, conn_id: usize) {
        if let Marking::PerPeer { peers, .. } = self {
            peers.insert(peer, (dscp, conn_id));
        }
    }

    /// Connection `conn_id` to `peer` is closed: its mark goes, unless a newer
    /// connection from the same address has set its own.
    pub fn unmark(&self, peer: SocketAddr, conn_id: usize) {
        if let Marking::PerPeer { peers, .. } = self {
            peers.remove_if(&peer, |_, (_, id)| *id == conn_id);
        }
    }

    fn dscp(&self, destination: SocketAddr) -> u8 {
        match self {
            Marking::Fixed(dscp) => *dscp,
            Marking::PerPeer { default, peers } => {
                peers.get(&destination).map_or(*default, |e| e.value().0)
            }
        }
    }
}

pub struct DscpSocket {
    io: tokio::net::UdpSocket,
    state: UdpSocketState,
    marking: Arc<Marking>,
    /// Set once the kernel refused a GSO send: from then on one datagram per send.
    gso_refused: AtomicBool,
}

impl fmt::Debug for DscpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DscpSocket")
            .field("local", &self.io.local_addr().ok())
            .field("marking", &self.marking)
            .finish_non_exhaustive()
    }
}

impl DscpSocket {
    /// Wraps a bound, non-blocking-to-be socket; must run inside the tokio runtime.
    pub fn new(socket: std::net::UdpSocket, marking: Arc<Marking>) -> io::Result<DscpSocket> {
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        Ok(DscpSocket {
            io: tokio::net::UdpSocket::from_std(socket)?,
            state,
            marking,
            gso_refused: AtomicBool::new(false),
        })
    }

    /// One `sendmsg` of `transmit` with the traffic class `dscp << 2 | ecn`.
    fn send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        let ecn = transmit.ecn.map_or(0, |e| e as u8);
        let tos = self.marking.dscp(transmit.destination) << 2 | ecn;
        let mut control = Control::default();
        // An IPv4 destination, also as an IPv4-mapped one on an IPv6 socket, takes
        // the IPv4 option: the kernel sends it over IPv4 and ignores IPV6_TCLASS.
        let v4_path = match transmit.destination.ip() {
            IpAddr::V4(_) => true,
            IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
        };
        if v4_path {
            control.push(libc::IPPROTO_IP, libc::IP_TOS, &[tos]);
        } else {
            let tclass = libc::c_int::from(tos);
            control.push(libc::IPPROTO_IPV6, libc::IPV6_TCLASS, &tclass.to_ne_bytes());
        }
        if let Some(segment) = transmit
            .segment_size
            .filter(|&s| s < transmit.contents.len())
            .and_then(|s| u16::try_from(s).ok())
        {
            control.push(libc::SOL_UDP, libc::UDP_SEGMENT, &segment.to_ne_bytes());
        }
        match transmit.src_ip {
            Some(IpAddr::V4(src)) => {
                // struct in_pktinfo: interface index, source address, (destination).
                let mut info = [0u8; 12];
                info[4..8].copy_from_slice(&src.octets());
                control.push(libc::IPPROTO_IP, libc::IP_PKTINFO, &info);
            }
            Some(IpAddr::V6(src)) => {
                // struct in6_pktinfo: source address, interface index.
                let mut info = [0u8; 20];
                info[..16].copy_from_slice(&src.octets());
                control.push(libc::IPPROTO_IPV6, libc::IPV6_PKTINFO, &info);
            }
            None => {}
        }
        let destination = SockAddr::from(transmit.destination);
        let iov = [IoSlice::new(transmit.contents)];
        let msg = MsgHdr::new()
            .with_addr(&destination)
            .with_buffers(&iov)
            .with_control(control.bytes());
        let socket = SockRef::from(&self.io);
        loop {
            match socket.sendmsg(&msg, 0) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => return result.map(drop),
            }
        }
    }
}

/// Ancillary data of one `sendmsg`, encoded on the stack as `CMSG_*` would: each
/// message a `cmsghdr` (length, level, type) and its data, padded to the alignment
/// of `size_t`. The length is written as a native `size_t`, which also fills musl's
/// 32-bit length and the padding after it on little-endian machines.
struct Control {
    buf: [u8; 128],
    len: usize,
}

impl Default for Control {
    fn default() -> Control {
        Control {
            buf: [0; 128],
            len: 0,
        }
    }
}

impl Control {
    const ALIGN: usize = std::mem::size_of::<usize>();
    const HEADER: usize = std::mem::size_of::<libc::cmsghdr>();

    fn push(&mut self, level: libc::c_int, kind: libc::c_int, data: &[u8]) {
        let len = Self::HEADER + data.len();
        let space = len.next_multiple_of(Self::ALIGN);
        let message = &mut self.buf[self.len..self.len + space];
        message[..Self::ALIGN].copy_from_slice(&len.to_ne_bytes());
        message[Self::ALIGN..Self::ALIGN + 4].copy_from_slice(&level.to_ne_bytes());
        message[Self::ALIGN + 4..Self::ALIGN + 8].copy_from_slice(&kind.to_ne_bytes());
        message[Self::HEADER..len].copy_from_slice(data);
        self.len += space;
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl AsyncUdpSocket for DscpSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable(self))
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        match self.io.try_io(Interest::WRITABLE, || self.send(transmit)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e),
            // UDP errors are not fatal to QUIC, which recovers from loss; EMSGSIZE is
            // expected of path MTU probes (as quinn-udp treats them).
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Ok(()),
            Err(e) => {
                // Some devices refuse segmentation offload only when it is used.
                if transmit.segment_size.is_some()
                    && matches!(e.raw_os_error(), Some(libc::EIO | libc::EINVAL))
                    && !self.gso_refused.swap(true, Ordering::Relaxed)
                {
                    info!(error = %e, "sendmsg refused segmentation offload; sending datagrams one by one");
                }
                debug!(error = %e, destination = %transmit.destination, "sendmsg failed");
                Ok(())
            }
        }
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        loop {
            std::task::ready!(self.io.poll_recv_ready(cx))?;
            if let Ok(n) = self.io.try_io(Interest::READABLE, || {
                self.state.recv((&self.io).into(), bufs, meta)
            }) {
                return Poll::Ready(Ok(n));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.local_addr()
    }

    fn may_fragment(&self) -> bool {
        // Not delegating this silently disables path MTU discovery (docs/architecture.md).
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        if self.gso_refused.load(Ordering::Relaxed) {
            1
        } else {
            self.state.max_gso_segments()
        }
    }

    fn max_receive_segments(&self) -> usize {
        self.state
            .gro_segments()
            .min(RECEIVE_SEGMENTS_CAP.load(Ordering::Relaxed))
    }
}

/// The most segments one receive takes (GRO), for every lane socket made from now
/// on. quinn gives each endpoint a receive buffer of 32 receives of that many
/// 1,472-byte segments: 3 MB with the kernel's 64, which an entry's few lanes
/// afford, but not `braid loadgen`'s thousands of lanes in one process.
static RECEIVE_SEGMENTS_CAP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Caps the receive segments of lane sockets made from now on (see
/// [`RECEIVE_SEGMENTS_CAP`]).
pub fn cap_receive_segments(segments: usize) {
    RECEIVE_SEGMENTS_CAP.store(segments.max(1), Ordering::Relaxed);
}

/// Wakes quinn when the socket can take more.
#[derive(Debug)]
struct Writable(Arc<DscpSocket>);

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        self.0.io.poll_send_ready(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_keeps_its_mark_until_its_own_connection_closes() {
        let marking = Marking::per_peer(0);
        let peer: SocketAddr = "[::ffff:198.19.1.2]:40000".parse().expect("addr");
        assert_eq!(marking.dscp(peer), 0, "unknown peers get the default");
        marking.mark(peer, 45, 1);
        assert_eq!(marking.dscp(peer), 45);
        // A reconnect from the same address marks it again before the old
        // connection's close is seen: the old close must not unmark the new lane.
        marking.mark(peer, 45, 2);
        marking.unmark(peer, 1);
        assert_eq!(marking.dscp(peer), 45);
        marking.unmark(peer, 2);
        assert_eq!(marking.dscp(peer), 0);
        assert_eq!(Marking::Fixed(45).dscp(peer), 45);
    }
}
