//! Routing and forwarding: a packet the pacer let go gets its colour, its lane from
//! the site's scheduler, its header, and a place in its uplink's shaper or its lane's
//! queue (each managed by time); one too big for its lane gets an ICMP error.

use bytes::{Bytes, BytesMut};

use crate::core::aqm::{self, AqmDrop};
use crate::core::icmp;
use crate::core::lane::{Colour, longest_one_way};
use crate::core::pacing_table::AppIdx;
use crate::core::packet::PacketInfo;
use crate::core::sched::{DecisionKind, PickContext};
use crate::core::shaper::ShapeDrop;
use crate::core::site::SiteIdx;
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, DatagramHeader, write_datagram_header};

use super::lanes::{hand_to_lane, number_for_lane};
use super::sites::lanes_of;
use super::standby_copies::is_sparse;
use super::steering::Steered;
use super::timers::Timer;
use super::{DataPath, Transmit};

/// A packet read from the TUN device on its way to a lane: its datagram, with room
/// for the header in front, and what it is.
pub(super) struct Packet {
    pub info: PacketInfo,
    pub datagram: BytesMut,
}

impl DataPath {
    /// Picks the lane of a packet its pacer let go and queues it there, or answers
    /// with an ICMP error when it is too big for that lane.
    pub(super) fn forward(&mut self, site_idx: SiteIdx, app: AppIdx, packet: Packet, now: Instant) {
        let Packet { info, mut datagram } = packet;
        self.site_carried(site_idx, now);
        let colour = self.colour_of(site_idx, app, &info);
        let site = &self.sites[site_idx.0 as usize];
        let flow = info.flow_key();
        // AFMT picks among the live lanes of the packet's colour; while that colour
        // has none, the other colour's carry it.
        let mut lanes = lanes_of(&site.lanes, colour);
        let mut borrowed = false;
        if !site.lanes[lanes.clone()].iter().any(|v| v.up) {
            let other = lanes_of(&site.lanes, colour.other());
            if site.lanes[other.clone()].iter().any(|v| v.up) {
                lanes = other;
                borrowed = true;
            }
        }
        let steered = self.steer(site_idx, app, lanes.clone());
        if steered == Steered::Refused {
            return self.count_drop(DropReason::Steered);
        }
        let site = &mut self.sites[site_idx.0 as usize];
        let tier_doubted = site.tier_in_doubt(self.lane_stall, now);
        let scheduler = &mut site.schedulers[colour as usize];
        let Some(mut pick) = scheduler.pick(&PickContext {
            flow,
            len: info.len,
            seq: site.tx_seq,
            lanes: match steered {
                Steered::Allowed => &self.steered_lanes,
                _ => &site.lanes[lanes.clone()],
            },
            now,
        }) else {
            return self.count_drop(DropReason::NoLane);
        };
        pick.lane += lanes.start;
        let group = lanes.clone();
        let longest = longest_one_way(&site.lanes[lanes]);
        let view = &mut site.lanes[pick.lane];
        if info.len > view.max_datagram {
            scheduler.unsent(flow);
            let mtu = u16::try_from(view.max_datagram).unwrap_or(u16::MAX);
            return self.too_big(&info, &datagram[DATAGRAM_HEADER_LEN..], mtu);
        }
        let len = datagram.len() as u64;
        // How long the packet will wait in braid: the bytes ahead of it at the lane's
        // rate; of that, CoDel drains only the wait beyond the longest lane's delay.
        let sojourn = view.drain_time(0, view.srtt);
        let excess = view.wait_beyond(sojourn, longest);
        let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
            scheduler.unsent(flow);
            return self.count_drop(DropReason::NoLane);
        };
        // The lane sequence number comes as the packet is handed to the lane
        // ([`number_for_lane`]): a shaped uplink's packets may wait behind packets
        // sent again, which go straight to the lane.
        let header = DatagramHeader {
            seq: site.tx_seq,
            gap: pick.gap,
            copy: false,
            lane_seq: 0,
        };
        write_datagram_header(&mut datagram, header);
        // A `duplicate` application's copy, sent once the packet itself is on its way.
        let copy = self
            .pacing
            .table(site_idx)
            .app(app)
            .is_some_and(|a| a.duplicate)
            .then(|| BytesMut::from(&datagram[..]));
        // A sparse flow's copy for a standby uplink while the carrying tier is in doubt.
        let standby_copy =
            (tier_doubted && is_sparse(&pick)).then(|| BytesMut::from(&datagram[..]));
        // The lane's uplink shaper takes it, or the lane's own queue, each managed by
        // time. `Some` is a packet to hand to the lane now.
        let verdict = match lane.shaper {
            Some(s) => {
                let mtu = view.max_datagram as u64;
                let intended = longest.saturating_sub(view.one_way());
                let shaper = &mut self.shapers[s].shaper;
                // Flows striped over the site's lanes hear of its drops as late as the
                // longest lane delivers.
                shaper.fit_paths(longest);
                let queued = shaper.enqueue(datagram, view.colour, mtu, intended, now);
                self.timers
                    .earliest(Timer::ShaperRelease, shaper.next_release());
                queued.map(|()| None)
            }
            None if lane.queued_bytes() + len > self.lane_queue_limit => Err(ShapeDrop::QueueFull),
            None => {
                // A flow the receiver resequences is striped over the colour's lanes,
                // each with its own CoDel: one drop per congestion episode of the
                // flow, not one per lane.
                let resequenced = pick.gap != 0;
                // A flow whose previous packet came longer ago than the queue's wait
                // has nothing standing in it (fq_codel's sparse flows): CoDel's drops
                // are for the flows that keep the queue standing. Without this, the
                // drops a striped flow is spared (one per congestion episode) fell on
                // the sparse flows beside it, every packet of a 20 packets/s probe
                // for seconds (docs/design/lane-queues.md).
                let sparse = pick.kind == DecisionKind::NewFlow
                    || pick.since_previous.is_some_and(|d| d > sojourn);
                let (dropped, striped) = (&site.resequenced_drops, &site.striped_drops);
                let not_before = || {
                    if sparse {
                        Instant::MAX
                    } else if resequenced {
                        let flow_after = dropped.get(flow).map_or(Instant::ZERO, |e| e.value);
                        flow_after.max(striped.not_before())
                    } else {
                        Instant::ZERO
                    }
                };
                let mtu = view.max_datagram as u64;
                lane.codel.fit_striped_paths(longest);
                match lane.codel.verdict(excess, view.fill, mtu, now, not_before) {
                    Some(AqmDrop::TooLate) => Err(ShapeDrop::QueueFull),
                    Some(AqmDrop::Standing) => {
                        if resequenced {
                            let until = now + aqm::resequenced_drop_spacing(longest);
                            site.resequenced_drops.record(flow, until, now);
                            site.striped_drops.dropped(now, longest);
                        }
                        Err(ShapeDrop::QueueDelay)
                    }
                    None => Ok(Some(number_for_lane(lane, datagram))),
                }
            }
        };
        let datagram = match verdict {
            Ok(datagram) => datagram,
            Err(why) => {
                scheduler.unsent(flow);
                return self.count_shape_drop(why);
            }
        };
        site.tx_seq = site.tx_seq.wrapping_add(1);
        let queued_ahead = view.fill > 0;
        // Until the next sample, the packet counts towards the lane's fill, so that a
        // batch of packets does not all pick the same lane.
        view.fill += info.len as u64;
        view.last_sent = now;
        lane.counters.decisions[pick.kind as usize] += 1;
        // Counted once the packet is on its way, like every other count.
        self.colour_packets[colour as usize] += 1;
        self.colour_fallbacks[colour as usize] += u64::from(borrowed);
        let direction = self.pacing.direction();
        self.pacing
            .count_carried(site_idx, app, direction, info.len);
        if steered == Steered::Elsewhere {
            self.pacing.count_steered_off(site_idx, app);
        }
        let first = view.id;
        if let Some(datagram) = datagram {
            self.queue_delay[colour as usize].observe(sojourn);
            let id = view.id;
            let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
            self.timers.earliest(Timer::StallCheck, due);
            let len = datagram.len();
            self.transmits.push_back(Transmit { lane: id, datagram });
            if queued_ahead {
                self.open_lanes(site_idx, group, pick.lane, len, now);
            }
        }
        if let Some(copy) = copy {
            self.send_duplicate(site_idx, app, first, copy, now);
        }
        if let Some(copy) = standby_copy {
            self.send_standby_copy(site_idx, first, copy, now);
        }
    }

    pub(super) fn forward_released(
        &mut self,
        released: &mut Vec<(SiteIdx, AppIdx, Packet)>,
        now: Instant,
    ) {
        for (site, app, packet) in released.drain(..) {
            self.forward(site, app, packet, now);
        }
    }

    /// A packet's colour (SPEC §5), first rule that applies: its application's
    /// colour; its inner DSCP is one of `abe.green_inner_dscp`; blue.
    pub(super) fn colour_of(&self, site: SiteIdx, app: AppIdx, info: &PacketInfo) -> Colour {
        let app_colour = self.pacing.table(site).app(app).and_then(|a| a.colour);
        app_colour.unwrap_or(if self.green_inner_dscp >> (info.dscp & 63) & 1 == 1 {
            Colour::Green
        } else {
            Colour::Blue
        })
    }

    /// Drops a packet too big for its lane and, where the sender asked not to
    /// fragment, writes the ICMP error that tells it the lane's MTU.
    pub(super) fn too_big(&mut self, info: &PacketInfo, packet: &[u8], mtu: u16) {
        self.count_drop(DropReason::TooBig);
        if !info.dont_fragment {
            return;
        }
        if let Some(n) = icmp::write_too_big(packet, info.src, info.dst, mtu, &mut self.reply) {
            self.tun_writes
                .push_back(Bytes::copy_from_slice(&self.reply[..n]));
        }
    }

    /// Largest TCP MSS whose segments fit both the TUN MTU and every live lane of the
    /// site, so that TCP never depends on ICMP errors to find the path MTU.
    pub(super) fn max_mss(&self, site: SiteIdx, ipv6: bool) -> u16 {
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
