//! AFMT (Sailer & Hähner, "An Adaptive Flow-Aware Packet Scheduling Algorithm for
//! Multipath Tunnelling"), Algorithms 1 and 2.
//!
//! A known flow may leave its last lane only for a lane on which the packet cannot
//! overtake the flow's previous packet: `srtt_i + δ > srtt_last`, with δ the time since
//! that packet was sent (flowlet switching). Among the applicable lanes the one with
//! the lowest weighted fill `(fill + len) * srtt / cwnd` wins. New flows, and flows
//! whose lane went down, choose among all lanes that are up.

use std::time::Duration;

use super::{DecisionKind, Pick, Scheduler, least_weighted_fill};
use crate::core::flow::FlowTable;
use crate::core::lane::{LaneId, LaneView};
use crate::core::packet::FlowKey;
use crate::core::time::Instant;

pub struct Afmt {
    flows: FlowTable<LaneId>,
}

impl Afmt {
    pub fn new(idle_timeout: Duration, max_flows: usize) -> Afmt {
        Afmt {
            flows: FlowTable::new(idle_timeout, max_flows),
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
        self.flows.expire(now);
        let last = self.flows.get(flow).and_then(|e| {
            let i = lanes.iter().position(|l| l.id == e.value && l.up)?;
            Some((i, now.saturating_since(e.last_used)))
        });
        let pick = match last {
            Some((last, delta)) => {
                let srtt_last = lanes[last].srtt;
                let lane = least_weighted_fill(lanes, len, |i, l| {
                    i == last || (l.up && l.srtt + delta > srtt_last)
                })?;
                let kind = if lane == last {
                    DecisionKind::SameLane
                } else {
                    DecisionKind::Switch
                };
                Pick { lane, kind }
            }
            None => Pick {
                lane: least_weighted_fill(lanes, len, |_, l| l.up)?,
                kind: DecisionKind::NewFlow,
            },
        };
        self.flows.record(flow, lanes[pick.lane].id, now);
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
        // Lane 0 is fast (10 ms) but loaded; lane 1 slow (50 ms) and empty.
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        assert_eq!(
            s.pick(FlowKey(7), 1000, &lanes, at(0)).expect("pick").lane,
            0
        );
        lanes[0].fill = 100_000;
        // 5 ms later: 50 + 5 > 10, so lane 1 is applicable and far less loaded.
        let p = s.pick(FlowKey(7), 1000, &lanes, at(5)).expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::Switch
            }
        );
        // Now the flow's last lane is the slow one. Going back to the fast lane could
        // overtake the packet just sent unless δ exceeds the SRTT difference (40 ms).
        lanes[0].fill = 0;
        lanes[1].fill = 100_000;
        let p = s.pick(FlowKey(7), 1000, &lanes, at(45)).expect("pick"); // δ = 40: 10 + 40 > 50 is false
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::SameLane
            }
        );
        let p = s.pick(FlowKey(7), 1000, &lanes, at(86)).expect("pick"); // δ = 41: 51 > 50
        assert_eq!(
            p,
            Pick {
                lane: 0,
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
