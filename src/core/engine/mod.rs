//! The data path of one gateway, as one state machine.
//!
//! Contract, after quinn-proto's `Connection`: the shell hands in what happened, with
//! the current instant, and drains what the engine decided.
//!
//! - Inputs: a packet read from the TUN device ([`DataPath::handle_tun_packet`]), a
//!   datagram received on a lane ([`DataPath::handle_lane_datagram`]), a lane that came
//!   up or closed ([`DataPath::handle_lane_up`], [`DataPath::handle_lane_closed`]), a
//!   sample of a lane's QUIC state ([`DataPath::handle_lane_sample`], for each
//!   lane [`DataPath::lanes_to_sample`] lists), a controller's pacing table
//!   ([`DataPath::handle_pacing_table`]), and the passing of time
//!   ([`DataPath::handle_timeout`]).
//! - Outputs, polled: datagrams to send on a lane ([`DataPath::poll_transmit`]),
//!   packets (and ICMP errors) to write to the TUN device
//!   ([`DataPath::poll_tun_write`]), lanes to close ([`DataPath::poll_lane_close`]),
//!   packets for a site another of an exit's threads serves ([`DataPath::poll_handoff`],
//!   see [`Shard`]), the next instant it wants to be woken ([`DataPath::poll_timeout`]),
//!   and counters.
//!
//! Everything that decides lives here: admission, classification and pacing per
//! application, scheduling, lane liveness and replacement, the lane queue limit, flow
//! expiry, reordering measurement, and counting, which happens once per packet after
//! its verdict. The engine never touches a socket, a clock or quinn; per-packet work
//! allocates nothing but the rare ICMP reply.
//!
//! Every packet sent to a site carries the site's next sequence number (see
//! `wire::DATAGRAM_HEADER_LEN`); the receiving engine counts, per flow, packets that
//! arrive after a packet of the same flow that was sent later: reordering.
//!
//! The engine's parts, each in its file: [`lanes`] (a lane's state), [`liveness`]
//! (waiting for answers, probes, stalls), [`repair`] (loss reports and sending again),
//! [`warm_up`] (padding that opens new lanes' windows), [`sites`] (per-site state and
//! routing), [`forward`] (a packet's way to its lane), [`shaping`] (uplinks of known
//! rate), [`counters`] (what the shell reads) and [`config`]; this file is the face:
//! the `handle_*` inputs, the `poll_*` outputs and [`DataPath::poll_timeout`].

mod background;
mod config;
mod counters;
mod deadlines;
mod duplicate;
mod forward;
mod lanes;
mod liveness;
mod quiet;
mod repair;
mod shaping;
mod sites;
mod standby;
mod standby_copies;
mod steering;
#[cfg(test)]
mod tests;
mod timers;
mod variation_report;
mod warm_up;

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};

use super::app_pacing::AppPacing;
use super::background::BackgroundSettings;
use super::cutoff::CutChange;
use super::icmp::MAX_REPLY_LEN;
use super::lane::{Colour, LaneId, LaneSample, LaneView};
use super::pacer::Enqueued;
use super::pacing_table::{AppIdx, PacingTable};
use super::packet::PacketInfo;
use super::reseq::{HeldBudget, base_deadline};
use super::route::PrefixMap;
use super::sched::Algorithm;
use super::shaper::{AbeSettings, Released};
use super::stats::{DelayHistogram, DropReason};
use super::tiers::TierSettings;
use super::time::Instant;
use super::wire::{DATAGRAM_HEADER_LEN, Datagram};

pub use super::site::SiteIdx;
pub use config::{EngineConfig, EngineConfigBuilder, Role, Shard, SiteSpec};
pub use counters::{GreenDrops, LaneCounters, LaneReport, LaneState, ShaperReport};
pub use liveness::{
    KEEP_ALIVE, LANE_STALL, LaneService, PEER_ACK_DELAY, PROBE_INTERVAL, answer_timeout,
};
pub use quiet::{QUIET_AFTER, QUIET_KEEP_ALIVE, QUIET_SAMPLE_INTERVAL, QUIET_STALL};
pub use repair::{RESEND_MAX_BYTES, RESEND_WINDOW};
pub use standby::{UplinkDemand, UplinkPolicy, UplinkTier};

use forward::Packet;
use lanes::Lane;
use shaping::UplinkShaper;
use sites::{Site, prefix_map, schedulers, view_mut};
use standby::{ConfiguredUplink, TierScratch};
use timers::{Timer, TimerTable, earliest};

