//! The data path of one gateway, as a state machine.
//!
//! Contract: the shell feeds every packet read from the TUN device to
//! [`DataPath::handle_tun_packet`] and every datagram received on a lane to
//! [`DataPath::handle_lane_datagram`], with the current instant; lane snapshots arrive
//! through [`DataPath::update_lane`]. The engine answers with a verdict per packet (which
//! lane, an ICMP reply for the TUN, or a drop reason) and never touches a socket, a
//! clock or quinn. Per-packet work allocates nothing.
//!
//! Every packet sent to a site carries the site's next sequence number (see
//! `wire::DATAGRAM_HEADER_LEN`); the receiving engine counts, per flow, packets that
//! arrive after a packet of the same flow that was sent later: reordering.

use std::time::Duration;

use ipnet::IpNet;

use super::flow::FlowTable;
use super::icmp::{self, MAX_REPLY_LEN};
use super::lane::{Colour, LaneId, LaneStatus, LaneView};
use super::packet::PacketInfo;
use super::route::PrefixMap;
use super::sched::{Algorithm, DecisionKind, Scheduler};
use super::stats::DropReason;
use super::time::Instant;
use super::wire::split_datagram;

/// Which end of the tunnel this gateway is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// At the branch: one site, packets from the TUN go to that site's lanes.
    Entry,
    /// At the concentrator: many sites, packets from the TUN go to the site whose
    /// prefixes contain the destination.
    Exit,
}

/// Index of a site in the engine's site list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SiteIdx(pub u32);

/// One site the engine carries traffic for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSpec {
    pub id: String,
    /// The site's LAN prefixes (exit only; an entry's site has none).
    pub prefixes: Vec<IpNet>,
}

/// Everything the engine is built from.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub role: Role,
    pub sites: Vec<SiteSpec>,
    pub tun_mtu: usize,
    pub algorithm: Algorithm,
    /// Flows idle this long are forgotten (scheduler and reordering tables).
    pub flow_idle_timeout: Duration,
    /// At most this many flows per site and table; the least recently used goes.
    pub max_flows: usize,
}

/// A packet to send: on which lane, with which sequence number, and how the scheduler
/// decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub lane: LaneId,
    pub seq: u32,
    pub kind: DecisionKind,
}

/// What to do with a packet read from the TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunVerdict {
    /// Send it as a datagram, with the header of `wire::write_datagram_header`.
    Forward(Forward),
    /// Drop it and write [`DataPath::reply`] (an ICMP error of this length) to the TUN.
    Reply(usize),
    /// Drop it.
    Drop(DropReason),
}

/// A packet read from the TUN device that may go on: its site and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    pub site: SiteIdx,
    pub info: PacketInfo,
}

/// A datagram from a lane that may be written to the TUN device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Offset of the inner IP packet in the datagram.
    pub offset: usize,
    pub site: SiteIdx,
    /// A packet of the same flow sent after this one arrived before it.
    pub reordered: bool,
    /// The inner packet.
    pub info: PacketInfo,
}

struct Site {
    id: String,
    /// Snapshots of the site's lanes, in the order they came up.
    lanes: Vec<LaneView>,
    scheduler: Box<dyn Scheduler>,
    /// Sequence number of the next packet sent to this site.
    tx_seq: u32,
    /// Highest sequence number received per flow from this site.
    rx_seq: FlowTable<u32>,
}

#[derive(Debug, Clone, Copy)]
struct LaneSlot {
    site: SiteIdx,
}

/// The data path state machine.
pub struct DataPath {
    role: Role,
    sites: Vec<Site>,
    site_by_prefix: PrefixMap<SiteIdx>,
    /// Lane id -> owning site; `None` for free ids, which are reused.
    lanes: Vec<Option<LaneSlot>>,
    tun_mtu: usize,
    reply: [u8; MAX_REPLY_LEN],
}

