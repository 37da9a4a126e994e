//! Standby copies: while a site's carrying tier is in doubt, each packet of a sparse
//! flow (a call, a game, a DNS query) also goes, as a copy, over a warm standby
//! uplink; the receiving gateway passes whichever arrives first (`core/seen.rs`).
//!
//! Why: when every primary uplink dies at once, their lanes are judged one after
//! another. The lane that carried a call goes first, the call moves onto another
//! primary's lane, and that one is judged only from then on, as an idle lane waits
//! for no answer: the call stopped for two judgements or more, up to 310 ms, over
//! the 150 ms a warm backup must fail over within (docs/design/uplink-policy.md).
//! Copied over the backup from the first judgement on, it stops for one.
//!
//! The tier is in doubt from when one of its lanes is given up (its path fell
//! silent) while a lane stands by, until the idle bound
//! ([`super::liveness::LANE_STALL`]) has passed, by which time a silent lane has
//! been given up whatever it carried. Not until its other lanes are heard from: a
//! lane counts as heard at the sample that shows what it received, so a lane
//! sampled just after the give-up may show what arrived before its path died.
//! Sparse is told from the scheduler's flow state (AFMT's): a scheduler without
//! one (round-robin, min-rtt, ...) tells nothing, and nothing is copied. Only
//! sparse flows are copied, within
//! [`STANDBY_COPY_RATE_BPS`], so that what a backup billed by the byte carries when
//! one primary fails is a moment of the calls, not of the downloads.

use std::time::Duration;

use bytes::BytesMut;

use crate::core::lane::LaneId;
use crate::core::sched::{DecisionKind, Pick};
use crate::core::site::SiteIdx;
use crate::core::time::Instant;

use super::DataPath;
use super::lanes::Lane;
use super::sites::Site;

/// A flow whose packets come at least this far apart is sparse: a call's (20 ms),
/// a game's, a query's; not a transfer's, whose packets come in bursts.
pub const SPARSE_INTERVAL: Duration = Duration::from_millis(5);
/// What the copies of a site's sparse flows may add to a standby uplink: some tens
/// of calls.
pub const STANDBY_COPY_RATE_BPS: u64 = 2_000_000;

/// Whether the packet `pick` scheduled is of a sparse flow: its first, or one that
/// came [`SPARSE_INTERVAL`] or more after its flow's previous.
pub(super) fn is_sparse(pick: &Pick) -> bool {
    pick.kind == DecisionKind::NewFlow || pick.since_previous.is_some_and(|d| d >= SPARSE_INTERVAL)
}

impl Site {
    /// Whether its carrying tier is in doubt at `now`, with idle lanes given up
    /// after `lane_stall`.
    pub(super) fn tier_in_doubt(&self, lane_stall: Duration, now: Instant) -> bool {
        self.tier_doubted_at
            .is_some_and(|at| now < at.saturating_add(lane_stall))
    }
}

impl DataPath {
    /// Lane `lane` was given up (and the tiers reviewed): if it carried traffic and a
    /// lane of its site stands by to take the copies, the site's carrying tier is in
    /// doubt from `now`; with none left standing by (the backup took over, or the
    /// site has no tiers), it is not, and no packet is copied for nothing.
    pub(super) fn doubt_tier(&mut self, lane: LaneId, now: Instant) {
        let Some(Some(given_up)) = self.lanes.get(lane.0 as usize) else {
            return;
        };
        if given_up.standby || given_up.retired {
            return;
        }
        let site = given_up.site;
        let s = &mut self.sites[site.0 as usize];
        let lanes = &self.lanes;
        let standing_by = s.lanes.iter().any(|v| {
            lanes
                .get(v.id.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(Lane::stands_by)
        });
        s.tier_doubted_at = standing_by.then_some(now);
    }

    /// Sends `copy`, the datagram of a sparse flow's packet that went to lane
    /// `first` while the site's carrying tier is in doubt, over the warm standby lane
    /// of another uplink where it arrives first (of the same colour if one is),
    /// within [`STANDBY_COPY_RATE_BPS`].
    pub(super) fn send_standby_copy(
        &mut self,
        site: SiteIdx,
        first: LaneId,
        copy: BytesMut,
        now: Instant,
    ) {
        let len = copy.len();
        let Some(view) = self.copy_target(site, first, len, now, |_, l| l.stands_by()) else {
            return;
        };
        let s = &mut self.sites[site.0 as usize];
        let id = s.lanes[view].id;
        if !s
            .standby_copy_budget
            .take(len as u64, STANDBY_COPY_RATE_BPS, now)
        {
            return;
        }
        if self.send_copy(site, view, copy, now)
            && let Some(Some(l)) = self.lanes.get_mut(id.0 as usize)
        {
            l.counters.standby_copies += 1;
        }
    }
}
