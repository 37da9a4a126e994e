//! Round-robin over the lanes that are up: the AFMT paper's baseline.

use super::{Pick, PickContext, Scheduler};

/// Gives each live lane one packet in turn, whatever the flow or lane state.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl Scheduler for RoundRobin {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let lanes = cx.lanes;
        let n = lanes.len();
        let lane = (0..n).map(|k| (self.next + k) % n).find(|&i| lanes[i].up)?;
        self.next = lane + 1;
        Some(Pick::stateless(lane))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lane::LaneView;
    use crate::core::lane::{Colour, LaneId};
    use crate::core::packet::FlowKey;
    use crate::core::time::Instant;

    fn lanes(up: &[bool]) -> Vec<LaneView> {
        up.iter()
            .enumerate()
            .map(|(i, &up)| LaneView {
                up,
                ..LaneView::new(LaneId(i as u32), Colour::Blue)
            })
            .collect()
    }

    #[test]
    fn cycles_over_live_lanes_skipping_down_ones() {
        let mut rr = RoundRobin::default();
        let l = lanes(&[true, false, true, true]);
        let picks: Vec<_> = (0..6)
            .map(|_| {
                rr.pick(&PickContext::test(FlowKey(1), 100, 0, &l, Instant::ZERO))
                    .expect("a lane is up")
                    .lane
            })
            .collect();
        assert_eq!(picks, [0, 2, 3, 0, 2, 3]);
    }

    #[test]
    fn no_live_lane_means_no_pick() {
        let mut rr = RoundRobin::default();
        assert_eq!(
            rr.pick(&PickContext::test(
                FlowKey(1),
                100,
                0,
                &lanes(&[false, false]),
                Instant::ZERO
            )),
            None
        );
        assert_eq!(
            rr.pick(&PickContext::test(FlowKey(1), 100, 0, &[], Instant::ZERO)),
            None
        );
    }
}