impl DataPath {
    pub fn new(config: EngineConfig) -> DataPath {
        let mut site_by_prefix = PrefixMap::default();
        let sites = config
            .sites
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                for p in &spec.prefixes {
                    site_by_prefix.insert(*p, SiteIdx(i as u32));
                }
                Site {
                    id: spec.id.clone(),
                    lanes: Vec::new(),
                    scheduler: config
                        .algorithm
                        .build(config.flow_idle_timeout, config.max_flows),
                    tx_seq: 0,
                    rx_seq: FlowTable::new(config.flow_idle_timeout, config.max_flows),
                }
            })
            .collect();
        DataPath {
            role: config.role,
            sites,
            site_by_prefix,
            lanes: Vec::new(),
            tun_mtu: config.tun_mtu,
            reply: [0; MAX_REPLY_LEN],
        }
    }

    /// The index of the site with this id.
    pub fn site_index(&self, id: &str) -> Option<SiteIdx> {
        self.sites
            .iter()
            .position(|s| s.id == id)
            .map(|i| SiteIdx(i as u32))
    }

    pub fn site_id(&self, site: SiteIdx) -> &str {
        &self.sites[site.0 as usize].id
    }

    /// Registers a new lane of `site` that is up, and returns its id. `rank` is the
    /// uplink's position in the entry's configuration, `rate_kbps` its rate in this
    /// gateway's sending direction, when known.
    pub fn add_lane(
        &mut self,
        site: SiteIdx,
        colour: Colour,
        rank: u32,
        rate_kbps: Option<u64>,
    ) -> LaneId {
        let slot = LaneSlot { site };
        let id = match self.lanes.iter().position(Option::is_none) {
            Some(free) => {
                self.lanes[free] = Some(slot);
                LaneId(free as u32)
            }
            None => {
                self.lanes.push(Some(slot));
                LaneId(self.lanes.len() as u32 - 1)
            }
        };
        self.sites[site.0 as usize].lanes.push(LaneView {
            rank,
            rate_kbps,
            ..LaneView::new(id, colour)
        });
        id
    }

    /// Forgets a lane; its id may be handed out again.
    pub fn remove_lane(&mut self, lane: LaneId) {
        if let Some(Some(slot)) = self.lanes.get_mut(lane.0 as usize).map(Option::take) {
            self.sites[slot.site.0 as usize]
                .lanes
                .retain(|v| v.id != lane);
        }
    }

    /// Updates what changes of a lane (state taken from quinn by the shell).
    pub fn update_lane(&mut self, lane: LaneId, status: LaneStatus) {
        if let Some(Some(slot)) = self.lanes.get(lane.0 as usize) {
            let lanes = &mut self.sites[slot.site.0 as usize].lanes;
            if let Some(v) = lanes.iter_mut().find(|v| v.id == lane) {
                status.apply_to(v);
            }
        }
    }

    /// Flows the schedulers of all sites track.
    pub fn flows_active(&self) -> usize {
        self.sites.iter().map(|s| s.scheduler.flows()).sum()
    }

    pub fn sites(&self) -> impl Iterator<Item = (SiteIdx, &str)> {
        self.sites
            .iter()
            .enumerate()
            .map(|(i, s)| (SiteIdx(i as u32), s.id.as_str()))
    }

    /// The ICMP reply of the last [`TunVerdict::Reply`] (the packet itself is dropped,
    /// counted as `too_big`).
    pub fn reply(&self, len: usize) -> &[u8] {
        &self.reply[..len.min(MAX_REPLY_LEN)]
    }

    /// Decides what happens to one packet read from the TUN device, with no pacing in
    /// between: [`DataPath::admit_tun_packet`] then [`DataPath::forward`].
    pub fn handle_tun_packet(&mut self, buf: &mut [u8], now: Instant) -> TunVerdict {
        match self.admit_tun_packet(buf) {
            Ok(Admitted { site, info }) => self.forward(site, &info, buf, now),
            Err(verdict) => verdict,
        }
    }

    /// The first half of handling a packet read from the TUN device: checks it, finds
    /// its site and clamps TCP SYNs' MSS (rewriting the packet in place). A packet
    /// that is not admitted comes back as the verdict to carry out.
    pub fn admit_tun_packet(&mut self, buf: &mut [u8]) -> Result<Admitted, TunVerdict> {
        let info = match PacketInfo::parse(buf) {
            Ok(info) => info,
            Err(_) => return Err(TunVerdict::Drop(DropReason::Malformed)),
        };
        if info.to_link_local() {
            return Err(TunVerdict::Drop(DropReason::LinkLocal));
        }
        let site = match self.role {
            Role::Entry => SiteIdx(0),
            Role::Exit => match self.site_by_prefix.lookup(info.dst) {
                Some(site) => site,
                None => return Err(TunVerdict::Drop(DropReason::NoSite)),
            },
        };
        info.clamp_tcp_mss(buf, || self.max_mss(site, info.is_ipv6()));
        Ok(Admitted { site, info })
    }

    /// The second half, once pacing let the packet go: picks its lane, or answers
    /// with an ICMP error when it is too big for that lane.
    pub fn forward(
        &mut self,
        site: SiteIdx,
        info: &PacketInfo,
        buf: &mut [u8],
        now: Instant,
    ) -> TunVerdict {
        let site = &mut self.sites[site.0 as usize];
        let Some(pick) = site
            .scheduler
            .pick(info.flow_key(), info.len, &site.lanes, now)
        else {
            return TunVerdict::Drop(DropReason::NoLane);
        };
        let lane = &mut site.lanes[pick.lane];
        if info.len <= lane.max_datagram {
            // Until the shell's next snapshot, the packet counts towards the lane's
            // fill, so that a batch of packets does not all pick the same lane.
            lane.fill += info.len as u64;
            let seq = site.tx_seq;
            site.tx_seq = seq.wrapping_add(1);
            return TunVerdict::Forward(Forward {
                lane: lane.id,
                seq,
                kind: pick.kind,
            });
        }
        let lane = *lane;
        if !info.dont_fragment {
            return TunVerdict::Drop(DropReason::TooBig);
        }
        let mtu = u16::try_from(lane.max_datagram).unwrap_or(u16::MAX);
        match icmp::write_too_big(buf, info.src, info.dst, mtu, &mut self.reply) {
            Some(n) => TunVerdict::Reply(n),
            None => TunVerdict::Drop(DropReason::TooBig),
        }
    }

    /// Checks a datagram received on `lane` before its packet is written to the TUN
    /// device: after the header it must hold exactly one IP packet and, at the exit,
    /// come from an address of the lane's own site. Counts reordering per flow.
    pub fn handle_lane_datagram(
        &mut self,
        lane: LaneId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<Delivery, DropReason> {
        let Some(Some(slot)) = self.lanes.get(lane.0 as usize).copied() else {
            return Err(DropReason::NoLane);
        };
        let (seq, packet) = split_datagram(datagram).ok_or(DropReason::Malformed)?;
        let info = PacketInfo::parse(packet).map_err(|_| DropReason::Malformed)?;
        if self.role == Role::Exit && self.site_by_prefix.lookup(info.src) != Some(slot.site) {
            return Err(DropReason::Spoofed);
        }
        let site = &mut self.sites[slot.site.0 as usize];
        site.rx_seq.expire(now, |_| {});
        let flow = info.flow_key();
        let highest = site.rx_seq.get(flow).map(|e| e.value);
        // Serial number arithmetic: `seq` is older than `highest` when the difference,
        // read as signed, is negative.
        let reordered = highest.is_some_and(|h| (seq.wrapping_sub(h) as i32) < 0);
        let newest = if reordered {
            highest.unwrap_or(seq)
        } else {
            seq
        };
        site.rx_seq.record(flow, newest, now);
        Ok(Delivery {
            offset: datagram.len() - packet.len(),
            site: slot.site,
            reordered,
            info,
        })
    }

    /// Largest TCP MSS whose segments fit both the TUN MTU and every live lane of the
    /// site, so that TCP never depends on ICMP errors to find the path MTU.
    fn max_mss(&self, site: SiteIdx, ipv6: bool) -> u16 {
        let path_mtu = self.sites[site.0 as usize]
            .lanes
            .iter()
            .filter(|l| l.up)
            .map(|l| l.max_datagram)
            .fold(self.tun_mtu, usize::min);
        let headers = if ipv6 { 60 } else { 40 };
        u16::try_from(path_mtu.saturating_sub(headers)).unwrap_or(u16::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::tests::{tcp_syn_v4, udp_v6};
    use crate::core::wire::{DATAGRAM_HEADER_LEN, write_datagram_header};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    fn engine(role: Role, algorithm: Algorithm) -> DataPath {
        DataPath::new(EngineConfig {
            role,
            sites: vec![
                SiteSpec {
                    id: "a".into(),
                    prefixes: vec!["198.18.0.0/24".parse().expect("net")],
                },
                SiteSpec {
                    id: "b".into(),
                    prefixes: vec!["fd00::/64".parse().expect("net")],
                },
            ],
            tun_mtu: 1400,
            algorithm,
            flow_idle_timeout: Duration::from_secs(10),
            max_flows: 100,
        })
    }

    fn exit_engine() -> DataPath {
        engine(Role::Exit, Algorithm::RoundRobin)
    }

    fn status(max_datagram: usize) -> LaneStatus {
        LaneStatus {
            up: true,
            srtt: Duration::from_millis(20),
            cwnd: 100_000,
            fill: 0,
            max_datagram,
        }
    }

    fn up(engine: &mut DataPath, site: &str, max_datagram: usize) -> LaneId {
        let idx = engine.site_index(site).expect("site");
        let id = engine.add_lane(idx, Colour::Blue, 0, None);
        engine.update_lane(id, status(max_datagram));
        id
    }

    fn forwarded_on(v: TunVerdict) -> LaneId {
        match v {
            TunVerdict::Forward(f) => f.lane,
            other => panic!("expected a forward, got {other:?}"),
        }
    }

    /// A TCP SYN with DF set from the server side towards site a's host.
    fn to_site_a() -> Vec<u8> {
        let mut pkt = tcp_syn_v4(1460);
        // swap source and destination: 198.19.0.2 -> 198.18.0.2
        let (s, d) = (pkt[12..16].to_vec(), pkt[16..20].to_vec());
        pkt[12..16].copy_from_slice(&d);
        pkt[16..20].copy_from_slice(&s);
        let mut header = etherparse::Ipv4Header::from_slice(&pkt).expect("v4").0;
        header.dont_fragment = true;
        header.header_checksum = header.calc_header_checksum();
        header.write(&mut &mut pkt[..20]).expect("write");
        pkt
    }

    /// `packet` behind a datagram header carrying `seq`.
    fn datagram(seq: u32, packet: &[u8]) -> Vec<u8> {
        let mut d = vec![0; DATAGRAM_HEADER_LEN];
        write_datagram_header(&mut d, seq);
        d.extend_from_slice(packet);
        d
    }

    #[test]
    fn exit_routes_by_destination_to_the_sites_own_lanes() {
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "b", 1400);
        let mut pkt = to_site_a();
        assert_eq!(
            forwarded_on(e.handle_tun_packet(&mut pkt, Instant::ZERO)),
            a
        );
        let mut v6 = udp_v6(100);
        v6[24..40].copy_from_slice(&"fd00::9".parse::<Ipv6Addr>().expect("ip").octets());
        assert_eq!(forwarded_on(e.handle_tun_packet(&mut v6, Instant::ZERO)), b);
    }

    #[test]
    fn each_site_numbers_its_packets_in_sending_order() {
        let mut e = exit_engine();
        up(&mut e, "a", 1400);
        let seqs: Vec<u32> = (0..3)
            .map(
                |_| match e.handle_tun_packet(&mut to_site_a(), Instant::ZERO) {
                    TunVerdict::Forward(f) => f.seq,
                    other => panic!("{other:?}"),
                },
            )
            .collect();
        assert_eq!(seqs, [0, 1, 2]);
    }

    #[test]
    fn exit_drops_unknown_destinations_and_sites_without_lanes() {
        let mut e = exit_engine();
        let mut to_a = to_site_a();
        assert_eq!(
            e.handle_tun_packet(&mut to_a, Instant::ZERO),
            TunVerdict::Drop(DropReason::NoLane)
        );
        let mut elsewhere = tcp_syn_v4(1460); // destined to 198.19.0.2: no site
        assert_eq!(
            e.handle_tun_packet(&mut elsewhere, Instant::ZERO),
            TunVerdict::Drop(DropReason::NoSite)
        );
    }

    #[test]
    fn exit_refuses_a_sites_packets_with_another_sites_source() {
        let mut e = exit_engine();
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "b", 1400);
        let from_a = datagram(0, &tcp_syn_v4(1460)); // source 198.18.0.2, site a
        let delivered = e
            .handle_lane_datagram(a, &from_a, Instant::ZERO)
            .expect("own source");
        assert_eq!(delivered.offset, DATAGRAM_HEADER_LEN);
        assert_eq!(
            e.handle_lane_datagram(b, &from_a, Instant::ZERO),
            Err(DropReason::Spoofed)
        );
        assert_eq!(
            e.handle_lane_datagram(a, &datagram(1, b"garbage"), Instant::ZERO),
            Err(DropReason::Malformed)
        );
        assert_eq!(
            e.handle_lane_datagram(a, b"abc", Instant::ZERO),
            Err(DropReason::Malformed)
        );
    }

    #[test]
    fn a_packet_overtaken_by_a_later_one_of_its_flow_is_counted_as_reordered() {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let lane = up(&mut e, "a", 1400);
        let flow_x = tcp_syn_v4(1460);
        let flow_y = udp_v6(10);
        let got = |e: &mut DataPath, seq, pkt: &[u8]| {
            e.handle_lane_datagram(lane, &datagram(seq, pkt), Instant::ZERO)
                .expect("valid")
                .reordered
        };
        assert!(!got(&mut e, 10, &flow_x));
        assert!(!got(&mut e, 12, &flow_x));
        assert!(!got(&mut e, 11, &flow_y), "another flow's order is its own");
        assert!(
            got(&mut e, 11, &flow_x),
            "11 arrived after 12 of the same flow"
        );
        assert!(!got(&mut e, 13, &flow_x));
        // Sequence numbers wrap around.
        let mut flow_z = udp_v6(10);
        flow_z[40..42].copy_from_slice(&7777u16.to_be_bytes());
        assert!(!got(&mut e, u32::MAX, &flow_z));
        assert!(!got(&mut e, 0, &flow_z));
        assert!(got(&mut e, u32::MAX - 1, &flow_z));
    }

    #[test]
    fn too_big_packets_get_an_icmp_reply_with_the_lane_mtu() {
        let mut e = exit_engine();
        up(&mut e, "a", 40); // the SYN is 48 bytes
        let mut pkt = to_site_a();
        let TunVerdict::Reply(n) = e.handle_tun_packet(&mut pkt, Instant::ZERO) else {
            panic!("expected an ICMP reply");
        };
        let reply = PacketInfo::parse(e.reply(n)).expect("valid reply");
        assert_eq!(reply.dst, PacketInfo::parse(&pkt).expect("valid").src);
        assert_eq!(reply.src, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)));
    }

    #[test]
    fn syn_mss_is_clamped_to_the_tun_mtu_or_the_smallest_lane() {
        let mut e = exit_engine(); // TUN MTU 1400
        let big = up(&mut e, "a", 1500);
        let mut pkt = to_site_a();
        e.handle_tun_packet(&mut pkt, Instant::ZERO);
        assert_eq!(u16::from_be_bytes([pkt[42], pkt[43]]), 1360);
        e.remove_lane(big);
        up(&mut e, "a", 1300);
        let mut pkt = to_site_a();
        e.handle_tun_packet(&mut pkt, Instant::ZERO);
        assert_eq!(u16::from_be_bytes([pkt[42], pkt[43]]), 1260);
    }

    #[test]
    fn lane_ids_are_reused_and_removed_lanes_are_not_picked() {
        let mut e = exit_engine();
        let a1 = up(&mut e, "a", 1400);
        let a2 = up(&mut e, "a", 1400);
        e.remove_lane(a1);
        let mut pkt = to_site_a();
        assert_eq!(
            forwarded_on(e.handle_tun_packet(&mut pkt, Instant::ZERO)),
            a2
        );
        let again = up(&mut e, "a", 1400);
        assert_eq!(again, a1);
        e.remove_lane(a2);
        e.remove_lane(again);
        let mut pkt = to_site_a();
        assert_eq!(
            e.handle_tun_packet(&mut pkt, Instant::ZERO),
            TunVerdict::Drop(DropReason::NoLane)
        );
    }

    #[test]
    fn afmt_spreads_new_flows_within_one_batch_by_counting_what_it_queued() {
        // Between two snapshots from quinn, the engine adds each packet to its lane's
        // fill; otherwise every new flow of a batch would pick the same lane.
        let mut e = engine(Role::Exit, Algorithm::Afmt);
        let a = up(&mut e, "a", 1400);
        let b = up(&mut e, "a", 1400);
        let mut lanes = Vec::new();
        for port in 0..4u16 {
            let mut pkt = to_site_a();
            pkt[20..22].copy_from_slice(&(1000 + port).to_be_bytes()); // another flow
            lanes.push(forwarded_on(e.handle_tun_packet(&mut pkt, Instant::ZERO)));
        }
        assert_eq!(lanes, [a, b, a, b]);
        assert_eq!(e.flows_active(), 4);
    }
}
