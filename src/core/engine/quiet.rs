//! Quiet sites and what an idle lane costs. A lane that carries nothing is kept
//! alive by keep-alives and watched through samples; at an exit serving a thousand
//! sites, six thousand lanes doing so every 100 ms took more than both cores
//! (docs/scale-out.md). Most sites are idle most of the time, so a lane's liveness is
//! watched closely only while its site carries packets:
//!
//! - A site is *active* while a packet of its flows crossed either way within
//!   [`QUIET_AFTER`]; then each end sends a keep-alive (a probe) on every lane
//!   that sent nothing for [`KEEP_ALIVE`], samples it every
//!   [`IDLE_SAMPLE_INTERVAL`], and gives a silent idle lane up after the lane stall
//!   bound (400 ms), as before.
//! - A *quiet* site's lanes are kept alive by QUIC's own keep-alive, from the entry
//!   only, every [`QUIET_KEEP_ALIVE`]; they are sampled every
//!   [`QUIET_SAMPLE_INTERVAL`] and given up after [`QUIET_STALL`] of silence.
//! - An entry's site starts active, an exit's sites quiet ([`Site::start`]).
//! - The first packet makes the site active at both ends, each when it sees it:
//!   from then on a lane not heard within the stall bound is given up, counted
//!   from that instant (no lane is given up for the quiet keep-alive's slower pace).
//!   A packet that meets a dead lane of a quiet site is answered by nobody, and the
//!   lane is given up after the failed exchanges that give up a lane carrying
//!   packets ([`super::liveness`]), a few round trips.

use std::time::Duration;

use bytes::Bytes;

use crate::core::lane::LaneId;
use crate::core::site::SiteIdx;
use crate::core::time::Instant;
use crate::core::wire::PROBE;

use super::liveness::KEEP_ALIVE;
use super::sites::Site;
use super::timers::Timer;
use super::{DataPath, IDLE_SAMPLE_INTERVAL, Role, SAMPLE_INTERVAL, Transmit};

/// A site none of whose packets crossed for this long is quiet.
pub const QUIET_AFTER: Duration = Duration::from_secs(10);
/// QUIC's keep-alive on the entry's lanes: what keeps a quiet site's lanes open and
/// shows both ends that they live. The exit's lanes send none of their own.
pub const QUIET_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// A quiet site's lane not heard for this long is given up: two keep-alives and
/// their acknowledgements missed, before QUIC's idle timeout (3 s) closes it.
pub const QUIET_STALL: Duration = Duration::from_millis(2500);
/// How often a quiet site's idle lanes are sampled: as often as their keep-alives
/// come. A silent one is seen within a second of the stall bound, and its connection
/// closes at QUIC's idle timeout (3 s) in any case.
pub const QUIET_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// How often an active site's lanes are looked at for a keep-alive: each goes out
/// between [`KEEP_ALIVE`] and this much later after the lane last sent.
const KEEP_ALIVE_SCAN: Duration = Duration::from_millis(25);

impl Site {
    /// An entry's site starts active, as if a packet had crossed as it started: the
    /// router just came up and its lanes warm up for the traffic to come. An exit's
    /// sites start quiet: an exit restarting under a thousand sites must not meet
    /// their reconnection with keep-alives and padding on every lane.
    pub(super) fn start(&mut self, role: Role) {
        if role == Role::Entry {
            self.carried_at = Some(Instant::ZERO);
        }
    }

    /// True if none of the site's packets crossed within [`QUIET_AFTER`].
    pub(super) fn quiet(&self, now: Instant) -> bool {
        self.carried_at
            .is_none_or(|at| now.saturating_since(at) >= QUIET_AFTER)
    }

    /// The instant from which a lane of the site last heard at `heard_at` counts as
    /// silent while idle: `stall` after it while the site is active, but never
    /// sooner than `stall` after the site became active, nor later than
    /// [`QUIET_STALL`] after it.
    pub(super) fn idle_bound(&self, heard_at: Instant, stall: Duration, now: Instant) -> Instant {
        let quiet_bound = heard_at.saturating_add(QUIET_STALL);
        if self.quiet(now) {
            return quiet_bound;
        }
        heard_at
            .max(self.active_since)
            .saturating_add(stall)
            .min(quiet_bound)
    }

