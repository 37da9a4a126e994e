//! Active/backup: every packet on the first uplink (in configuration order) that is up.

use super::{Pick, PickContext, Scheduler};

pub struct Single;

impl Scheduler for Single {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let lanes = cx.lanes;
        let (lane, _) = lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.up)
            .min_by_key(|(_, l)| l.rank)?;
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
    fn the_first_configured_uplink_that_is_up_carries_everything() {
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 10, 10_000, 0)];
        lanes[0].rank = 1; // connected first, configured second
        lanes[1].rank = 0;
        assert_eq!(
            Single
                .pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO
                ))
                .expect("pick")
                .lane,
            1
        );
        lanes[1].up = false;
        assert_eq!(
            Single
                .pick(&PickContext::test(
                    FlowKey(1),
                    100,
                    0,
                    &lanes,
                    Instant::ZERO
                ))
                .expect("pick")
                .lane,
            0
        );
    }
}
