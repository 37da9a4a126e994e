//! A whole-path simulator: an entry [`DataPath`] and an exit [`DataPath`] joined by
//! virtual lanes (rate, one-way delay that may vary, loss), with many flows, a virtual clock that
//! jumps to the next event and a seeded random number generator. The entry paces,
//! schedules and queues exactly as in production; the exit checks and reorders-counts
//! what arrives. Nothing here sleeps or reads a clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use etherparse::PacketBuilder;

use super::engine::tests::{at, config, send};
use super::engine::{DataPath, KEEP_ALIVE, LaneUp, PEER_ACK_DELAY, Role};
use super::lane::{Colour, LaneId, LaneSample};
use super::pacing_table::{AppIdx, PacingTable};
use super::reseq::ReseqCounters;
use super::sched::Algorithm;
use super::sched::sim::Rng;
use super::stats::DELAY_BUCKETS;
use super::time::Instant;

const PAYLOAD: usize = 1172; // 1200-byte IPv4/UDP packets

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
    /// The last instant each lane was handed a datagram.
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
    let mut rng = Rng(seed | 1);
    let mut entry = DataPath::new(config(Role::Entry, algorithm));
    let mut exit = DataPath::new(config(Role::Exit, algorithm));
    let table = PacingTable::parse(TABLE.as_bytes()).expect("valid table");
    entry.handle_pacing_table(super::engine::SiteIdx(0), table, Instant::ZERO);
    let mut sim_lanes: Vec<SimLane> = lanes
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let uplink = format!("up{i}");
            let up = LaneUp {
                site: "a",
                uplink: &uplink,
                colour: Colour::Blue,
                rank: i as u32,
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
            next_send: Instant::from_nanos(rng.next(10_000_000)),
            burst_left: 0,
        })
        .collect();
    let payload = [0u8; PAYLOAD];
    // (arrival, order, lane, datagram) in flight to the exit.
    let mut in_flight: BinaryHeap<Reverse<(Instant, u64, usize, Bytes)>> = BinaryHeap::new();
    // The same back to the entry: the exit's loss reports, too few to queue.
    let mut in_flight_back: BinaryHeap<Reverse<(Instant, u64, usize, Bytes)>> = BinaryHeap::new();
    let mut order = 0u64;
    let mut last_sent = vec![Instant::ZERO; sim_lanes.len()];
    let mut delivered = 0;
    let mut lost = 0;
    let end = at(seconds * 1000);
    loop {
        let next_flow = flows.iter().map(|f| f.next_send).min();
        let next_arrival = in_flight.peek().map(|Reverse((t, ..))| *t);
        let next_back = in_flight_back.peek().map(|Reverse((t, ..))| *t);
        let now = [
            next_flow,
            next_arrival,
            next_back,
            entry.poll_timeout(),
            exit.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(end);
        if now >= end {
            break;
        }
        if entry.wants_lane_samples(now) {
            for l in &mut sim_lanes {
                let sample = l.entry_sample(now, &mut rng);
                entry.handle_lane_sample(l.entry_id, sample, now);
            }
        }
        // The exit sends only loss reports back, but it measures the same round trips.
        if exit.wants_lane_samples(now) {
            for l in &mut sim_lanes {
                let sample = l.sample(now);
                exit.handle_lane_sample(l.exit_id, sample, now);
            }
        }
        for f in flows.iter_mut().filter(|f| f.next_send <= now) {
            let mut packet = Vec::with_capacity(PAYLOAD + 28);
            PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64)
                .udp(f.src_port, f.dst_port)
                .write(&mut packet, &payload)
                .expect("packet");
            send(&mut entry, &packet, now);
            // Bulk flows send in bursts of 1-64 packets with pauses of up to 20 ms;
            // paced applications send evenly.
            f.next_send = now + f.interval;
            if f.dst_port == 5001 && bulk.bursty {
                if f.burst_left == 0 {
                    f.burst_left = 1 + rng.next(64) as u32;
                    f.next_send = f.next_send + Duration::from_micros(rng.next(20_000));
                }
                f.burst_left -= 1;
            }
        }
        while let Some(Reverse((arrival, ..))) = in_flight.peek() {
            if *arrival > now {
                break;
            }
            let Some(Reverse((_, _, lane, datagram))) = in_flight.pop() else {
                break;
            };
            sim_lanes[lane].acknowledge(now, &mut rng);
            exit.handle_lane_datagram(sim_lanes[lane].exit_id, datagram, now);
        }
        while let Some(Reverse((arrival, ..))) = in_flight_back.peek() {
            if *arrival > now {
                break;
            }
            let Some(Reverse((_, _, lane, datagram))) = in_flight_back.pop() else {
                break;
            };
            entry.handle_lane_datagram(sim_lanes[lane].entry_id, datagram, now);
        }
        entry.handle_timeout(now);
        exit.handle_timeout(now);
        while let Some(t) = exit.poll_transmit() {
            let lane = sim_lanes
                .iter()
                .position(|l| l.exit_id == t.lane)
                .expect("a simulated lane");
            let l = &sim_lanes[lane];
            let dead = l.silent_from.is_some_and(|s| now >= s);
            if !dead && rng.next(1000) >= l.loss {
                order += 1;
                in_flight_back.push(Reverse((now + l.one_way, order, lane, t.datagram)));
            }
        }
        while let Some(t) = entry.poll_transmit() {
            let lane = sim_lanes
                .iter()
                .position(|l| l.entry_id == t.lane)
                .expect("a simulated lane");
            let l = &mut sim_lanes[lane];
            let len = t.datagram.len() as u64;
            let departs =
                l.free_at.max(now) + Duration::from_nanos(len * 8 * 1_000_000_000 / l.rate_bps);
            l.free_at = departs;
            l.queued.push_back((departs, len));
            last_sent[lane] = now;
            let dead = l.silent_from.is_some_and(|s| departs >= s);
            if !dead && rng.next(1000) >= l.loss {
                order += 1;
                let extra = if l.jitter.is_zero() {
                    Duration::ZERO
                } else {
                    Duration::from_nanos(rng.next(l.jitter.as_nanos() as u64 + 1))
                };
                l.last_arrival = l.last_arrival.max(departs + l.one_way + extra);
                in_flight.push(Reverse((l.last_arrival, order, lane, t.datagram)));
            } else {
                lost += 1;
            }
        }
        delivered += std::iter::from_fn(|| exit.poll_tun_write()).count() as u64;
    }
    let site = super::engine::SiteIdx(0);
    Outcome {
        lanes: sim_lanes
            .iter()
            .map(|l| {
                let c = entry.lane(l.entry_id).expect("lane").counters;
                (l.sent_packets, l.sent_bytes, c.decisions)
            })
            .collect(),
        delivered,
        reordered: exit.reordered(site),
        paced_bytes: (1..=PACED_BPS.len())
            .map(|i| entry.app_counters(site, AppIdx(i as u32)).paced_bytes)
            .collect(),
        last_sent,
        dropped: super::stats::DropReason::ALL
            .iter()
            .map(|r| entry.dropped(*r))
            .sum(),
        lost,
        resent: sim_lanes
            .iter()
            .map(|l| entry.lane(l.entry_id).expect("lane").counters.resent)
            .sum(),
        repaired: sim_lanes
            .iter()
            .map(|l| entry.lane(l.entry_id).expect("lane").counters.loss_repaired)
            .sum(),
        stalls: sim_lanes
            .iter()
            .map(|l| entry.lane(l.entry_id).expect("lane").counters.stalls)
            .sum(),
        out_since: sim_lanes
            .iter()
            .map(|l| {
                let lane = entry.lane(l.entry_id).expect("lane");
                (!lane.view.up).then_some(lane.state_since)
            })
            .collect(),
        probes: sim_lanes
            .iter()
            .map(|l| entry.lane(l.entry_id).expect("lane").counters.probes_sent)
            .sum(),
        reseq: *exit.reseq_counters(site),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::engine::{LANE_STALL, SAMPLE_INTERVAL};

    /// Three uplinks like the demo's (16, 32, 50 Mbit/s; 10, 20, 30 ms; 0.5 % loss
    /// on the fastest), the slowest falling silent at 6 s.
    fn lanes() -> Vec<LaneSpec> {
        vec![
            LaneSpec {
                rate_bps: 16_000_000,
                one_way_ms: 10,
                jitter_ms: 0,
                loss_per_mille: 0,
                silent_from: Some(at(6_000)),
            },
            LaneSpec {
                rate_bps: 32_000_000,
                one_way_ms: 20,
                jitter_ms: 0,
                loss_per_mille: 0,
                silent_from: None,
            },
            LaneSpec {
                rate_bps: 50_000_000,
                one_way_ms: 30,
                jitter_ms: 0,
                loss_per_mille: 5,
                silent_from: None,
            },
        ]
    }

    /// A lane that never falls silent: Mbit/s, one-way delay and its variation (ms),
    /// loss (per mille).
    fn lane(mbit: u64, one_way_ms: u64, jitter_ms: u64, loss_per_mille: u64) -> LaneSpec {
        LaneSpec {
            rate_bps: mbit * 1_000_000,
            one_way_ms,
            jitter_ms,
            loss_per_mille,
            silent_from: None,
        }
    }

    /// One flow sending evenly at `bps`.
    fn one_even_flow(bps: u64) -> Bulk {
        Bulk {
            flows: 1,
            flow_bps: bps,
            bursty: false,
        }
    }

    /// Packets the exit's resequencer held longer than `bound` seconds, one of
    /// [`DELAY_BUCKETS`]' bounds.
    fn holds_beyond(out: &Outcome, bound: f64) -> u64 {
        let first = DELAY_BUCKETS
            .iter()
            .position(|&b| b > bound)
            .expect("a bucket beyond the bound");
        out.reseq.hold.buckets[first..].iter().sum()
    }

    #[test]
    fn the_whole_path_keeps_flows_in_order_paces_applications_and_drops_silent_lanes() {
        let seconds = 10;
        // 24 bulk flows of 2 Mbit/s (bursty, so their average is lower) and two paced
        // applications offered 125 % of their rates: about half of the 98 Mbit/s.
        let bulk = Bulk {
            flows: 24,
            flow_bps: 2_000_000,
            bursty: true,
        };
        let out = run(&lanes(), bulk, seconds, 7);
        // AFMT reordered no flow; only the packets the silent lane's dead path lost,
        // sent again when it was given up, came after packets sent later.
        assert!(out.resent > 0, "{out:?}");
        assert!(out.reordered <= out.resent, "{out:?}");
        for (sent, rate) in out.paced_bytes.iter().zip(PACED_BPS) {
            let measured = *sent as f64 * 8.0 / seconds as f64;
            let error = (measured - rate as f64).abs() / rate as f64;
            assert!(
                error < 0.01,
                "paced at {measured} bit/s for {rate}: {out:?}"
            );
        }
        // Every lane carried traffic; the silent one none from its stall time on.
        assert!(out.lanes.iter().all(|l| l.0 > 1000), "{out:?}");
        let silent_from = at(6_000);
        assert!(
            out.last_sent[0] >= silent_from - Duration::from_millis(100),
            "{out:?}"
        );
        // Silence is noticed at the first sample after the last keep-alive (samples
        // come at most every millisecond while packets flow).
        let stalled_by = silent_from + LANE_STALL + SAMPLE_INTERVAL * 2;
        assert!(out.last_sent[0] < stalled_by, "{out:?}");
        assert!(out.last_sent[1] > at(9_900) && out.last_sent[2] > at(9_900));
        assert!(out.delivered > 50_000, "{out:?}");
        // What was dropped is what the paced applications offered above their rates,
        // less what their queues (100 ms at the rate, at least 16 KiB: 55 packets)
        // still hold at the end.
        let offered_above: u64 = PACED_BPS
            .iter()
            .map(|bps| bps / 4 * seconds / 8 / (PAYLOAD as u64 + 28))
            .sum();
        assert!(out.dropped.abs_diff(offered_above - 55) < 10, "{out:?}");
    }

    #[test]
    fn one_flow_larger_than_any_lane_is_striped_over_all_and_arrives_in_order() {
        // 16, 32 and 50 Mbit/s with one-way delays of 10, 30 and 60 ms, 0.5 % loss on
        // the fastest; one even 80 Mbit/s flow.
        let lanes = [lane(16, 10, 0, 0), lane(32, 30, 0, 0), lane(50, 60, 0, 5)];
        let seconds = 10;
        let out = run(&lanes, one_even_flow(80_000_000), seconds, 3);
        // Every lane carries its part: the flow is striped, not confined to a lane.
        let bytes: Vec<u64> = out.lanes.iter().map(|l| l.1).collect();
        let total: u64 = bytes.iter().sum();
        for (b, mbit) in bytes.iter().zip([16, 32, 50]) {
            let share = *b as f64 / total as f64;
            assert!(share > mbit as f64 / 98.0 / 2.0, "{bytes:?}: {out:?}");
        }
        let striped: u64 = out.lanes.iter().map(|l| l.2[3]).sum();
        assert!(striped > out.delivered / 2, "{out:?}");
        // In order as the inner flow sees it, whatever the delays.
        assert!(out.reseq.held > 1000, "{out:?}");
        assert!(
            (out.reordered as f64) < out.delivered as f64 * 0.001,
            "{out:?}"
        );
        // braid dropped nothing of the flow: its only drops are what the paced
        // applications offered above their rates (as in the test above).
        let offered_above: u64 = PACED_BPS
            .iter()
            .map(|bps| bps / 4 * seconds / 8 / (PAYLOAD as u64 + 28))
            .sum();
        assert!(out.dropped.abs_diff(offered_above - 55) < 10, "{out:?}");
        // A lost datagram costs one deadline at most, never a stall: no hold comes
        // near a second, and few packets waited for a loss at all.
        assert_eq!(holds_beyond(&out, 0.2), 0, "{out:?}");
        assert!(out.lost > 100, "{out:?}");
        // The exit reports what the lossy lane lost, and the entry sends it again
        // over the lane where it arrives first, mostly before the exit stops waiting
        // for it: without that, each loss gave up about two gaps (420 packets
        // released at the deadline for 214 lost); now under half a gap does (98 for
        // 220).
        assert!(out.repaired > out.lost * 3 / 4, "{out:?}");
        assert!(
            out.reseq.released_at_deadline * 2 < out.lost,
            "lost packets were sent again in time: {out:?}"
        );
    }

    #[test]
    fn a_striped_flow_over_a_lane_whose_delay_varies_arrives_in_order_without_stalls() {
        // The testbed's `vary10` uplinks: 16, 32 and 50 Mbit/s, 10, 20 and 30 ms one
        // way, the fastest one's delay varying by +-10 ms per datagram (order kept);
        // one even 80 Mbit/s flow.
        let lanes = [lane(16, 10, 0, 0), lane(32, 20, 0, 0), lane(50, 20, 20, 0)];
        let out = run(&lanes, one_even_flow(80_000_000), 10, 5);
        // The varying lane carries its part.
        let bytes: Vec<u64> = out.lanes.iter().map(|l| l.1).collect();
        let total: u64 = bytes.iter().sum();
        assert!(bytes[2] * 4 > total, "{bytes:?}: {out:?}");
        // The resequencer waits for the varying lane's late packets rather than
        // giving their gaps up: the flow arrives in order, and nothing being lost,
        // fewer than one packet in 10,000 was released at a deadline.
        assert!(out.reseq.held > 1000, "{out:?}");
        assert!(
            (out.reordered as f64) < out.delivered as f64 * 0.001,
            "{out:?}"
        );
        assert!(
            out.reseq.released_at_deadline * 10_000 < out.delivered,
            "{out:?}"
        );
        // Nor does it hold beyond what the variation needs: no hold is longer than
        // 100 ms (the lanes' one-way delays differ by at most 30 ms).
        assert_eq!(holds_beyond(&out, 0.1), 0, "{out:?}");
    }

    #[test]
    fn a_path_losing_five_percent_each_way_is_never_given_up_and_a_dead_one_soon() {
        // Three uplinks of 20 Mbit/s with one-way delays of 5, 10 and 15 ms, losing 5 %
        // of datagrams and of acknowledgements and keep-alives; a 50 packets/s flow
        // beside the paced applications, so that some lanes carry little: each of
        // their exchanges fails one time in ten.
        let lossy = |ms, silent_from| LaneSpec {
            rate_bps: 20_000_000,
            one_way_ms: ms,
            jitter_ms: 0,
            loss_per_mille: 50,
            silent_from,
        };
        let sparse = || Bulk {
            flows: 1,
            flow_bps: 480_000,
            bursty: false,
        };
        let lanes = [lossy(5, None), lossy(10, None), lossy(15, None)];
        let (mut probes, mut seconds) = (0, 0);
        for seed in (1..12).step_by(2) {
            let out = run_with(Algorithm::RoundRobin, false, &lanes, sparse(), 30, seed);
            assert_eq!(out.stalls, 0, "seed {seed}: {out:?}");
            probes += out.probes;
            seconds += 30;
        }
        // What a lossy path costs: a few probes a second per lane (each 6 bytes and
        // QUIC's overhead), as one exchange in ten needs them.
        assert!(
            probes > 0 && probes < seconds * 30,
            "{probes} in {seconds} s"
        );
        // The same with the 15 ms uplink's path dying at 10 s: its next packet leaves
        // within 60 ms (a packet in three), and six failed exchanges later, probes
        // filling in, it is given up, long before the idle bound.
        let lanes = [lossy(5, None), lossy(10, None), lossy(15, Some(at(10_000)))];
        let out = run_with(Algorithm::RoundRobin, false, &lanes, sparse(), 12, 5);
        assert_eq!(out.stalls, 1, "{out:?}");
        let given_up = out.out_since[2].expect("out of service");
        let after = given_up.saturating_since(at(10_000));
        assert!(
            after < Duration::from_millis(60 + 130),
            "{after:?}: {out:?}"
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        let bulk = || Bulk {
            flows: 8,
            flow_bps: 2_000_000,
            bursty: true,
        };
        let short = |seed| run(&lanes()[1..], bulk(), 2, seed);
        let first = short(11);
        assert_eq!(first, short(11));
        assert_ne!(first.lanes, short(12).lanes, "the seed matters");
        // The snapshot: per lane (datagrams, bytes, decisions new/same/switch/stripe/stateless).
        assert_eq!(first.lanes, SNAPSHOT, "{first:?}");
    }

    const SNAPSHOT: [(u64, u64, [u64; 5]); 2] = [
        (1622, 1_959_376, [3, 1620, 0, 0, 0]),
        (2662, 3_214_496, [7, 2654, 0, 0, 0]),
    ];
}
