//! The engine's test harness: fixtures that drive one engine (a configuration, lanes
//! brought up and sampled, packets sent and datagrams received), and a whole-path
//! simulator, after quinn-proto's `Pair`, that drives two of them.
//!
//! The simulator: an entry [`DataPath`] and an exit [`DataPath`] joined by
//! virtual lanes (rate, one-way delay that may vary, loss), with many flows, a virtual clock that
//! jumps to the next event and a seeded random number generator. The entry paces,
//! schedules and queues exactly as in production; the exit checks and reorders-counts
//! what arrives. Nothing here sleeps or reads a clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use etherparse::PacketBuilder;

use crate::core::engine::*;
use crate::core::lane::{Colour, LaneId, LaneSample};
use crate::core::pacing_table::{AppIdx, PacingTable};
use crate::core::packet::tests::tcp_syn_v4;
use crate::core::reseq::ReseqCounters;
use crate::core::sched::Algorithm;
use crate::core::sched::sim::Rng;
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, DatagramHeader, is_probe, write_datagram_header};

// ---- one engine ---------------------------------------------------------------

pub(super) const MS: u64 = 1_000_000;

pub(super) fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * MS)
}

pub(super) fn config(role: Role, algorithm: Algorithm) -> EngineConfig {
    builder(role, algorithm).build()
}

/// A builder of [`config`]'s engine, for tests that set more.
pub(super) fn builder(role: Role, algorithm: Algorithm) -> EngineConfigBuilder {
    EngineConfig::builder()
        .role(role)
        .sites(vec![
            SiteSpec {
                id: "a".into(),
                prefixes: vec!["198.18.0.0/24".parse().expect("net")],
            },
            SiteSpec {
                id: "b".into(),
                prefixes: vec!["fd00::/64".parse().expect("net")],
            },
        ])
        .tun_mtu(1400)
        .algorithm(algorithm)
        .max_flows(100)
        .warm_up_lanes(false)
}

pub(super) fn engine(role: Role, algorithm: Algorithm) -> DataPath {
    DataPath::new(config(role, algorithm))
}

pub(super) fn exit_engine() -> DataPath {
    engine(Role::Exit, Algorithm::RoundRobin)
}

pub(super) fn sample(max_datagram: usize, rx_datagrams: u64) -> LaneSample {
    LaneSample {
        srtt: Duration::from_millis(20),
        cwnd: 100_000,
        max_datagram,
        rx_datagrams,
        ..LaneSample::default()
    }
}

/// A sample of a lane that has heard `rx_datagrams` and transmitted every packet
/// it was handed.
pub(super) fn drained(e: &DataPath, lane: LaneId, rx_datagrams: u64) -> LaneSample {
    let l = e.lanes[lane.0 as usize].as_ref().expect("lane");
    LaneSample {
        transmitted_datagrams: l.handed_datagrams,
        dequeued_bytes: l.handed_bytes,
        ..sample(1400, rx_datagrams)
    }
}

/// Brings up a blue lane of `site` over `uplink` at `now`, sampled as live.
pub(super) fn lane_up(
    e: &mut DataPath,
    site: &str,
    uplink: &str,
    max_datagram: usize,
    now: Instant,
) -> LaneId {
    coloured_lane_up(e, site, uplink, Colour::Blue, max_datagram, now)
}

/// An entry with two blue lanes of site a, over "dsl" and "lte", up at time zero.
pub(super) fn two_lanes(algorithm: Algorithm) -> (DataPath, LaneId, LaneId) {
    let mut e = engine(Role::Entry, algorithm);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    (e, a, b)
}

/// Brings up a lane of `site` over `uplink` in `colour` at `now`, sampled as live.
pub(super) fn coloured_lane_up(
    e: &mut DataPath,
    site: &str,
    uplink: &str,
    colour: Colour,
    max_datagram: usize,
    now: Instant,
) -> LaneId {
    let up = LaneUp {
        site,
        uplink,
        colour,
        rank: 0,
        policy: UplinkPolicy::default(),
        rate_kbps: None,
    };
    let id = e.handle_lane_up(up, now).expect("known site");
    e.handle_lane_sample(id, sample(max_datagram, 1), now);
    id
}

/// A lane over a fresh uplink, at time zero.
pub(super) fn up(e: &mut DataPath, site: &str, max_datagram: usize) -> LaneId {
    let uplink = format!("up{}", e.lanes.len());
    lane_up(e, site, &uplink, max_datagram, Instant::ZERO)
}

