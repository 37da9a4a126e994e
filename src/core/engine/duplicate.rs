//! Duplication: each packet of a `duplicate` application also goes, as a copy, over
//! a second uplink, within its site's budget (`duplicate_kbps`); the receiving
//! gateway passes whichever arrives first and drops the other (`core/seen.rs`).

use bytes::BytesMut;

use crate::core::lane::{LaneId, LaneView};
use crate::core::pacing_table::AppIdx;
use crate::core::site::SiteIdx;
use crate::core::time::Instant;
use crate::core::wire::DATAGRAM_HEADER_LEN;

use super::DataPath;
use super::lanes::{Lane, quickest_lane};

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
        let admits = |v: &LaneView| v.up && other_uplink(lanes, v.id, uplink);
        let s = &mut self.sites[site.0 as usize];
        let inner = len - DATAGRAM_HEADER_LEN;
        let Some(view) = quickest_lane(&s.lanes, colour, inner, now, admits) else {
            return;
        };
        let budget = self.pacing.table(site).duplicate_budget_bps();
        if !s.duplicate_budget.take(len as u64, budget, now) {
            self.pacing.count_over_budget(site, app);
            return;
        }
        if !self.send_copy(site, view, copy, now) {
            return;
        }
        self.pacing.count_duplicate(site, app, len);
    }
}

/// Whether lane `id` exists and is of an uplink other than `uplink`.
pub(super) fn other_uplink(lanes: &[Option<Lane>], id: LaneId, uplink: &str) -> bool {
    lanes
        .get(id.0 as usize)
        .and_then(Option::as_ref)
        .is_some_and(|l| l.uplink != uplink)
}