/// Bytes a lane may have queued inside braid before packets for it are dropped: a
/// bound on memory; the queue is kept short in time by CoDel and its bound
/// ([`super::aqm::lane_max_sojourn`]), which govern every lane slower than about
/// 170 Mbit/s. On faster ones the data path hands a lane a wake-up's TCP
/// super-packets at once, megabytes, and a 256 KiB bound dropped many of them over
/// unshaped uplinks (docs/design/tun-offload-and-threads.md).
pub const LANE_QUEUE_LIMIT: u64 = 1024 * 1024;
/// Lanes are sampled at most this often while packets flow: quinn's accessors take
/// its connection lock, so once per batch, not per packet.
pub const SAMPLE_INTERVAL: Duration = Duration::from_millis(1);
/// Lanes are sampled at least this often, traffic or not, so that liveness and the
/// metrics stay fresh.
pub const IDLE_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// A datagram to send on a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    pub lane: LaneId,
    pub datagram: Bytes,
}

/// A lane as the shell announces it, once its handshake and hello are done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneUp<'a> {
    pub site: &'a str,
    pub uplink: &'a str,
    pub colour: Colour,
    /// The uplink's position in the entry's configuration.
    pub rank: u32,
    /// The uplink's tier and quality limits.
    pub policy: UplinkPolicy,
    /// The uplink's rate in this gateway's sending direction, when known (kbit/s).
    pub rate_kbps: Option<u64>,
}

/// Why the engine wants a lane closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneClose {
    /// A newer lane of its site, uplink and colour took its place.
    Replaced,
    /// A reload removed its site.
    SiteRemoved,
}

impl LaneClose {
    /// The reason given to the peer in the QUIC close frame.
    pub fn reason(self) -> &'static [u8] {
        match self {
            LaneClose::Replaced => b"replaced",
            LaneClose::SiteRemoved => b"site removed",
        }
    }
}

/// The data path state machine.
pub struct DataPath {
    role: Role,
    shard: Shard,
    /// See [`EngineConfig::warm_up_lanes`].
    warm_up_lanes: bool,
    sites: Vec<Site>,
    site_by_prefix: PrefixMap<SiteIdx>,
    /// Lane id -> lane; `None` for free ids, which are reused.
    lanes: Vec<Option<Lane>>,
    pacing: AppPacing<Packet>,
    tun_mtu: usize,
    /// The scheduler settings, for sites added later.
    algorithm: Algorithm,
    max_flows: usize,
    flow_idle_timeout: Duration,
    lane_stall: Duration,
    lane_queue_limit: u64,
    /// Bit `d` set: inner DSCP `d` is green.
    green_inner_dscp: u64,
    /// Packets sent per colour (by `Colour as usize`), and those of them that took
    /// the other colour's lanes for want of their own.
    colour_packets: [u64; 2],
    colour_fallbacks: [u64; 2],
    /// How long packets of each colour were expected to wait in their lane's queue.
    queue_delay: [DelayHistogram; 2],
    abe: AbeSettings,
    /// The egress of every uplink of known rate, by site and uplink name; kept while
    /// the engine runs (an uplink's lanes come and go).
    shapers: Vec<UplinkShaper>,
    /// Packets the shapers let go, reused between timeouts.
    shaped: Vec<Released>,
    /// Datagrams of a lane given up, on their way to the other lanes; reused.
    resend_batch: Vec<Bytes>,
    /// Green packets DSD refused at arrival and dropped as stale.
    green_drops: GreenDrops,
    dropped: [u64; DropReason::ALL.len()],
    transmits: VecDeque<Transmit>,
    tun_writes: VecDeque<Bytes>,
    /// Packets read from the TUN device for other threads' sites, with the thread.
    handoffs: VecDeque<(usize, BytesMut)>,
    lanes_to_close: VecDeque<(LaneId, LaneClose)>,
    lane_services: VecDeque<(LaneId, LaneService)>,
    /// A steered application's lanes as its scheduler sees them (`steering.rs`),
    /// reused from packet to packet.
    steered_lanes: Vec<LaneView>,
    /// When the engine wants to be woken, and for what.
    timers: TimerTable,
    /// Bytes every site's resequencer holds, bounded together.
    held_budget: HeldBudget,
    /// The lanes sampled at every round (`quiet.rs`), when they last were, and
    /// whether one wants a sample at once.
    busy: Vec<LaneId>,
    busy_sampled_at: Instant,
    sample_due: bool,
    /// Packets the pacer released, reused between timeouts.
    released: Vec<(SiteIdx, AppIdx, Packet)>,
    /// How background applications search for the spare capacity, and when their
    /// current control interval began.
    background: BackgroundSettings,
    revised_at: Instant,
    /// When flows with deadlines were last reviewed.
    deadlines_reviewed_at: Instant,
    /// The tiers' timing; the entry's uplinks, whether each is dialled, and what the
    /// shell is to dial or hang up; when the tiers were first configured (cold
    /// uplinks are not dialled in the first moments, see `standby.rs`).
    tier_settings: TierSettings,
    /// An exit forwards a site's packets to other sites' prefixes.
    site_to_site: bool,
    configured_uplinks: Vec<ConfiguredUplink>,
    uplink_demands: VecDeque<UplinkDemand>,
    tiers_started: Option<Instant>,
    tier_scratch: TierScratch,
    reply: [u8; MAX_REPLY_LEN],
}