/// True if the engine wants any lane sampled at `now`: tests that sample every lane
/// then.
pub(super) fn wants_samples(e: &mut DataPath, now: Instant) -> bool {
    let mut due = Vec::new();
    e.lanes_to_sample(now, &mut due);
    !due.is_empty()
}

/// Hands `packet` in as read from the TUN device.
pub(super) fn send(e: &mut DataPath, packet: &[u8], now: Instant) {
    let mut datagram = BytesMut::zeroed(DATAGRAM_HEADER_LEN);
    datagram.extend_from_slice(packet);
    e.handle_tun_packet(datagram, now);
}

pub(super) fn transmits(e: &mut DataPath) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit()).collect()
}

/// Sends `packet` and returns the lane it went out on. Datagrams already waiting
/// to go (sent again from a lane given up) are let go first.
pub(super) fn sent_on(e: &mut DataPath, packet: &[u8], now: Instant) -> Option<LaneId> {
    transmits(e);
    send(e, packet, now);
    let out = transmits(e);
    assert!(out.len() <= 1, "{out:?}");
    out.first().map(|t| t.lane)
}

/// A TCP SYN with DF set from the server side towards site a's host.
pub(super) fn to_site_a() -> Vec<u8> {
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

/// `packet` behind a datagram header carrying `seq` and no flow gap.
pub(super) fn datagram(seq: u32, packet: &[u8]) -> Bytes {
    striped_datagram(seq, 0, packet)
}

/// `packet` behind a datagram header carrying `seq` and `gap`.
pub(super) fn striped_datagram(seq: u32, gap: u16, packet: &[u8]) -> Bytes {
    let mut d = vec![0; DATAGRAM_HEADER_LEN];
    write_datagram_header(
        &mut d,
        DatagramHeader {
            seq,
            gap,
            copy: false,
            lane_seq: 0,
        },
    );
    d.extend_from_slice(packet);
    Bytes::from(d)
}

/// `packet` behind a datagram header carrying `seq`, no flow gap and `lane_seq`.
pub(super) fn laned_datagram(seq: u32, lane_seq: u16, packet: &[u8]) -> Bytes {
    let mut d = vec![0; DATAGRAM_HEADER_LEN];
    let header = DatagramHeader {
        seq,
        gap: 0,
        copy: false,
        lane_seq,
    };
    write_datagram_header(&mut d, header);
    d.extend_from_slice(packet);
    Bytes::from(d)
}

/// An IPv4 `packet` with its DSCP set to `dscp`.
pub(super) fn with_dscp(mut packet: Vec<u8>, dscp: u8) -> Vec<u8> {
    let mut header = etherparse::Ipv4Header::from_slice(&packet).expect("v4").0;
    header.dscp = etherparse::IpDscp::try_new(dscp).expect("a DSCP");
    header.header_checksum = header.calc_header_checksum();
    header.write(&mut &mut packet[..20]).expect("write");
    packet
}

// ---- two engines: the whole path -----------------------------------------------

pub(super) const PAYLOAD: usize = 1172; // 1200-byte IPv4/UDP packets

/// One direction of an uplink: braid's datagrams queue behind each other at the rate.
struct SimLane {
    rate_bps: u64,
    one_way: Duration,
    /// Each datagram is held up to this much longer, uniformly at random, but never
    /// arrives before the one sent before it (a radio link's retransmissions, a
    /// modem's varying queue).
    jitter: Duration,
    /// When the last datagram sent arrives.
    last_arrival: Instant,
    /// Per mille of datagrams lost.
    loss: u64,
    /// When the peer is last heard (keep-alives stop then): `None` for never.
    silent_from: Option<Instant>,
    entry_id: LaneId,
    exit_id: LaneId,
    /// When the link is free again.
    free_at: Instant,
    /// When the exit's acknowledgements of delivered datagrams reach the entry, in
    /// order; how many have, and how many of the exit's keep-alives were counted.
    acks: VecDeque<Instant>,
    acks_heard: u64,
    keep_alives: u64,
    /// (departure, bytes) of datagrams not yet on the wire, oldest first.
    queued: VecDeque<(Instant, u64)>,
    dequeued_bytes: u64,
    sent_packets: u64,
    sent_bytes: u64,
}

impl SimLane {
    /// What the entry's shell would read at `now`: it hears the exit's
    /// acknowledgements, sent the peer's ACK delay after each datagram arrived, and
    /// its keep-alives, each lost like a datagram.
    fn entry_sample(&mut self, now: Instant, rng: &mut Rng) -> LaneSample {
        while self.acks.front().is_some_and(|&at| at <= now) {
            self.acks.pop_front();
            self.acks_heard += 1;
        }
        // Keep-alives sent up to one one-way delay ago, from the first at 100 ms.
        let sent_by = now.saturating_since(Instant::ZERO + self.one_way);
        let sent = (sent_by.as_nanos() / KEEP_ALIVE.as_nanos()) as u64;
        while self.keep_alives < sent {
            self.keep_alives += 1;
            let sent_at = Instant::ZERO + KEEP_ALIVE * self.keep_alives as u32;
            let dead = self.silent_from.is_some_and(|s| sent_at >= s);
            if !dead && rng.next(1000) >= self.loss {
                self.acks_heard += 1;
            }
        }
        let heard = self.acks_heard;
        LaneSample {
            rx_datagrams: heard,
            ..self.sample(now)
        }
    }

    /// Acknowledges a datagram that reached the exit at `now`, unless the
    /// acknowledgement is lost or the path is dead.
    fn acknowledge(&mut self, now: Instant, rng: &mut Rng) {
        let sent_at = now + PEER_ACK_DELAY;
        let dead = self.silent_from.is_some_and(|s| sent_at >= s);
        if !dead && rng.next(1000) >= self.loss {
            self.acks.push_back(sent_at + self.one_way);
        }
    }

    /// What the shell would read from quinn and the send task at `now`; the exit
    /// hears the entry every 10 ms until the path falls silent.
    fn sample(&mut self, now: Instant) -> LaneSample {
        while let Some(&(departs, len)) = self.queued.front() {
            if departs > now {
                break;
            }
            self.queued.pop_front();
            self.dequeued_bytes += len;
            self.sent_packets += 1;
            self.sent_bytes += len;
        }
        let heard_until = self.silent_from.map_or(now, |s| s.min(now));
        // The queue is braid's (the lane's fill), not the network's: QUIC's RTT does
        // not see it. A varying delay does, at its mean.
        let srtt = self.one_way * 2 + self.jitter / 2;
        LaneSample {
            srtt,
            // What the path holds in a round trip, as a congestion controller finds.
            cwnd: (self.rate_bps / 8 * srtt.as_micros() as u64 / 1_000_000).max(12_000),
            max_datagram: 1400,
            closed: false,
            // A keep-alive or acknowledgement every 10 ms while the peer is heard.
            rx_datagrams: heard_until.as_nanos() / 10_000_000,
            lost_packets: 0,
            quinn_queued_bytes: 0,
            dequeued_bytes: self.dequeued_bytes,
            sent_packets: self.sent_packets,
            sent_bytes: self.sent_bytes,
            transmitted_datagrams: self.sent_packets,
            sent_pings: 0,
            refused_datagrams: 0,
            abandoned_datagrams: 0,
            delay_variation: self.jitter,
            // As if declared: neither end learned anything to report.
            learned_variation: Duration::ZERO,
            quic_sent_packets: self.sent_packets,
            wire_bytes: self.sent_bytes,
        }
    }
}

struct SimFlow {
    src_port: u16,
    dst_port: u16,
    interval: Duration,
    next_send: Instant,
    /// Packets left in the current burst; between bursts the flow pauses.
    burst_left: u32,
}

/// A lane's rate (bit/s), one-way delay (ms) and how much more it may be (ms,
/// uniformly at random, order kept), loss (per mille) and when it falls silent: its
/// path dies both ways.
pub struct LaneSpec {
    pub rate_bps: u64,
    pub one_way_ms: u64,
    pub jitter_ms: u64,
    pub loss_per_mille: u64,
    pub silent_from: Option<Instant>,
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Per lane: (datagrams sent, bytes sent, scheduler decisions of each kind).
    pub lanes: Vec<(u64, u64, [u64; 5])>,
    /// Packets the exit wrote to its TUN device, and how many arrived reordered.
    pub delivered: u64,
    pub reordered: u64,
    /// Bytes each paced application sent, over the run.
    pub paced_bytes: Vec<u64>,
    /// The last instant each lane was handed a datagram other than a probe or a
    /// keep-alive.
    pub last_sent: Vec<Instant>,
    pub dropped: u64,
    /// Datagrams lost on the lanes (a silent lane's path is dead both ways).
    pub lost: u64,
    /// Datagrams the entry sent again when it gave a lane up, and when the exit
    /// reported them lost.
    pub resent: u64,
    pub repaired: u64,
    /// Times the entry gave a lane up, and the probes it sent.
    pub stalls: u64,
    /// Per lane, when the entry last gave it up, if it is out of service at the end.
    pub out_since: Vec<Option<Instant>>,
    pub probes: u64,
    /// What the exit's resequencer did.
    pub reseq: ReseqCounters,
}

/// The pacing table of the runs: two applications on their own server ports.
const TABLE: &str = r#"{"version": 1, "apps": [
    {"name": "video", "match": {"proto": "udp", "remote_ports": "7001"}, "rate_up_kbps": 4000},
    {"name": "backup", "match": {"proto": "udp", "remote_ports": "7002"}, "rate_up_kbps": 1500}]}"#;
