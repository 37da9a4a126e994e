//! Variation reports: each end of a lane tells the other how much the uplink's delay
//! varies as it learned from its own lone packets (`core/lane_cc/variation.rs`), so
//! that the lane allows the variation as soon as either end knows it.
//!
//! Why: both ends measure the same round trip, but each from a few dozen lone
//! packets, and the exit, which sends the downloads, learned later and less: over
//! the testbed's `vary10` uplink (20 ms each way), the entry's lane knew 29 ms a
//! second after the lanes came up, the exit's 18 ms only after three, and lost it
//! again for a moment when its few samples spread less than the noise floor, which
//! cut the lane each time (docs/design/lane-congestion-control.md).

use std::time::Duration;

use bytes::Bytes;

use crate::core::lane::LaneId;
use crate::core::time::Instant;
use crate::core::wire::VariationReport;

use super::{DataPath, LaneService};

/// A learned variation that moved this far from the one last reported is reported
/// again: what the lone round trips say moves by a millisecond or two with every
/// new one, which changes nothing the cap does.
const REPORT_CHANGE: Duration = Duration::from_millis(2);
/// A variation is reported again this often while it stands, in case the report
/// was lost (QUIC does not send a DATAGRAM frame again).
const REPORT_REFRESH: Duration = Duration::from_secs(1);

impl DataPath {
    /// The lane's own end learned `learned` (zero: none): reports it to the peer when
    /// it is new, moved by [`REPORT_CHANGE`] or more, or was last reported
    /// [`REPORT_REFRESH`] ago while not zero.
    pub(super) fn report_variation(&mut self, lane: LaneId, learned: Duration, now: Instant) {
        let Some(Some(l)) = self.lanes.get(lane.0 as usize) else {
            return;
        };
        let (reported, at) = l.variation_reported;
        let changed =
            reported.abs_diff(learned) >= REPORT_CHANGE || reported.is_zero() != learned.is_zero();
        let stale =
            !learned.is_zero() && at.is_none_or(|at| now.saturating_since(at) >= REPORT_REFRESH);
        if !(changed || stale) {
            return;
        }
        let datagram = Bytes::copy_from_slice(&VariationReport { spread: learned }.encode());
        if self.hand_control(lane, datagram, now)
            && let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize)
        {
            l.variation_reported = (learned, Some(now));
        }
    }

    /// The peer's end of `lane` reports what it learned: the shell gives it to the
    /// lane's congestion controller.
    pub(super) fn peer_variation(&mut self, lane: LaneId, report: VariationReport) {
        self.lane_services.push_back((
            lane,
            LaneService::PeerVariation {
                spread: report.spread,
            },
        ));
    }
}
