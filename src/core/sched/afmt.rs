//! AFMT (Sailer & Hähner, "An Adaptive Flow-Aware Packet Scheduling Algorithm for
//! Multipath Tunnelling"), Algorithms 1 and 2.
//!
//! A known flow may leave its last lane only for a lane on which the packet cannot
//! overtake the flow's previous packet: `srtt_i + δ > srtt_last`, with δ the time since
//! that packet was sent (flowlet switching). Among the applicable lanes the one with
//! the lowest weighted fill `(fill + len) * srtt / cwnd` wins. New flows, and flows
//! whose lane went down, choose among all lanes that are up.
//!
//! Additions to the paper, each for a failure measured in the testbed (README, "AFMT
//! status"):
//! - A lane's delay in the flowlet rule is its SRTT plus the time to drain what braid
//!   has queued for it (`fill * srtt / cwnd`): a packet put behind a queue arrives that
//!   much later, and a switch to an emptier lane could otherwise overtake it.
//! - Another lane counts as slower only by a margin (2 ms plus an eighth of the last
//!   lane's delay): a smoothed RTT lags the queue it measures, and without the margin
//!   27–30 % of the packets of bulk flows arrived out of order.
//! - A new flow's weighted fill is multiplied by one plus the number of flows its lane
//!   already carries. On idle lanes QUIC's cwnd and SRTT say nothing about capacity
//!   (cwnd does not grow while a connection is application-limited), so without it all
//!   flows that start together land on one lane.

use std::time::Duration;

use super::{DecisionKind, Pick, Scheduler, least_weighted_fill};
use crate::core::flow::FlowTable;
use crate::core::lane::{LaneId, LaneView};
use crate::core::packet::FlowKey;
use crate::core::time::Instant;

/// Fixed part of the margin by which another lane must be slower before a busy flow
/// may move to it (the other part is an eighth of the last lane's delay).
const SWITCH_MARGIN: Duration = Duration::from_millis(2);

pub struct Afmt {
    flows: FlowTable<LaneId>,
    /// How many flows of the table each lane carries (lanes with none are absent).
    flows_on: Vec<(LaneId, u64)>,
}

impl Afmt {
    pub fn new(idle_timeout: Duration, max_flows: usize) -> Afmt {
        Afmt {
            flows: FlowTable::new(idle_timeout, max_flows),
            flows_on: Vec::new(),
        }
    }
}

/// How long a packet handed to the lane now takes to arrive: its SRTT plus the time
/// to drain braid's queue for it at the lane's rate (cwnd per SRTT).
fn delay(l: &LaneView) -> Duration {
    let drain_nanos = u128::from(l.fill) * l.srtt.as_nanos() / u128::from(l.cwnd.max(1));
    l.srtt + Duration::from_nanos(u64::try_from(drain_nanos).unwrap_or(u64::MAX))
}

/// Flows of the table on `lane`.
fn count(flows_on: &[(LaneId, u64)], lane: LaneId) -> u64 {
    flows_on
        .iter()
        .find(|(l, _)| *l == lane)
        .map_or(0, |(_, n)| *n)
}

fn add_flow(flows_on: &mut Vec<(LaneId, u64)>, lane: LaneId) {
    match flows_on.iter_mut().find(|(l, _)| *l == lane) {
        Some((_, n)) => *n += 1,
        None => flows_on.push((lane, 1)),
    }
}

fn remove_flow(flows_on: &mut Vec<(LaneId, u64)>, lane: LaneId) {
    if let Some(i) = flows_on.iter().position(|(l, _)| *l == lane) {
        flows_on[i].1 -= 1;
        if flows_on[i].1 == 0 {
            flows_on.swap_remove(i);
        }
    }
}

impl Scheduler for Afmt {
    fn pick(
        &mut self,
        flow: FlowKey,
        len: usize,
        lanes: &[LaneView],
        now: Instant,
    ) -> Option<Pick> {
        let flows_on = &mut self.flows_on;
        self.flows.expire(now, |lane| remove_flow(flows_on, lane));
        let known = self.flows.get(flow);
        let last = known.and_then(|e| {
            let i = lanes.iter().position(|l| l.id == e.value && l.up)?;
            Some((i, now.saturating_since(e.last_used)))
        });
        let pick = match last {
            Some((last, delta)) => {
                let current = &lanes[last];
                // A smoothed RTT lags the queue it measures: another lane must look
                // slower by a margin before a busy flow may move to it.
                let delay_last = delay(current);
                let bar = delay_last + SWITCH_MARGIN + delay_last / 8;
                // Other flows on a lane share it with this one: count them.
                let sharing =
                    |i: usize| 1 + count(&self.flows_on, lanes[i].id) - u64::from(i == last);
                let lane = if delta <= bar && current.fill.saturating_mul(2) <= current.cwnd {
                    // The lane keeps up with the flow and the flow did not pause: no
                    // reason to move. (A busier lane's larger cwnd would otherwise lure
                    // flows away from lanes whose cwnd never grew for want of load.)
                    last
                } else {
                    let applicable =
                        |i: usize, l: &LaneView| i == last || (l.up && delay(l) + delta > bar);
                    least_weighted_fill(lanes, len, applicable, sharing)?
                };
                let kind = if lane == last {
                    DecisionKind::SameLane
                } else {
                    DecisionKind::Switch
                };
                Pick { lane, kind }
            }
            None => {
                let sharing = |i: usize| 1 + count(&self.flows_on, lanes[i].id);
                let lane = least_weighted_fill(lanes, len, |_, l| l.up, sharing)?;
                Pick {
                    lane,
                    kind: DecisionKind::NewFlow,
                }
            }
        };
        let chosen = lanes[pick.lane].id;
        let previous = known.map(|e| e.value);
        if previous != Some(chosen) {
            if let Some(lane) = previous {
                remove_flow(&mut self.flows_on, lane);
            }
            add_flow(&mut self.flows_on, chosen);
        }
        if let Some(evicted) = self.flows.record(flow, chosen, now) {
            remove_flow(&mut self.flows_on, evicted);
        }
        Some(pick)
    }

