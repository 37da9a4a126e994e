//! Duplication: each packet of a `duplicate` application also goes, as a copy, over
//! a second uplink, within its site's budget (`duplicate_kbps`); the receiving
//! gateway passes whichever arrives first and drops the other (`core/seen.rs`).

use bytes::BytesMut;

use crate::core::lane::LaneId;
use crate::core::pacing_table::AppIdx;
use crate::core::site::SiteIdx;
use crate::core::time::Instant;
use crate::core::wire::DATAGRAM_HEADER_LEN;

use super::DataPath;
use super::lanes::hand_copy;
use super::timers::Timer;

impl DataPath {
    /// Sends `copy`, the datagram of a `duplicate` application's packet that went to
    /// lane `first`, over the lane of another uplink where it arrives first (of the
    /// same colour if one is up), marked as a copy and numbered in that lane's
    /// sequence. Straight to the lane's queue, past its uplink's shaper: the budget
    /// bounds what copies add. Nothing is sent, or counted, while the site has no
    /// other uplink up; a copy the budget has no room for is counted.
    pub(super) fn send_duplicate(
        &mut self,
        site: SiteIdx,
        app: AppIdx,
        first: LaneId,
        copy: BytesMut,
        now: Instant,
    ) {
        let Some(Some(first_lane)) = self.lanes.get(first.0 as usize) else {
            return;
        };
        let (colour, uplink) = (first_lane.colour, first_lane.uplink.as_str());
        let len = copy.len();
        let lanes = &self.lanes;
        let s = &mut self.sites[site.0 as usize];
        let Some(view) = s
            .lanes
            .iter_mut()
            .filter(|v| {
                v.up && v.max_datagram >= len - DATAGRAM_HEADER_LEN
                    && lanes
                        .get(v.id.0 as usize)
                        .and_then(Option::as_ref)
                        .is_some_and(|l| l.uplink != uplink)
            })
            .min_by_key(|v| (v.colour != colour, v.arrival(len, now)))
        else {
            return;
        };
        let budget = self.pacing.table(site).duplicate_budget_bps();
        if !s.duplicate_budget.take(len as u64, budget, now) {
            self.pacing.count_over_budget(site, app);
            return;
        }
        let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
            return;
        };
        if lane.queued_bytes() + len as u64 > self.lane_queue_limit {
            return;
        }
        let (transmit, due) = hand_copy(lane, view, copy, now);
        self.timers.earliest(Timer::StallCheck, due);
        self.transmits.push_back(transmit);
        self.pacing.count_duplicate(site, app, len);
    }
}
