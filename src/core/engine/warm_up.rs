//! Warm-up padding: blue lanes of unknown rate open their windows with padding, as
//! they come up and while a busy lane of their site queues.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::lane_cc::MAX_START_WINDOW;
use crate::core::site::SiteIdx;
use crate::core::tiers::Tiers;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, PROBE_PADDING};

use super::lanes::Lane;
use super::sites::view_mut;
use super::timers::Timer;
use super::{DataPath, SAMPLE_INTERVAL, Transmit};

/// How far ahead a lane that warms up keeps padding queued (see
/// [`DataPath::warm_up`]): two samples' worth, so that quinn does not run out between
/// two, and little enough that a packet put behind it hardly waits.
pub(super) const WARM_AHEAD: Duration = Duration::from_millis(2);

impl DataPath {
    /// Opens the window of a blue lane still in its first slow start before traffic
    /// needs it: keeps what the lane sends in [`WARM_AHEAD`] at slow start's pace
    /// (twice its window per round trip) queued with padding, so that quinn's window
    /// grows on every acknowledgement, until the lane's delay cap or a loss cuts it
    /// (which ends the first slow start) or it reaches [`MAX_START_WINDOW`].
    ///
    /// Why: striping weighs a lane by its window, and quinn's first 14,720 bytes say
    /// nothing of what a path carries: a long lane looked slow and got nothing while
    /// the site's first flows overran the short ones' queues, and CUBIC then spent
    /// seconds regrowing from that first loss (docs/design/afmt-and-striping.md).
    /// Blue only: green lanes carry sparse low-delay packets and are never striped,
    /// and their padding would only crowd the same uplinks. Not while the site is
    /// quiet (`quiet.rs`): an exit's idle sites would pad thousands of lanes for
    /// traffic that does not come; the site's first packet makes it active, and its
    /// lanes warm up from their next sample.
    pub(super) fn warm_up(&mut self, lane: LaneId, now: Instant) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        let site = &self.sites[l.site.0 as usize];
        if !self.warm_up_lanes
            || !l.in_first_slow_start()
            || site.quiet(now)
            || stands_in(l, &site.tiers)
        {
            return;
        }
        // A lane of a better tier than the one carrying is about to take the traffic
        // back (after the tiers' hold): it opens its window meanwhile, not once the
        // traffic is on it. A lower tier's lane stands by unpadded: a backup may
        // be billed by the byte.
        let returning = l.healthy
            && self.sites[l.site.0 as usize]
                .tiers
                .carrying()
                .tier
                .is_some_and(|active| l.policy.priority < active);
        let Some(view) = view_mut(&mut self.sites, l.site, lane) else {
            return;
        };
        if !(view.up || returning) || view.colour != Colour::Blue || view.cwnd >= MAX_START_WINDOW {
            return;
        }
        self.timers
            .set(Timer::WarmSample, Some(now.saturating_add(SAMPLE_INTERVAL)));
        let len = (view.max_datagram + DATAGRAM_HEADER_LEN).min(PROBE_PADDING.len());
        // Never more than a window (over a path shorter than WARM_AHEAD, slow start
        // sends no more than that per round trip), nor than half what braid queues
        // for a lane, so that the site's packets always find room behind it.
        let at_pace =
            u128::from(view.cwnd) * 2 * WARM_AHEAD.as_nanos() / view.srtt.as_nanos().max(1);
        let ahead = u64::try_from(at_pace)
            .unwrap_or(u64::MAX)
            .min(view.cwnd)
            .min(self.lane_queue_limit / 2)
            .max(2 * len as u64);
        while view.fill < ahead {
            let due = pad(l, view, len, now, &mut self.transmits);
            self.timers.earliest(Timer::StallCheck, due);
        }
    }

    /// A packet of `len` bytes was queued behind others on the site's lane at index
    /// `busy`: hands a probe as long, padded with zeros, to each other lane of `group`
    /// that is still in its first slow start, has nothing queued, and whose window
    /// carries less in a round trip than the busy lane's. The receiver drops it (see
    /// [`super::wire::is_probe`]).
    ///
    /// Why: a lane's window grows only while it is full (quinn calls a connection that
    /// ran out of data application-limited), and striping fills a lane only once it
    /// delivers a packet as early as the others do: by its window per round trip. So
    /// a long lane of unknown rate stayed at a few packets' window while one
    /// download ramped up over the shorter ones, and the download met its first loss
    /// where it overran them (docs/design/afmt-and-striping.md). Padding fills that
    /// lane's window while the site has more to send than the others take, so it opens
    /// at its uplink's pace, and no packet of the site waits behind it: the padding
    /// only goes where nothing is queued, and striping counts it as queued. It stops
    /// for good at the lane's first window reduction or loss, and meanwhile once its
    /// window matches the busy lane's: a long lane whose window never met congestion
    /// stayed eligible for padding for a whole download without that rule.
    pub(super) fn open_lanes(
        &mut self,
        site_idx: SiteIdx,
        group: std::ops::Range<usize>,
        busy: usize,
        len: usize,
        now: Instant,
    ) {
        let len = len.min(PROBE_PADDING.len());
        let site = &mut self.sites[site_idx.0 as usize];
        let busy = site.lanes[busy];
        for view in &mut site.lanes[group] {
            if !view.up
                || view.id == busy.id
                || view.fill > 0
                || view.max_datagram + DATAGRAM_HEADER_LEN < len
            {
                continue;
            }
            let Some(Some(lane)) = self.lanes.get_mut(view.id.0 as usize) else {
                continue;
            };
            if !lane.in_first_slow_start() || stands_in(lane, &site.tiers) {
                continue;
            }
            // cwnd / srtt against the busy lane's.
            let carries = u128::from(view.cwnd) * busy.srtt.as_nanos();
            if carries >= u128::from(busy.cwnd) * view.srtt.as_nanos() {
                continue;
            }
            let due = pad(lane, view, len, now, &mut self.transmits);
            self.timers.earliest(Timer::StallCheck, due);
        }
    }
}

/// Whether `lane` is of a tier below the best its site ever had up: a backup, which
/// carries only while the better tiers are down (or full), is not padded. It may be
/// billed by the byte, and it takes over from dead lanes what they carried: the
/// flows moved onto it need its window, which they open themselves. Padded as it
/// took over, it queued 200-400 KB in its first round trips, its window fell to two
/// packets, and a call over it stopped for up to 350 ms.
fn stands_in(lane: &Lane, tiers: &Tiers) -> bool {
    tiers
        .best_ever()
        .is_some_and(|best| lane.policy.priority > best)
}

/// Hands `lane` a probe of `len` bytes of padding to open its window, counted as
/// queued; returns when the engine must look at the lane's wait for an answer.
pub(super) fn pad(
    lane: &mut Lane,
    view: &mut LaneView,
    len: usize,
    now: Instant,
    transmits: &mut VecDeque<Transmit>,
) -> Option<Instant> {
    let due = lane.hand(len as u64, view.srtt, Duration::ZERO, now);
    lane.counters.opening_bytes += len as u64;
    view.fill += len as u64;
    transmits.push_back(Transmit {
        lane: view.id,
        datagram: Bytes::from_static(&PROBE_PADDING[..len]),
    });
    due
}