/// The paced applications' rates in bit/s, as in [`TABLE`].
pub const PACED_BPS: [u64; 2] = [4_000_000, 1_500_000];

/// The unpaced traffic of a run: `flows` flows of `flow_bps` each, sending in bursts
/// of 1 to 64 packets with pauses of up to 20 ms (`bursty`) or evenly.
pub struct Bulk {
    pub flows: usize,
    pub flow_bps: u64,
    pub bursty: bool,
}

/// Runs `bulk`, plus one flow per paced application offering 125 % of its rate, over
/// `lanes`, for `seconds` of virtual time, scheduled by AFMT.
pub fn run(lanes: &[LaneSpec], bulk: Bulk, seconds: u64, seed: u64) -> Outcome {
    run_with(Algorithm::Afmt, true, lanes, bulk, seconds, seed)
}

/// An entry and an exit engine joined by simulated lanes, after quinn-proto's `Pair`:
/// it finds the next event, and carries what each engine sends to the other.
pub struct Pair {
    pub entry: DataPath,
    pub exit: DataPath,
    lanes: Vec<SimLane>,
    rng: Rng,
    /// (arrival, order, lane, datagram) in flight to the exit.
    in_flight: BinaryHeap<Reverse<(Instant, u64, usize, Bytes)>>,
    /// The same back to the entry: the exit's loss reports, too few to queue.
    in_flight_back: BinaryHeap<Reverse<(Instant, u64, usize, Bytes)>>,
    order: u64,
    last_sent: Vec<Instant>,
    delivered: u64,
    lost: u64,
}