    /// How long the site's idle lanes go between samples.
    pub(super) fn sample_interval(&self, now: Instant) -> Duration {
        if self.quiet(now) {
            QUIET_SAMPLE_INTERVAL
        } else {
            IDLE_SAMPLE_INTERVAL
        }
    }
}

impl DataPath {
    /// A packet of site `site_idx` crossed at `now`: the site is active, and a quiet
    /// one's lanes start sending keep-alives.
    pub(super) fn site_carried(&mut self, site_idx: SiteIdx, now: Instant) {
        let site = &mut self.sites[site_idx.0 as usize];
        if site.quiet(now) {
            site.active_since = now;
            self.timers.earliest(Timer::KeepAlive, Some(now));
        }
        site.carried_at = Some(now);
    }

    /// Sends a keep-alive on each lane of an active site that sent nothing for
    /// [`KEEP_ALIVE`]; looks again in [`KEEP_ALIVE_SCAN`] while a site is active.
    pub(super) fn send_keep_alives(&mut self, now: Instant) {
        self.timers.set(Timer::KeepAlive, None);
        let mut active = false;
        for (i, slot) in self.lanes.iter_mut().enumerate() {
            let Some(l) = slot else { continue };
            if l.closed || self.sites[l.site.0 as usize].quiet(now) {
                continue;
            }
            active = true;
            if l.handed_datagrams != l.keep_alive_seen {
                (l.keep_alive_seen, l.sent_at) = (l.handed_datagrams, now);
            } else if now.saturating_since(l.sent_at) >= KEEP_ALIVE {
                let keep_alive = Bytes::from_static(&PROBE);
                l.hand_unawaited(keep_alive.len() as u64);
                (l.keep_alive_seen, l.sent_at) = (l.handed_datagrams, now);
                self.transmits.push_back(Transmit {
                    lane: LaneId(i as u32),
                    datagram: keep_alive,
                });
            }
        }
        if active {
            self.timers
                .set(Timer::KeepAlive, Some(now.saturating_add(KEEP_ALIVE_SCAN)));
        }
    }

    /// The lanes the shell should sample now, into `out` (emptied first): those that
    /// sent or received since their last sample, or wait for an answer or have
    /// packets queued, at most every [`SAMPLE_INTERVAL`]; every other lane once its
    /// site's idle interval passed, looked for every [`IDLE_SAMPLE_INTERVAL`].
    /// Sampling a lane takes quinn's connection lock: an exit's thousands of idle
    /// lanes are not sampled on every wake-up.
    pub fn lanes_to_sample(&mut self, now: Instant, out: &mut Vec<LaneId>) {
        out.clear();
        let busy_due =
            self.sample_due || now.saturating_since(self.busy_sampled_at) >= SAMPLE_INTERVAL;
        if busy_due && !self.busy.is_empty() {
            self.busy_sampled_at = now;
            self.sample_due = false;
            let lanes = &mut self.lanes;
            self.busy.retain(|id| {
                let Some(Some(l)) = lanes.get_mut(id.0 as usize) else {
                    return false;
                };
                l.listed_busy = l.busy();
                if l.listed_busy {
                    out.push(*id);
                }
                l.listed_busy
            });
        }
        if !self.timers.is_due(Timer::IdleSample, now) {
            return;
        }
        let mut any = false;
        for (i, slot) in self.lanes.iter().enumerate() {
            let Some(l) = slot else { continue };
            any = true;
            let interval = self.sites[l.site.0 as usize].sample_interval(now);
            if !l.listed_busy && now.saturating_since(l.sampled_at) >= interval {
                out.push(LaneId(i as u32));
            }
        }
        let next = any.then(|| now.saturating_add(IDLE_SAMPLE_INTERVAL));
        self.timers.set(Timer::IdleSample, next);
    }

    /// Lists `lane` among those sampled at every round: it sent or received.
    pub(super) fn touch_lane(&mut self, lane: LaneId) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        l.touched = true;
        if !l.listed_busy {
            l.listed_busy = true;
            self.busy.push(lane);
        }
    }

    /// The lanes with packets that may have left braid's queues since the last
    /// wake-up, into `out`: what the shell passes [`DataPath::handle_lane_dequeued`]
    /// for between samples.
    pub fn lanes_sending(&self, out: &mut Vec<LaneId>) {
        out.clear();
        out.extend_from_slice(&self.busy);
    }
}