    fn flows(&self) -> usize {
        self.flows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::testing::lane;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    fn afmt() -> Afmt {
        Afmt::new(Duration::from_secs(10), 1000)
    }

    #[test]
    fn a_new_flow_takes_the_lane_with_the_lowest_weighted_fill() {
        // weighted fill = (fill + 1000) * srtt / cwnd:
        //   lane 0: 11000 * 10 / 10000 = 11;  lane 1: 1000 * 40 / 20000 = 2;
        //   lane 2: 5000 * 20 / 10000 = 10
        let lanes = [
            lane(0, 10, 10_000, 10_000),
            lane(1, 40, 20_000, 0),
            lane(2, 20, 10_000, 4000),
        ];
        let p = afmt().pick(FlowKey(1), 1000, &lanes, at(0)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::NewFlow
            }
        );
    }

    #[test]
    fn a_known_flow_keeps_its_lane_unless_another_cannot_reorder() {
        let mut s = afmt();
        // Lane 0 is fast (10 ms), lane 1 slow (50 ms); both empty.
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        assert_eq!(
            s.pick(FlowKey(7), 1000, &lanes, at(0)).expect("pick").lane,
            0
        );
        // Lane 0 gets a queue of 10 000 bytes: its delay is 10 + 10 000 * 10 / 10 000 =
        // 20 ms and its weighted fill 11 against lane 1's 5. Lane 1 (50 ms) is slower
        // than 20 ms plus the margin (2 ms + 20/8 ms), so the flow may move there.
        lanes[0].fill = 10_000;
        let p = s.pick(FlowKey(7), 1000, &lanes, at(1)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::Switch
            }
        );
        // The slow lane keeps up with the flow, so it stays there until it pauses for
        // longer than that lane's delay plus the margin, 50 + 2 + 50/8 = 58.25 ms.
        lanes[0].fill = 0;
        let p = s.pick(FlowKey(7), 1000, &lanes, at(1 + 58)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::SameLane
            }
        );
        let p = s.pick(FlowKey(7), 1000, &lanes, at(59 + 59)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 0,
                kind: DecisionKind::Switch
            }
        );
    }

    #[test]
    fn a_backlogged_lane_lets_its_flows_move_to_slower_lanes() {
        let mut s = afmt();
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        s.pick(FlowKey(7), 1000, &lanes, at(0));
        lanes[0].fill = 4000; // less than half the cwnd: the lane keeps up
        assert_eq!(
            s.pick(FlowKey(7), 1000, &lanes, at(1)).expect("pick").lane,
            0
        );
        lanes[0].fill = 6000; // backlogged: weighted fill 7 against the slow lane's 5
        let p = s.pick(FlowKey(7), 1000, &lanes, at(2)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::Switch
            }
        );
    }

    #[test]
    fn a_down_lane_makes_its_flows_new() {
        let mut s = afmt();
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        assert_eq!(
            s.pick(FlowKey(3), 1000, &lanes, at(0)).expect("pick").lane,
            0
        );
        lanes[0].up = false;
        let p = s.pick(FlowKey(3), 1000, &lanes, at(1)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::NewFlow
            }
        );
        lanes[1].up = false;
        assert_eq!(s.pick(FlowKey(3), 1000, &lanes, at(2)), None);
    }

    #[test]
    fn an_idle_flow_expires_and_is_new_again() {
        let mut s = Afmt::new(Duration::from_millis(100), 10);
        let lanes = [lane(0, 10, 10_000, 0)];
        s.pick(FlowKey(1), 100, &lanes, at(0));
        assert_eq!(s.flows(), 1);
        assert_eq!(
            s.pick(FlowKey(1), 100, &lanes, at(99)).expect("pick").kind,
            DecisionKind::SameLane
        );
        assert_eq!(
            s.pick(FlowKey(1), 100, &lanes, at(199)).expect("pick").kind,
            DecisionKind::NewFlow
        );
    }

    #[test]
    fn flows_starting_together_spread_over_idle_lanes() {
        let mut s = afmt();
        let lanes = [
            lane(0, 10, 12_000, 0),
            lane(1, 10, 12_000, 0),
            lane(2, 10, 12_000, 0),
        ];
        let picks: Vec<usize> = (0..6)
            .map(|f| s.pick(FlowKey(f), 100, &lanes, at(0)).expect("pick").lane)
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // A flow that expired no longer counts for its lane.
        let mut s = Afmt::new(Duration::from_millis(10), 100);
        s.pick(FlowKey(1), 100, &lanes, at(0));
        assert_eq!(
            s.pick(FlowKey(2), 100, &lanes, at(20)).expect("pick").lane,
            0
        );
        // Neither does an evicted one: flow 2 avoids flow 1's lane, then evicts flow 1.
        let mut s = Afmt::new(Duration::from_secs(10), 1);
        s.pick(FlowKey(1), 100, &lanes, at(0));
        assert_eq!(
            s.pick(FlowKey(2), 100, &lanes, at(1)).expect("pick").lane,
            1
        );
        assert_eq!(s.flows_on, [(lanes[1].id, 1)]);
    }

    #[test]
    fn ties_go_to_the_first_lane() {
        let lanes = [lane(0, 10, 10_000, 0), lane(1, 10, 10_000, 0)];
        assert_eq!(
            afmt()
                .pick(FlowKey(1), 100, &lanes, at(0))
                .expect("pick")
                .lane,
            0
        );
    }
}