impl Pair {
    /// Engines scheduling by `algorithm`, the entry pacing by [`TABLE`], joined by
    /// `lanes`, all up at time zero; `seed` seeds the random number generator.
    pub fn new(algorithm: Algorithm, lanes: &[LaneSpec], seed: u64) -> Pair {
        let rng = Rng(seed | 1);
        let mut entry = DataPath::new(config(Role::Entry, algorithm));
        let mut exit = DataPath::new(config(Role::Exit, algorithm));
        let table = PacingTable::parse(TABLE.as_bytes()).expect("valid table");
        entry.handle_pacing_table(SiteIdx(0), table, Instant::ZERO);
        let sim_lanes: Vec<SimLane> = lanes
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let uplink = format!("up{i}");
                let up = LaneUp {
                    site: "a",
                    uplink: &uplink,
                    colour: Colour::Blue,
                    rank: i as u32,
                    policy: UplinkPolicy::default(),
                    rate_kbps: Some(spec.rate_bps / 1000),
                };
                SimLane {
                    rate_bps: spec.rate_bps,
                    one_way: Duration::from_millis(spec.one_way_ms),
                    jitter: Duration::from_millis(spec.jitter_ms),
                    last_arrival: Instant::ZERO,
                    loss: spec.loss_per_mille,
                    silent_from: spec.silent_from,
                    entry_id: entry
                        .handle_lane_up(up.clone(), Instant::ZERO)
                        .expect("site"),
                    exit_id: exit.handle_lane_up(up, Instant::ZERO).expect("site"),
                    free_at: Instant::ZERO,
                    acks: VecDeque::new(),
                    acks_heard: 0,
                    keep_alives: 0,
                    queued: VecDeque::new(),
                    dequeued_bytes: 0,
                    sent_packets: 0,
                    sent_bytes: 0,
                }
            })
            .collect();
        Pair {
            entry,
            exit,
            last_sent: vec![Instant::ZERO; sim_lanes.len()],
            lanes: sim_lanes,
            rng,
            in_flight: BinaryHeap::new(),
            in_flight_back: BinaryHeap::new(),
            order: 0,
            delivered: 0,
            lost: 0,
        }
    }

    /// The next instant something happens: `also` (what the caller waits for), a
    /// datagram's arrival or an engine's timeout.
    pub fn next_event(&self, also: Option<Instant>) -> Option<Instant> {
        let next_arrival = self.in_flight.peek().map(|Reverse((t, ..))| *t);
        let next_back = self.in_flight_back.peek().map(|Reverse((t, ..))| *t);
        [
            also,
            next_arrival,
            next_back,
            self.entry.poll_timeout(),
            self.exit.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Samples the lanes of each engine that wants it.
    pub fn sample(&mut self, now: Instant) {
        let mut due = Vec::new();
        self.entry.lanes_to_sample(now, &mut due);
        for l in self.lanes.iter_mut().filter(|l| due.contains(&l.entry_id)) {
            let sample = l.entry_sample(now, &mut self.rng);
            self.entry.handle_lane_sample(l.entry_id, sample, now);
        }
        // The exit sends only loss reports back, but it measures the same round trips.
        self.exit.lanes_to_sample(now, &mut due);
        for l in self.lanes.iter_mut().filter(|l| due.contains(&l.exit_id)) {
            let sample = l.sample(now);
            self.exit.handle_lane_sample(l.exit_id, sample, now);
        }
    }

    /// Hands each engine the datagrams that arrived by `now`, then its timeout.
    pub fn deliver(&mut self, now: Instant) {
        while let Some(Reverse((arrival, ..))) = self.in_flight.peek() {
            if *arrival > now {
                break;
            }
            let Some(Reverse((_, _, lane, datagram))) = self.in_flight.pop() else {
                break;
            };
            self.lanes[lane].acknowledge(now, &mut self.rng);
            let exit_id = self.lanes[lane].exit_id;
            self.exit.handle_lane_datagram(exit_id, datagram, now);
        }
        while let Some(Reverse((arrival, ..))) = self.in_flight_back.peek() {
            if *arrival > now {
                break;
            }
            let Some(Reverse((_, _, lane, datagram))) = self.in_flight_back.pop() else {
                break;
            };
            let entry_id = self.lanes[lane].entry_id;
            self.entry.handle_lane_datagram(entry_id, datagram, now);
        }
        self.entry.handle_timeout(now);
        self.exit.handle_timeout(now);
    }

    /// Puts what the engines sent on the lanes, each datagram behind the last one
    /// sent (the entry's) or at once (the exit's loss reports), lost as the lane
    /// loses them; counts what the exit wrote to its TUN device.
    pub fn transmit(&mut self, now: Instant) {
        while let Some(t) = self.exit.poll_transmit() {
            let lane = self.lane_index(t.lane, true);
            let l = &self.lanes[lane];
            let dead = l.silent_from.is_some_and(|s| now >= s);
            if !dead && self.rng.next(1000) >= l.loss {
                self.order += 1;
                let arrival = now + l.one_way;
                self.in_flight_back
                    .push(Reverse((arrival, self.order, lane, t.datagram)));
            }
        }
        while let Some(t) = self.entry.poll_transmit() {
            let lane = self.lane_index(t.lane, false);
            let l = &mut self.lanes[lane];
            let len = t.datagram.len() as u64;
            let departs =
                l.free_at.max(now) + Duration::from_nanos(len * 8 * 1_000_000_000 / l.rate_bps);
            l.free_at = departs;
            l.queued.push_back((departs, len));
            if !is_probe(&t.datagram) {
                self.last_sent[lane] = now;
            }
            let dead = l.silent_from.is_some_and(|s| departs >= s);
            if !dead && self.rng.next(1000) >= l.loss {
                self.order += 1;
                let extra = if l.jitter.is_zero() {
                    Duration::ZERO
                } else {
                    Duration::from_nanos(self.rng.next(l.jitter.as_nanos() as u64 + 1))
                };
                l.last_arrival = l.last_arrival.max(departs + l.one_way + extra);
                let arrival = l.last_arrival;
                self.in_flight
                    .push(Reverse((arrival, self.order, lane, t.datagram)));
            } else {
                self.lost += 1;
            }
        }
        self.delivered += std::iter::from_fn(|| self.exit.poll_tun_write()).count() as u64;
    }

    /// The index of the simulated lane whose exit's (or entry's) id is `id`.
    fn lane_index(&self, id: LaneId, at_exit: bool) -> usize {
        self.lanes
            .iter()
            .position(|l| id == if at_exit { l.exit_id } else { l.entry_id })
            .expect("a simulated lane")
    }

    /// What the run did, as the engines count it.
    pub fn outcome(&self) -> Outcome {
        let (entry, exit) = (&self.entry, &self.exit);
        let site = SiteIdx(0);
        Outcome {
            lanes: self
                .lanes
                .iter()
                .map(|l| {
                    let c = entry.lane(l.entry_id).expect("lane").counters;
                    (l.sent_packets, l.sent_bytes, c.decisions)
                })
                .collect(),
            delivered: self.delivered,
            reordered: exit.reordered(site),
            paced_bytes: (1..=PACED_BPS.len())
                .map(|i| entry.app_counters(site, AppIdx(i as u32)).paced_bytes)
                .collect(),
            last_sent: self.last_sent.clone(),
            dropped: DropReason::ALL.iter().map(|r| entry.dropped(*r)).sum(),
            lost: self.lost,
            resent: self.lane_counts(|c| c.resent),
            repaired: self.lane_counts(|c| c.loss_repaired),
            stalls: self.lane_counts(|c| c.stalls),
            out_since: self
                .lanes
                .iter()
                .map(|l| {
                    let lane = entry.lane(l.entry_id).expect("lane");
                    (!lane.view.up).then_some(lane.state_since)
                })
                .collect(),
            probes: self.lane_counts(|c| c.probes_sent),
            reseq: *exit.reseq_counters(site),
        }
    }

    /// A count of the entry's lanes, summed.
    fn lane_counts(&self, count: impl Fn(&LaneCounters) -> u64) -> u64 {
        self.lanes
            .iter()
            .map(|l| count(self.entry.lane(l.entry_id).expect("lane").counters))
            .sum()
    }
}

/// Runs `bulk`, plus, when `paced`, one flow per paced application offering 125 % of
/// its rate, over `lanes`, for `seconds` of virtual time, scheduled by `algorithm`.
pub fn run_with(
    algorithm: Algorithm,
    paced: bool,
    lanes: &[LaneSpec],
    bulk: Bulk,
    seconds: u64,
    seed: u64,
) -> Outcome {
    let mut pair = Pair::new(algorithm, lanes, seed);
    let packet_bits = ((PAYLOAD + 28) * 8) as u64;
    let mut flows: Vec<SimFlow> = (0..bulk.flows)
        .map(|i| (40_000 + i as u16, 5001, bulk.flow_bps))
        .chain(
            PACED_BPS
                .iter()
                .enumerate()
                .filter(|_| paced)
                .map(|(i, bps)| (30_000 + i as u16, 7001 + i as u16, bps * 5 / 4)),
        )
        .map(|(src_port, dst_port, bps)| SimFlow {
            src_port,
            dst_port,
            interval: Duration::from_nanos(packet_bits * 1_000_000_000 / bps),
            next_send: Instant::from_nanos(pair.rng.next(10_000_000)),
            burst_left: 0,
        })
        .collect();
    let payload = [0u8; PAYLOAD];
    let end = at(seconds * 1000);
    loop {
        let next_flow = flows.iter().map(|f| f.next_send).min();
        let now = pair.next_event(next_flow).unwrap_or(end);
        if now >= end {
            break;
        }
        pair.sample(now);
        for f in flows.iter_mut().filter(|f| f.next_send <= now) {
            let mut packet = Vec::with_capacity(PAYLOAD + 28);
            PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64)
                .udp(f.src_port, f.dst_port)
                .write(&mut packet, &payload)
                .expect("packet");
            send(&mut pair.entry, &packet, now);
            // Bulk flows send in bursts of 1-64 packets with pauses of up to 20 ms;
            // paced applications send evenly.
            f.next_send = now + f.interval;
            if f.dst_port == 5001 && bulk.bursty {
                if f.burst_left == 0 {
                    f.burst_left = 1 + pair.rng.next(64) as u32;
                    f.next_send = f.next_send + Duration::from_micros(pair.rng.next(20_000));
                }
                f.burst_left -= 1;
            }
        }
        pair.deliver(now);
        pair.transmit(now);
    }
    pair.outcome()
}
