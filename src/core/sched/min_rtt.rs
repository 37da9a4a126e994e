//! Lowest SRTT first (MPTCP's default scheduler): the lane with the lowest SRTT whose
//! queue inside braid is below its congestion window; if every lane is that full, the
//! lowest SRTT among all lanes that are up.

use super::{Pick, PickContext, Scheduler};

pub struct MinRtt;

impl Scheduler for MinRtt {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let lanes = cx.lanes;
        let lowest = |room_only: bool| {
            lanes
                .iter()
                .enumerate()
                .filter(|(_, l)| l.up && (!room_only || l.fill < l.cwnd))
                .min_by_key(|(_, l)| l.srtt)
                .map(|(i, _)| i)
        };
        let lane = lowest(true).or_else(|| lowest(false))?;
        Some(Pick::stateless(lane))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::FlowKey;
    use crate::core::sched::testing::lane;
    use crate::core::time::Instant;

    #[test]
    fn lowest_rtt_with_room_wins_and_full_lanes_are_skipped() {
        let lanes = [
            lane(0, 30, 10_000, 0),
            lane(1, 10, 10_000, 10_000),
            lane(2, 20, 10_000, 500),
        ];
        assert_eq!(
            MinRtt
                .pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO
                ))
                .expect("pick")
                .lane,
            2
        );
        let full = [lane(0, 30, 10_000, 20_000), lane(1, 10, 10_000, 10_000)];
        assert_eq!(
            MinRtt
                .pick(&PickContext::test(FlowKey(1), 100, 0, &full, Instant::ZERO))
                .expect("pick")
                .lane,
            1
        );
    }
}
