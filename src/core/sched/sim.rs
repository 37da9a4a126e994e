//! A deterministic simulator for the schedulers: lanes with a rate and a one-way
//! delay, braid's queue in front of each, flows that send in bursts (flowlets) with
//! seeded random pauses, and a virtual clock that jumps from packet to packet. The
//! receiver counts, per flow, packets that arrive after a later-sent one.

use std::time::Duration;

use super::{Algorithm, DecisionKind, PickContext};
use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::packet::FlowKey;
use crate::core::time::Instant;

const PACKET: u64 = 1400;

struct SimLane {
    rate_bps: u64,
    one_way: Duration,
    /// When braid's queue for this lane is empty again.
    free_at: u64,
}

struct SimFlow {
    rate_bps: u64,
    next_send: u64,
    /// Packets left in the current burst.
    burst_left: u32,
    sent: u64,
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub bytes_per_lane: Vec<u64>,
    pub packets: u64,
    pub reordered: u64,
    pub switches: u64,
}

/// xorshift64: reproducible pseudo-random numbers for a given seed (not zero).
pub(crate) struct Rng(pub u64);

impl Rng {
    /// A number below `below` (0 for 0).
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below.max(1)
    }
}

/// Runs `flows` flows of `flow_rate_bps` each over lanes of the given rates (bit/s)
/// and one-way delays for `seconds` of virtual time.
pub fn run(
    algorithm: Algorithm,
    lanes: &[(u64, u64)],
    flows: usize,
    flow_rate_bps: u64,
    seconds: u64,
    seed: u64,
) -> Outcome {
    let mut scheduler = algorithm.build(Duration::from_secs(10), 10_000);
    let mut sim_lanes: Vec<SimLane> = lanes
        .iter()
        .map(|&(rate_bps, delay_ms)| SimLane {
            rate_bps,
            one_way: Duration::from_millis(delay_ms),
            free_at: 0,
        })
        .collect();
    let mut rng = Rng(seed.max(1));
    let mut sim_flows: Vec<SimFlow> = (0..flows)
        .map(|_| SimFlow {
            rate_bps: flow_rate_bps,
            next_send: rng.next(10_000_000),
            burst_left: 0,
            sent: 0,
        })
        .collect();
    let end = seconds * 1_000_000_000;
    // (arrival time, flow, sequence number within the flow)
    let mut arrivals: Vec<(u64, usize, u64)> = Vec::new();
    let mut bytes_per_lane = vec![0u64; lanes.len()];
    let mut switches = 0;
    let mut views: Vec<LaneView> = (0..lanes.len())
        .map(|i| LaneView {
            rate_kbps: Some(lanes[i].0 / 1000),
            ..LaneView::new(LaneId(i as u32), Colour::Blue)
        })
        .collect();
    loop {
        let (f, now) = match sim_flows
            .iter()
            .enumerate()
            .map(|(i, f)| (i, f.next_send))
            .min_by_key(|&(_, t)| t)
        {
            Some((f, t)) if t < end => (f, t),
            _ => break,
        };
        for (view, lane) in views.iter_mut().zip(&sim_lanes) {
            // Everything queues in braid; the path itself never queues, so SRTT is
            // twice the one-way delay and cwnd one bandwidth-delay product.
            view.srtt = lane.one_way * 2;
            view.cwnd = (lane.rate_bps / 8) * view.srtt.as_nanos() as u64 / 1_000_000_000;
            view.fill = lane.free_at.saturating_sub(now) * (lane.rate_bps / 8) / 1_000_000_000;
        }
        let pick = scheduler
            .pick(&PickContext {
                flow: FlowKey(f as u64),
                len: PACKET as usize,
                seq: 0,
                lanes: &views,
                now: Instant::from_nanos(now),
            })
            .expect("lanes are up");
        if pick.kind == DecisionKind::Switch {
            switches += 1;
        }
        let lane = &mut sim_lanes[pick.lane];
        let departs = lane.free_at.max(now) + PACKET * 8 * 1_000_000_000 / lane.rate_bps;
        lane.free_at = departs;
        arrivals.push((
            departs + lane.one_way.as_nanos() as u64,
            f,
            sim_flows[f].sent,
        ));
        bytes_per_lane[pick.lane] += PACKET;
        let flow = &mut sim_flows[f];
        flow.sent += 1;
        // Bursts of 1 to 64 packets at the flow's rate, then a pause of 0 to 60 ms.
        let gap = PACKET * 8 * 1_000_000_000 / flow.rate_bps;
        if flow.burst_left == 0 {
            flow.burst_left = 1 + rng.next(64) as u32;
            flow.next_send = now + gap + rng.next(60_000_000);
        } else {
            flow.burst_left -= 1;
            flow.next_send = now + gap;
        }
    }
    arrivals.sort_by_key(|&(at, f, seq)| (at, f, seq));
    let mut highest = vec![None::<u64>; flows];
    let mut reordered = 0;
    for &(_, f, seq) in &arrivals {
        match highest[f] {
            Some(h) if seq < h => reordered += 1,
            _ => highest[f] = Some(seq),
        }
    }
    Outcome {
        bytes_per_lane,
        packets: arrivals.len() as u64,
        reordered,
        switches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANES: [(u64, u64); 3] = [(16_000_000, 5), (32_000_000, 15), (50_000_000, 30)];

    #[test]
    fn afmt_uses_every_lane_without_reordering() {
        // Twelve bursty flows (6 Mbit/s while sending) offer about half the 98 Mbit/s:
        // AFMT prefers the fast lanes but uses all, and never overloads one.
        let out = run(Algorithm::Afmt, &LANES, 12, 6_000_000, 10, 7);
        let total: u64 = out.bytes_per_lane.iter().sum();
        for (i, b) in out.bytes_per_lane.iter().enumerate() {
            let share = 100.0 * *b as f64 / total as f64;
            assert!(share > 5.0, "lane {i} carried {share:.1}%: {out:?}");
            let capacity = LANES[i].0 / 8 * 10;
            assert!(
                *b * 100 < capacity * 95,
                "lane {i} was loaded to capacity: {out:?}"
            );
        }
        assert!(out.switches > 0, "flowlets never moved: {out:?}");
        assert!(
            out.reordered * 1000 < out.packets,
            "more than 0.1% reordered: {out:?}"
        );
        assert_eq!(
            out,
            run(Algorithm::Afmt, &LANES, 12, 6_000_000, 10, 7),
            "runs must be reproducible"
        );
    }

    #[test]
    fn round_robin_reorders_where_afmt_does_not() {
        let rr = run(Algorithm::RoundRobin, &LANES, 12, 6_000_000, 10, 7);
        let afmt = run(Algorithm::Afmt, &LANES, 12, 6_000_000, 10, 7);
        assert!(
            rr.reordered > 100 * afmt.reordered.max(1),
            "round-robin {rr:?} vs AFMT {afmt:?}"
        );
    }
}
