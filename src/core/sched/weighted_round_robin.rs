//! Smooth weighted round-robin (as in nginx) with the uplinks' rates as weights. Lanes
//! without a known rate weigh as much as the average of those with one (all alike
//! when no rate is known).

use super::{Pick, PickContext, Scheduler};
use crate::core::lane::LaneId;

#[derive(Debug, Default)]
pub struct WeightedRoundRobin {
    /// Each lane's running credit.
    credit: Vec<(LaneId, i64)>,
}

impl Scheduler for WeightedRoundRobin {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let lanes = cx.lanes;
        // Per packet: sum and count the known rates without collecting them.
        let (sum, n) = lanes
            .iter()
            .filter(|l| l.up)
            .filter_map(|l| l.rate_kbps)
            .fold((0u64, 0u64), |(sum, n), r| (sum.saturating_add(r), n + 1));
        let fallback = sum.checked_div(n).unwrap_or(1);
        self.credit
            .retain(|(id, _)| lanes.iter().any(|l| l.id == *id && l.up));
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for (i, lane) in lanes.iter().enumerate().filter(|(_, l)| l.up) {
            let weight =
                i64::try_from(lane.rate_kbps.unwrap_or(fallback).max(1)).unwrap_or(i64::MAX / 64);
            total = total.saturating_add(weight);
            let credit = match self.credit.iter_mut().find(|(id, _)| *id == lane.id) {
                Some((_, c)) => {
                    *c = c.saturating_add(weight);
                    *c
                }
                None => {
                    self.credit.push((lane.id, weight));
                    weight
                }
            };
            if best.is_none_or(|(_, b)| credit > b) {
                best = Some((i, credit));
            }
        }
        let (lane, _) = best?;
        if let Some((_, c)) = self.credit.iter_mut().find(|(id, _)| *id == lanes[lane].id) {
            *c -= total;
        }
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
    fn shares_follow_the_rates_and_interleave() {
        let mut lanes = [
            lane(0, 10, 10_000, 0),
            lane(1, 10, 10_000, 0),
            lane(2, 10, 10_000, 0),
        ];
        for (l, rate) in lanes.iter_mut().zip([16_000, 32_000, 50_000]) {
            l.rate_kbps = Some(rate);
        }
        let mut wrr = WeightedRoundRobin::default();
        let mut count = [0; 3];
        let picks: Vec<usize> = (0..98)
            .map(|_| {
                wrr.pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO,
                ))
                .expect("pick")
                .lane
            })
            .collect();
        for p in &picks {
            count[*p] += 1;
        }
        assert_eq!(count, [16, 32, 50]);
        assert!(
            picks
                .windows(3)
                .all(|w| !(w[0] == w[1] && w[1] == w[2] && w[0] == 0)),
            "smooth: no bursts on the slow lane"
        );
    }

    #[test]
    fn unknown_rates_weigh_the_average_and_down_lanes_get_nothing() {
        let mut lanes = [
            lane(0, 10, 10_000, 0),
            lane(1, 10, 10_000, 0),
            lane(2, 10, 10_000, 0),
        ];
        lanes[0].rate_kbps = Some(10_000);
        lanes[1].rate_kbps = Some(30_000);
        lanes[2].up = false;
        let mut wrr = WeightedRoundRobin::default();
        let mut count = [0; 3];
        for _ in 0..40 {
            count[wrr
                .pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO,
                ))
                .expect("pick")
                .lane] += 1;
        }
        assert_eq!(count, [10, 30, 0]);
        lanes[2].up = true; // unknown rate: weighs the average, 20 000
        let mut count = [0; 3];
        for _ in 0..60 {
            count[wrr
                .pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO,
                ))
                .expect("pick")
                .lane] += 1;
        }
        assert_eq!(count, [10, 30, 20]);
    }
}
