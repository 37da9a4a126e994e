//! The engine's side of applications with deadlines (`core/deadline.rs`): each of
//! their packets counts for its flow, and while a site has such flows they are
//! reviewed often, against what the site's lanes carry.

use std::time::Duration;

use bytes::BytesMut;

use crate::core::deadline::Due;
use crate::core::lane::LaneView;
use crate::core::pacing_table::AppIdx;
use crate::core::packet::PacketInfo;
use crate::core::site::SiteIdx;
use crate::core::time::Instant;
use crate::core::wire::DATAGRAM_HEADER_LEN;

use super::DataPath;
use super::timers::Timer;

/// How often flows with deadlines are reviewed: a few times within the shortest
/// deadlines worth a gateway's help (tens of milliseconds), and at once when a new
/// one starts.
const REVIEW: Duration = Duration::from_millis(50);

/// What a site's lanes that are up carry, in bit/s: each its window per round trip,
/// or its uplink's rate where that is known.
pub(super) fn lanes_bps(lanes: &[LaneView]) -> f64 {
    lanes
        .iter()
        .filter(|v| v.up)
        .map(|v| match v.rate_kbps {
            Some(kbps) => kbps as f64 * 1000.0,
            None => v.cwnd as f64 * 8.0 / v.srtt.max(Duration::from_micros(100)).as_secs_f64(),
        })
        .sum()
}

impl DataPath {
    /// Counts a packet of a flow with a deadline; whether its flow is decelerated.
    pub(super) fn carry_deadline(
        &mut self,
        site: SiteIdx,
        app: AppIdx,
        due: Due,
        info: &PacketInfo,
        datagram: &BytesMut,
        now: Instant,
    ) -> bool {
        let data = info.data(&datagram[DATAGRAM_HEADER_LEN..]);
        let (decelerated, new) =
            self.pacing
                .carry_deadline(site, app, due, info.flow_key(), data, now);
        if new {
            self.timers.set(Timer::DeadlineReview, Some(now));
        }
        decelerated
    }

    /// Reviews every site's flows with deadlines; again in [`REVIEW`] while there
    /// are any.
    pub(super) fn review_deadlines(&mut self, now: Instant) {
        let elapsed = now.saturating_since(self.deadlines_reviewed_at);
        self.deadlines_reviewed_at = now;
        for (i, site) in self.sites.iter().enumerate() {
            if site.served {
                let lanes = lanes_bps(&site.lanes);
                self.pacing
                    .review_deadlines(SiteIdx(i as u32), lanes, elapsed, now);
            }
        }
        let next = self.pacing.has_deadline_flows().then(|| now + REVIEW);
        self.timers.set(Timer::DeadlineReview, next);
    }
}