impl DataPath {
    pub fn new(config: EngineConfig) -> DataPath {
        let sites: Vec<Site> = config
            .sites
            .iter()
            .map(|spec| {
                let mut site = Site::new(
                    spec,
                    config.algorithm,
                    config.flow_idle_timeout,
                    config.max_flows,
                );
                site.start(config.role);
                site
            })
            .collect();
        let pacing = AppPacing::new(
            sites.len(),
            config.role.paced_direction(),
            config.default_rate_kbps,
            config.flow_idle_timeout,
            config.max_flows,
        );
        let site_by_prefix = prefix_map(&sites);
        DataPath {
            role: config.role,
            shard: config.shard,
            warm_up_lanes: config.warm_up_lanes,
            sites,
            site_by_prefix,
            lanes: Vec::new(),
            pacing,
            tun_mtu: config.tun_mtu,
            algorithm: config.algorithm,
            max_flows: config.max_flows,
            flow_idle_timeout: config.flow_idle_timeout,
            lane_stall: config.lane_stall,
            lane_queue_limit: config.lane_queue_limit,
            green_inner_dscp: config
                .green_inner_dscp
                .iter()
                .filter(|&&d| d < 64)
                .fold(0, |mask, &d| mask | 1 << d),
            colour_packets: [0; 2],
            colour_fallbacks: [0; 2],
            queue_delay: [DelayHistogram::default(); 2],
            abe: config.abe,
            shapers: Vec::new(),
            shaped: Vec::new(),
            resend_batch: Vec::new(),
            green_drops: GreenDrops::default(),
            dropped: [0; DropReason::ALL.len()],
            transmits: VecDeque::new(),
            tun_writes: VecDeque::new(),
            handoffs: VecDeque::new(),
            lanes_to_close: VecDeque::new(),
            lane_services: VecDeque::new(),
            steered_lanes: Vec::new(),
            timers: TimerTable::default(),
            held_budget: HeldBudget::default(),
            busy: Vec::new(),
            busy_sampled_at: Instant::ZERO,
            sample_due: false,
            released: Vec::new(),
            background: config.background,
            revised_at: Instant::ZERO,
            deadlines_reviewed_at: Instant::ZERO,
            tier_settings: config.tiers,
            site_to_site: config.site_to_site,
            configured_uplinks: Vec::new(),
            uplink_demands: VecDeque::new(),
            tiers_started: None,
            tier_scratch: TierScratch::default(),
            reply: [0; MAX_REPLY_LEN],
        }
    }

    // ---- inputs -------------------------------------------------------------------

    /// Handles a packet read from the TUN device, which sits in `datagram` behind
    /// [`DATAGRAM_HEADER_LEN`] bytes of room for the header, so that the datagram is
    /// built in place: admitted, classified, paced, scheduled, queued on its lane.
    /// At an exit, a packet for another thread's site is handed over untouched.
    pub fn handle_tun_packet(&mut self, mut datagram: BytesMut, now: Instant) {
        let Some(packet) = datagram.get_mut(DATAGRAM_HEADER_LEN..) else {
            return self.count_drop(DropReason::Malformed);
        };
        let info = match PacketInfo::parse(packet) {
            Ok(info) => info,
            Err(_) => return self.count_drop(DropReason::Malformed),
        };
        if info.to_link_local() {
            return self.count_drop(DropReason::LinkLocal);
        }
        let site = match self.role {
            Role::Entry => SiteIdx(0),
            Role::Exit => match self.site_by_prefix.lookup(info.dst) {
                Some(site) if self.owns(site) => site,
                Some(site) => {
                    let thread = Shard::of(site, self.shard.count);
                    return self.handoffs.push_back((thread, datagram));
                }
                None => return self.count_drop(DropReason::NoSite),
            },
        };
        info.clamp_tcp_mss(packet, || self.max_mss(site, info.is_ipv6()));
        self.flows_touched(now);
        let direction = self.pacing.direction();
        let app = self.pacing.classify(site, &info, direction, now);
        let decelerated = match self.pacing.due(site, app) {
            Some(due) => self.carry_deadline(site, app, due, &info, &datagram, now),
            None => false,
        };
        match self.pacing.enqueue(
            site,
            app,
            decelerated,
            Packet { info, datagram },
            info.len,
            now,
        ) {
            Enqueued::Now(packet) => self.forward(site, app, packet, now),
            Enqueued::Queued => {}
            Enqueued::Dropped(_) => self.count_drop(DropReason::QueueFull),
            Enqueued::Standing(_) => self.count_drop(DropReason::QueueDelay),
        }
    }

