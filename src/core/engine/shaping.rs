//! The shapers of uplinks of known rate: one per uplink, shared by its lanes of both
//! colours, and what they let go.

use crate::core::lane::{Colour, LaneId};
use crate::core::shaper::{ShapeDrop, Shaper};
use crate::core::site::SiteIdx;
use crate::core::stats::DropReason;
use crate::core::time::Instant;

use super::lanes::{hand_to_lane, number_for_lane};
use super::sites::view_mut;
use super::timers::{Timer, earliest};
use super::{DataPath, Transmit};

/// The shaper of one uplink of known rate.
pub(super) struct UplinkShaper {
    pub site: SiteIdx,
    pub uplink: String,
    pub shaper: Shaper,
}

impl DataPath {
    /// Makes the lane of an uplink of known rate (`rate_kbps`, positive when known)
    /// use the uplink's shaper (created at its first lane), and sends what waits
    /// there for the lane's colour to this lane from now on. A lane whose uplink has no rate (any longer) is not shaped,
    /// but still receives what its shaper holds.
    pub(super) fn attach_shaper(
        &mut self,
        site: SiteIdx,
        uplink: &str,
        colour: Colour,
        lane: LaneId,
        rate_kbps: Option<u64>,
        now: Instant,
    ) -> Option<usize> {
        let existing = self
            .shapers
            .iter()
            .position(|s| s.site == site && s.uplink == uplink);
        let index = match (existing, rate_kbps) {
            (Some(index), _) => index,
            (None, Some(rate)) => {
                self.shapers.push(UplinkShaper {
                    site,
                    uplink: uplink.to_string(),
                    shaper: Shaper::new(rate, self.abe, now),
                });
                self.shapers.len() - 1
            }
            (None, None) => return None,
        };
        let shaper = &mut self.shapers[index].shaper;
        shaper.set_lane(colour, lane);
        shaper.set_rate(rate_kbps?);
        Some(index)
    }

    /// Hands the lanes what their uplinks' shapers let go by `now`.
    pub(super) fn release_shaped(&mut self, now: Instant) {
        let mut released = std::mem::take(&mut self.shaped);
        let mut next = None;
        for s in &mut self.shapers {
            s.shaper
                .release(now, &mut released, &mut self.green_drops.stale);
            next = earliest(next, s.shaper.next_release());
        }
        self.timers.set(Timer::ShaperRelease, next);
        for r in released.drain(..) {
            let lane = r.lane.and_then(|id| {
                let l = self.lanes.get_mut(id.0 as usize)?.as_mut()?;
                (!l.retired && !l.closed).then_some((id, l))
            });
            let Some((id, lane)) = lane else {
                self.count_drop(DropReason::NoLane);
                continue;
            };
            let Some(view) = view_mut(&mut self.sites, lane.site, id) else {
                self.count_drop(DropReason::NoLane);
                continue;
            };
            self.queue_delay[r.colour as usize].observe(r.waited);
            let sojourn = view.drain_time(0, view.srtt);
            let datagram = number_for_lane(lane, r.datagram);
            let due = hand_to_lane(lane, &datagram, view.srtt, sojourn, now);
            self.timers.earliest(Timer::StallCheck, due);
            self.transmits.push_back(Transmit { lane: id, datagram });
        }
        self.shaped = released;
    }

    pub(super) fn count_shape_drop(&mut self, why: ShapeDrop) {
        match why {
            ShapeDrop::QueueFull => self.count_drop(DropReason::QueueFull),
            ShapeDrop::QueueDelay => self.count_drop(DropReason::QueueDelay),
            ShapeDrop::GreenAcceptance => self.green_drops.acceptance += 1,
            ShapeDrop::GreenStale => self.green_drops.stale += 1,
        }
    }
}
