//! Duplication: each packet of a `duplicate` application also goes, as a copy, over
//! a second uplink, within its site's budget (`duplicate_kbps`); the receiving
//! gateway passes whichever arrives first and drops the other (`core/seen.rs`).

use bytes::BytesMut;

use crate::core::lane::LaneId;
use crate::core::pacing_table::AppIdx;
use crate::core::site::SiteIdx;
use crate::core::time::Instant;

use super::DataPath;

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
        let len = copy.len();
        let Some(view) = self.copy_target(site, first, len, now, |v, _| v.up) else {
            return;
        };
        let s = &mut self.sites[site.0 as usize];
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