    /// Handles a datagram received on `lane`: after the header it must hold exactly
    /// one IP packet and, at the exit, come from an address of the lane's own site.
    /// Its packet then goes to the TUN device.
    pub fn handle_lane_datagram(&mut self, lane: LaneId, datagram: Bytes, now: Instant) {
        self.touch_lane(lane);
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return self.count_drop(DropReason::NoLane);
        };
        let parsed = Datagram::parse(&datagram);
        match parsed {
            // A probe: QUIC acknowledges it; it carries nothing for braid.
            Some(Datagram::Probe) => {
                l.counters.probes_received += 1;
                return;
            }
            Some(Datagram::LossReport(report)) => return self.repair(lane, report, now),
            Some(Datagram::VariationReport(report)) => return self.peer_variation(lane, report),
            Some(Datagram::Packet { .. }) | None => {}
        }
        // Counted before the check: a datagram too short for a header was received too.
        l.counters.rx_packets += 1;
        l.counters.rx_bytes += datagram.len() as u64;
        let site_idx = l.site;
        let Some(Datagram::Packet { header, packet }) = parsed else {
            return self.count_drop(DropReason::Malformed);
        };
        if let Some(report) = l.received_lane_seq(header.lane_seq) {
            l.counters.loss_reported += u64::from(report.count);
            self.hand_control(lane, Bytes::copy_from_slice(&report.encode()), now);
        }
        let Ok(info) = PacketInfo::parse(packet) else {
            return self.count_drop(DropReason::Malformed);
        };
        if self.role == Role::Exit {
            if self.site_by_prefix.lookup(info.src) != Some(site_idx) {
                return self.count_drop(DropReason::Spoofed);
            }
            // Allowed, the kernel routes it back into the TUN device, to its site.
            if !self.site_to_site && self.site_by_prefix.lookup(info.dst).is_some() {
                return self.count_drop(DropReason::SiteToSite);
            }
        }
        self.flows_touched(now);
        self.site_carried(site_idx, now);
        // Only measured: the other end paced this direction.
        let incoming = self.pacing.direction().reverse();
        let app = self.pacing.classify(site_idx, &info, incoming, now);
        // The packet behind the header: `advance` moves the start, where `slice`
        // would touch the buffer's reference count, shared with quinn's receive path.
        let mut packet = datagram;
        packet.advance(DATAGRAM_HEADER_LEN);
        // The sending gateway clamped the SYN to its own path MTU; this one's may be
        // lower (an exit on `[::]` assumes IPv6 uplinks), and a segment too large for
        // this gateway's lanes or TUN device would cost the connection a path MTU
        // discovery round and its first window. SYNs are rare: copying one is cheap.
        let max_mss = || self.max_mss(site_idx, info.is_ipv6());
        if info.needs_mss_clamp(&packet, max_mss) {
            let mut owned = BytesMut::from(&packet[..]);
            info.clamp_tcp_mss(&mut owned, max_mss);
            packet = owned.freeze();
        }
        let site = &mut self.sites[site_idx.0 as usize];
        let first = site.reseq.receive(
            info.flow_key(),
            header,
            packet,
            now,
            &mut self.held_budget,
            &mut self.tun_writes,
        );
        // Counted once: a copy that arrived second carried nothing new.
        if first {
            self.pacing.count_carried(site_idx, app, incoming, info.len);
        } else {
            self.pacing.count_duplicate_dropped(site_idx, app);
        }
        self.timers
            .earliest(Timer::Reseq, site.reseq.poll_timeout());
    }

    /// Registers a lane whose handshake and hello are done and returns its id, or
    /// `None` for a site this gateway does not serve. A live lane of the same site,
    /// uplink and colour is replaced (a reconnect overtook its idle timeout): it is
    /// never scheduled again and comes out of [`DataPath::poll_lane_close`].
    pub fn handle_lane_up(&mut self, up: LaneUp<'_>, now: Instant) -> Option<LaneId> {
        let site = self.site_index(up.site).filter(|&s| self.owns(s))?;
        for (i, old) in self.lanes.iter_mut().enumerate() {
            if let Some(old) = old
                && !old.retired
                && old.site == site
                && old.colour == up.colour
                && old.uplink == up.uplink
            {
                old.retired = true;
                old.healthy = false;
                old.state_since = now;
                let id = LaneId(i as u32);
                self.lanes_to_close.push_back((id, LaneClose::Replaced));
                if let Some(v) = view_mut(&mut self.sites, site, id) {
                    v.up = false;
                }
            }
        }
        let lane = Lane {
            policy: up.policy,
            ..Lane::new(site, up.uplink, up.colour, now)
        };
        let id = match self.lanes.iter().position(Option::is_none) {
            Some(free) => {
                self.lanes[free] = Some(lane);
                LaneId(free as u32)
            }
            None => {
                self.lanes.push(Some(lane));
                LaneId(self.lanes.len() as u32 - 1)
            }
        };
        // Known, and so shaped, only if positive.
        let rate_kbps = up.rate_kbps.filter(|&r| r > 0);
        let shaper = self.attach_shaper(site, up.uplink, up.colour, id, rate_kbps, now);
        if let Some(Some(l)) = self.lanes.get_mut(id.0 as usize) {
            l.shaper = shaper;
        }
        // Lanes stay grouped by colour, each group in the order its lanes came up.
        let lanes = &mut self.sites[site.0 as usize].lanes;
        let at = lanes.partition_point(|v| v.colour <= up.colour);
        lanes.insert(
            at,
            LaneView {
                rank: up.rank,
                rate_kbps,
                ..LaneView::new(id, up.colour)
            },
        );
        self.touch_lane(id);
        self.sample_due = true;
        self.timers
            .earliest(Timer::StallCheck, Some(now.saturating_add(self.lane_stall)));
        self.timers.earliest(
            Timer::IdleSample,
            Some(now.saturating_add(IDLE_SAMPLE_INTERVAL)),
        );
        self.timers
            .earliest(Timer::KeepAlive, Some(now.saturating_add(KEEP_ALIVE)));
        Some(id)
    }

    /// Forgets a lane whose connection is closed and whose datagrams were all handed
    /// in; its id may be handed out again.
    pub fn handle_lane_closed(&mut self, lane: LaneId) {
        for s in &mut self.shapers {
            s.shaper.lane_closed(lane);
        }
        if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize).map(Option::take) {
            self.sites[l.site.0 as usize].lanes.retain(|v| v.id != lane);
        }
        // Its id may come back with another lane, which is listed anew.
        self.busy.retain(|&id| id != lane);
        if self.lanes.iter().all(Option::is_none) {
            self.timers.set(Timer::IdleSample, None);
        }
    }

    /// Takes how many bytes a lane's sender has taken off its queue so far: cheaper
    /// than a whole sample (no quinn lock), so the shell passes it in on every
    /// wake-up and the queue limit and the scheduler see the queue as it is, not as
    /// it was at the last sample.
    pub fn handle_lane_dequeued(&mut self, lane: LaneId, dequeued_bytes: u64) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        if dequeued_bytes <= l.dequeued_bytes {
            return;
        }
        l.dequeued_bytes = dequeued_bytes;
        // The scheduler's view too: striping picks lanes by when packets arrive.
        let fill = l.fill(&self.shapers);
        if let Some(v) = view_mut(&mut self.sites, l.site, lane) {
            v.fill = fill;
        }
    }

    /// Takes a lane's sample: liveness, fill, SRTT, cwnd and counters.
    pub fn handle_lane_sample(&mut self, lane: LaneId, sample: LaneSample, now: Instant) {
        if self.timers.is_due(Timer::WarmSample, now) {
            self.timers.set(Timer::WarmSample, None);
        }
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        (l.sampled_at, l.touched) = (now, false);
        let heard = sample.rx_datagrams != l.rx_datagrams;
        if heard {
            l.rx_datagrams = sample.rx_datagrams;
            l.heard_at = now;
            l.answered();
            l.pings_when_heard = sample.sent_pings;
        }
        l.sent_pings = sample.sent_pings;
        l.forget_old(now);
        l.dequeued_bytes = sample.dequeued_bytes;
        l.quinn_queued_bytes = sample.quinn_queued_bytes;
        l.closed = sample.closed;
        let lost_more = sample.lost_packets > l.counters.lost_packets;
        l.counters.tx_packets = sample.sent_packets;
        l.counters.tx_bytes = sample.sent_bytes;
        l.counters.wire_bytes = sample.wire_bytes;
        l.counters.lost_packets = sample.lost_packets;
        // Packets the engine handed out that never left: counted once, here.
        self.dropped[DropReason::TooBig as usize] +=
            sample.refused_datagrams.saturating_sub(l.refused_datagrams);
        self.dropped[DropReason::NoLane as usize] += sample
            .abandoned_datagrams
            .saturating_sub(l.abandoned_datagrams);
        l.refused_datagrams = sample.refused_datagrams;
        l.abandoned_datagrams = sample.abandoned_datagrams;
        let left_before = l.left_quinn;
        l.left_quinn =
            sample.transmitted_datagrams + sample.refused_datagrams + sample.abandoned_datagrams;
        if l.answer_due.is_some() && l.left_quinn > left_before && l.left_quinn >= l.answer_for {
            let due = l.count_chance(sample.srtt, now);
            self.timers.earliest(Timer::StallCheck, due);
        }
        if heard && l.left_quinn < l.handed_datagrams {
            // Packets handed before are still inside braid or quinn (its congestion
            // window is full): the next of them to leave, or quinn's probe, must be
            // answered in turn. Without this, a lane the scheduler stops handing
            // packets to because of that queue would wait for the idle bound.
            let due = l.await_answer(l.left_quinn + 1, now, sample.srtt);
            self.timers.earliest(Timer::StallCheck, Some(due));
        }
        l.review_wait(sample.srtt, now);
        let idle_bound = self.sites[l.site.0 as usize].idle_bound(l.heard_at, self.lane_stall, now);
        let silent_from = l.silent_from(idle_bound);
        let alive = now < silent_from;
        // Its own queue, not its uplink shaper's: the other colour's packets there
        // would keep it from ever returning while they flow. And only once heard from
        // since it was taken out: a lane taken out with a silent one (`silent_alike`)
        // whose own wait was not yet judged otherwise came back at its next sample,
        // and took packets onto its dead path until judged again.
        let mut recovered = false;
        if !alive {
            l.recovering = true;
        } else if l.recovering
            && l.heard_at > l.state_since
            && l.own_queue() == 0
            && l.left_quinn >= l.handed_datagrams
        {
            l.recovering = false;
            recovered = true;
        }
        let fill = l.fill(&self.shapers);
        let healthy = !l.retired && !l.closed && sample.max_datagram > 0 && alive && !l.recovering;
        let standing_changed = l.healthy != healthy;
        if healthy {
            self.timers.earliest(Timer::StallCheck, Some(silent_from));
        }
        let mut stalled = false;
        if let Some(v) = view_mut(&mut self.sites, l.site, lane) {
            if l.healthy != healthy {
                if l.healthy && !alive {
                    l.counters.stalls += 1;
                    stalled = true;
                } else if recovered {
                    let out_for = now.saturating_since(l.state_since);
                    self.lane_services
                        .push_back((lane, LaneService::Back { out_for }));
                }
                l.state_since = now;
            }
            l.healthy = healthy;
            v.up = l.carries();
            v.srtt = sample.srtt;
            v.min_srtt = l.min_srtt.observe(sample.srtt, now);
            if lost_more || sample.cwnd < v.cwnd {
                l.opening = false;
            }
            // A variation newly known shows that the window's reductions so far took
            // the variation for a queue: the lane's controller slow-starts again
            // (`core/lane_cc/`), and the lane is warmed up again as when it came up,
            // since a lane the scheduler passes over has nothing to grow with.
            if v.delay_variation.is_zero() && !sample.delay_variation.is_zero() {
                l.opening = true;
            }
            v.delay_variation = sample.delay_variation;
            v.first_slow_start = l.in_first_slow_start();
            l.codel.fit_lane(v.min_srtt);
            // A shaped lane carries no more than its uplink's rate, whatever QUIC's
            // window would allow: what it takes in a round trip at that rate.
            v.cwnd = match l.shaper {
                Some(s) => {
                    let rate = self.shapers[s].shaper.rate_bytes_per_sec();
                    let bdp = u128::from(rate) * sample.srtt.as_nanos() / 1_000_000_000;
                    sample
                        .cwnd
                        .min(u64::try_from(bdp).unwrap_or(u64::MAX).max(1))
                }
                None => sample.cwnd,
            };
            v.fill = fill;
            v.max_datagram = sample.max_datagram;
        }
        let quality = (sample.srtt, sample.quic_sent_packets, sample.lost_packets);
        let hold = self.tier_settings.hold;
        let cut_change = l.cutoff.observe(&l.policy.quality, quality, hold, now);
        if let Some(change) = cut_change {
            if let CutChange::Cut(_) = change {
                l.counters.cutoffs += 1;
            }
            self.lane_services
                .push_back((lane, LaneService::Quality(change)));
        }
        let site_idx = l.site;
        // Before what a silent lane lost is sent again: over the tier that takes over.
        // A quiet site's lanes are full of nothing, so its tiers change only with a
        // lane's standing or a hold that runs out; at an exit of a thousand quiet
        // sites, reviewing them at every sample showed in the idle exit's profile.
        let site = &self.sites[site_idx.0 as usize];
        if standing_changed || cut_change.is_some() || !site.quiet(now) || site.tiers.waiting(now) {
            self.review_tiers(site_idx, now);
        }
        let site = &mut self.sites[site_idx.0 as usize];
        site.reseq.set_base_deadline(base_deadline(&site.lanes));
        if stalled {
            self.give_up(lane, sample.srtt, now);
        } else {
            self.warm_up(lane, now);
            if healthy {
                self.report_variation(lane, sample.learned_variation, now);
            }
        }
    }

    /// Hands `lane` one of braid's own messages (a loss or variation report): counted
    /// as handed like a packet, so that its answer is awaited as a packet's is.
    /// Returns whether the lane exists to take it.
    fn hand_control(&mut self, lane: LaneId, datagram: Bytes, now: Instant) -> bool {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return false;
        };
        let srtt = view_mut(&mut self.sites, l.site, lane).map_or(Duration::ZERO, |v| v.srtt);
        let due = l.hand(datagram.len() as u64, srtt, Duration::ZERO, now);
        self.timers.earliest(Timer::StallCheck, due);
        self.transmits.push_back(Transmit { lane, datagram });
        true
    }

    /// Schedules with new settings from now on (a reload changed them). The new
    /// schedulers start without flow state: each flow is scheduled as new from its
    /// next packet.
    pub fn handle_scheduler_config(
        &mut self,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
    ) {
        (self.algorithm, self.max_flows) = (algorithm, max_flows);
        for site in &mut self.sites {
            site.schedulers = schedulers(algorithm, flow_idle_timeout, max_flows);
        }
    }

    /// Forwards an exit's sites' packets to each other (`allowed`), or refuses them,
    /// from now on (`site_to_site` changed at a reload).
    pub fn handle_site_to_site(&mut self, allowed: bool) {
        self.site_to_site = allowed;
    }

    /// Paces traffic no application matches at `default_rate_kbps` from now on
    /// (`pacing.default_rate_kbps` changed at a reload).
    pub fn handle_default_rate(&mut self, default_rate_kbps: Option<u64>, now: Instant) {
        self.pacing.set_default_rate(default_rate_kbps, now);
    }

    /// Serves exactly `specs` from now on (an exit's reload): new sites are added,
    /// the lanes of sites that are gone close and new ones are refused, and packets
    /// are routed by the prefixes `specs` give. Indexes stay: a site that comes back
    /// takes its old one.
    pub fn handle_sites(&mut self, specs: &[SiteSpec], now: Instant) {
        for site in &mut self.sites {
            site.served = false;
        }
        for spec in specs {
            match self.sites.iter_mut().find(|s| s.id == spec.id) {
                Some(site) => {
                    site.served = true;
                    site.prefixes.clone_from(&spec.prefixes);
                }
                None => {
                    self.sites.push(Site::new(
                        spec,
                        self.algorithm,
                        self.flow_idle_timeout,
                        self.max_flows,
                    ));
                    self.pacing.add_site();
                }
            }
        }
        for (i, lane) in self.lanes.iter_mut().enumerate() {
            if let Some(l) = lane
                && !l.retired
                && !self.sites[l.site.0 as usize].served
            {
                l.retired = true;
                l.healthy = false;
                l.state_since = now;
                let id = LaneId(i as u32);
                self.lanes_to_close.push_back((id, LaneClose::SiteRemoved));
                if let Some(v) = view_mut(&mut self.sites, l.site, id) {
                    v.up = false;
                }
            }
        }
        self.site_by_prefix = prefix_map(&self.sites);
    }

    /// Replaces a site's application table (already validated). Queues of
    /// applications that keep their name keep their packets; packets of applications
    /// that are gone were accepted, so they go on unpaced.
    pub fn handle_pacing_table(&mut self, site: SiteIdx, table: PacingTable, now: Instant) {
        let mut unpaced = std::mem::take(&mut self.released);
        self.pacing.apply(site, table, now, |p| {
            unpaced.push((site, AppIdx::DEFAULT, p))
        });
        self.forward_released(&mut unpaced, now);
        self.released = unpaced;
        self.arm_background(now);
    }

    /// Does what is due at `now`: releases paced packets, forgets idle flows, and
    /// stops scheduling lanes that fell silent. Cheap when nothing is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timers.is_due(Timer::ShaperRelease, now) {
            self.release_shaped(now);
        }
        if self.timers.is_due(Timer::Reseq, now) {
            let mut next = None;
            for site in &mut self.sites {
                site.reseq
                    .handle_timeout(now, &mut self.held_budget, &mut self.tun_writes);
                next = earliest(next, site.reseq.poll_timeout());
            }
            self.timers.set(Timer::Reseq, next);
        }
        if self.pacing.next_release().is_some_and(|at| at <= now) {
            let mut released = std::mem::take(&mut self.released);
            self.pacing
                .release(now, |site, app, p| released.push((site, app, p)));
            self.forward_released(&mut released, now);
            self.released = released;
        }
        if self.timers.is_due(Timer::FlowExpiry, now) {
            self.pacing.expire(now);
            let mut next = self.pacing.next_expiry();
            for site in &mut self.sites {
                for scheduler in &mut site.schedulers {
                    scheduler.expire(now);
                    next = earliest(next, scheduler.next_expiry());
                }
                site.reseq.expire(now);
                next = earliest(next, site.reseq.next_expiry());
                site.resequenced_drops.expire(now, |_| ());
                next = earliest(next, site.resequenced_drops.next_expiry());
            }
            self.timers.set(Timer::FlowExpiry, next);
        }
        if self.timers.is_due(Timer::StallCheck, now) {
            self.check_stalls(now);
        }
        if self.timers.is_due(Timer::KeepAlive, now) {
            self.send_keep_alives(now);
        }
        if self.timers.is_due(Timer::BackgroundSample, now) {
            self.sample_background(now);
        }
        if self.timers.is_due(Timer::BackgroundRevise, now) {
            self.revise_background(now);
        }
        if self.timers.is_due(Timer::DeadlineReview, now) {
            self.review_deadlines(now);
        }
    }

    /// Counts a peer refused before it became a lane (failed handshake, wrong site).
    pub fn handle_peer_refused(&mut self, reason: DropReason) {
        self.count_drop(reason);
    }

    /// Counts a read from the TUN device that held no packet braid can take apart.
    pub fn handle_tun_malformed(&mut self) {
        self.count_drop(DropReason::Malformed);
    }

    /// Counts `packets` the TUN device refused in one write: because its queue was
    /// full, or for another reason.
    pub fn handle_tun_refused(&mut self, packets: usize, full: bool) {
        let reason = if full {
            DropReason::QueueFull
        } else {
            DropReason::TunRefused
        };
        self.dropped[reason as usize] += packets as u64;
    }

    /// Counts a datagram the shell could not hand to its lane (the lane is closing).
    pub fn handle_lane_gone(&mut self) {
        self.count_drop(DropReason::NoLane);
    }

    /// Counts `packets` the shell could not hand to the thread serving their site
    /// (that thread's inbox was full).
    pub fn handle_handoff_refused(&mut self, packets: usize) {
        self.dropped[DropReason::HandoffFull as usize] += packets as u64;
    }

    // ---- outputs ------------------------------------------------------------------

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let transmit = self.transmits.pop_front()?;
        self.touch_lane(transmit.lane);
        Some(transmit)
    }

    /// The next packet to write to the TUN device.
    pub fn poll_tun_write(&mut self) -> Option<Bytes> {
        self.tun_writes.pop_front()
    }

    /// The next packet for another thread's site, with that thread: it goes to that
    /// thread's [`DataPath::handle_tun_packet`] as it is.
    pub fn poll_handoff(&mut self) -> Option<(usize, BytesMut)> {
        self.handoffs.pop_front()
    }

    /// The next lane whose connection the shell should close, and why.
    pub fn poll_lane_close(&mut self) -> Option<(LaneId, LaneClose)> {
        self.lanes_to_close.pop_front()
    }

    /// The next lane taken out of service or put back, for the log.
    pub fn poll_lane_service(&mut self) -> Option<(LaneId, LaneService)> {
        self.lane_services.pop_front()
    }

    /// When [`DataPath::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // The pacer keeps its deadline itself.
        let mut timers = self.timers;
        timers.set(Timer::PacingRelease, self.pacing.next_release());
        timers.next()
    }

    /// A flow table was (or may have been) written at `now`: its entry expires one
    /// flow timeout later, no earlier than any entry already there.
    fn flows_touched(&mut self, now: Instant) {
        if self.timers.get(Timer::FlowExpiry).is_none() {
            self.timers.set(
                Timer::FlowExpiry,
                Some(now.saturating_add(self.flow_idle_timeout)),
            );
        }
    }
}
