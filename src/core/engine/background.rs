//! The engine's side of background applications (`core/background.rs`): it samples
//! each site's lane queues while a site has one, and at the end of every control
//! interval hands the average to the applications' searches, which set their rates.

use std::time::Duration;

use crate::core::background::BackgroundSettings;
use crate::core::lane::{Colour, LaneView, longest_one_way};
use crate::core::site::SiteIdx;
use crate::core::time::Instant;

use super::DataPath;
use super::sites::lanes_of;
use super::timers::Timer;

/// How often the lanes' queues are sampled within a control interval.
const QUEUE_SAMPLE: Duration = Duration::from_millis(10);

/// The width of the buckets queue samples are counted in, and how many there are
/// (the last holds everything from 63.5 ms up).
const BUCKET: Duration = Duration::from_micros(500);
const BUCKETS: usize = 128;

/// A site's lane queue over a control interval's samples, counted in buckets: the
/// queue that stood, not its average. As CoDel does (it drops once the least sojourn
/// of an interval is above its target), a control interval is judged by a queue
/// that most of its samples show: its lowest quarter. A site's lanes hold bursts of
/// an application-limited foreground for a few milliseconds; their average, 2 to
/// 4 ms beside half the site's capacity of rate-limited downloads, held the
/// background at a fifth of the room left.
#[derive(Debug, Clone, Copy)]
pub(super) struct QueueSamples {
    buckets: [u16; BUCKETS],
    samples: u16,
}

impl Default for QueueSamples {
    fn default() -> QueueSamples {
        QueueSamples {
            buckets: [0; BUCKETS],
            samples: 0,
        }
    }
}

impl QueueSamples {
    fn add(&mut self, queue: Duration) {
        let bucket = (queue.as_micros() / BUCKET.as_micros()).min(BUCKETS as u128 - 1);
        self.buckets[bucket as usize] = self.buckets[bucket as usize].saturating_add(1);
        self.samples = self.samples.saturating_add(1);
    }

    /// The queue at least three quarters of the interval's samples showed (the
    /// bottom of its bucket), and a fresh start.
    fn take(&mut self) -> Duration {
        let quarter = self.samples / 4;
        let mut below = 0;
        let mut standing = Duration::ZERO;
        for (i, &n) in self.buckets.iter().enumerate() {
            below += n;
            if below > quarter {
                standing = BUCKET * i as u32;
                break;
            }
        }
        *self = QueueSamples::default();
        standing
    }
}

/// The queue of a site's lanes that are up beyond what AFMT means them to hold,
/// weighted by each lane's rate (its window per round trip): what a packet handed to
/// a lane now waits inside braid for the lane's window beyond the longest lane's
/// delay of the colour ([`LaneView::wait_beyond`]). A site with room on any lane
/// shows little: AFMT sends there. A full one shows its lanes' CoDel target (5 ms or
/// more): their windows are full, and the queue stands in braid. The queue at the
/// uplinks' bottlenecks is left out: the lanes' congestion controllers hold it near
/// their target whether the site is full or not (AFMT fills a short lane until its
/// packets arrive as late as the longest lane's), and beside half a site's capacity
/// of foreground it read 3 to 4 ms with the longest lane idle.
pub(super) fn lanes_queue(lanes: &[LaneView]) -> Duration {
    let (mut weighted, mut weights) = (0.0, 0.0);
    for colour in [Colour::Green, Colour::Blue] {
        let group = &lanes[lanes_of(lanes, colour)];
        let longest = longest_one_way(group);
        for v in group.iter().filter(|v| v.up) {
            let srtt = v.srtt.max(Duration::from_micros(100));
            let rate = v.cwnd as f64 / srtt.as_secs_f64();
            let queue = v.wait_beyond(v.drain_time(0, v.srtt), longest);
            weighted += rate * queue.as_secs_f64();
            weights += rate;
        }
    }
    if weights > 0.0 {
        Duration::from_secs_f64(weighted / weights)
    } else {
        Duration::ZERO
    }
}

impl DataPath {
    /// Searches with `settings` from `now` on (a reload changed them).
    pub fn handle_background_settings(&mut self, settings: BackgroundSettings, now: Instant) {
        self.background = settings;
        self.pacing.set_background_method(settings.method, now);
        self.timers.set(Timer::BackgroundRevise, None);
        self.arm_background(now);
    }

    /// Starts sampling and revising while some site has a background application,
    /// and stops once none has.
    pub(super) fn arm_background(&mut self, now: Instant) {
        if !self.pacing.has_background() {
            self.timers.set(Timer::BackgroundSample, None);
            self.timers.set(Timer::BackgroundRevise, None);
            return;
        }
        if self.timers.get(Timer::BackgroundRevise).is_none() {
            for site in &mut self.sites {
                site.background_queue = QueueSamples::default();
            }
            self.revised_at = now;
            self.timers.set(
                Timer::BackgroundRevise,
                Some(now + self.background.interval),
            );
            self.timers.set(Timer::BackgroundSample, Some(now));
        }
    }

    /// Samples every site's lane queue.
    pub(super) fn sample_background(&mut self, now: Instant) {
        for site in self.sites.iter_mut().filter(|s| s.served) {
            site.background_queue.add(lanes_queue(&site.lanes));
        }
        self.timers
            .set(Timer::BackgroundSample, Some(now + QUEUE_SAMPLE));
    }

    /// Ends a control interval: each site's background applications get their new
    /// rates.
    pub(super) fn revise_background(&mut self, now: Instant) {
        let elapsed = now.saturating_since(self.revised_at);
        self.revised_at = now;
        for (i, site) in self.sites.iter_mut().enumerate() {
            let queue = site.background_queue.take();
            // Other threads' sites have no applications here: nothing to revise.
            if site.served {
                self.pacing
                    .revise_background(SiteIdx(i as u32), queue, elapsed, now);
            }
        }
        self.timers.set(
            Timer::BackgroundRevise,
            Some(now + self.background.interval),
        );
        self.arm_background(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lane::LaneId;

    fn lane(id: u32, min_srtt: u64, srtt: u64, cwnd: u64, fill: u64) -> LaneView {
        LaneView {
            min_srtt: Duration::from_millis(min_srtt),
            srtt: Duration::from_millis(srtt),
            cwnd,
            fill,
            last_sent: Instant::from_nanos(1_000_000_000),
            ..LaneView::new(LaneId(id), Colour::Blue)
        }
    }

    #[test]
    fn an_interval_shows_the_queue_that_stood_not_its_bursts() {
        let ms = Duration::from_millis;
        let mut bursts = QueueSamples::default();
        for i in 0..50 {
            // A burst of 20 ms in every fifth sample: the queue stands at nothing.
            bursts.add(if i % 5 == 0 { ms(20) } else { Duration::ZERO });
        }
        assert_eq!(bursts.take(), Duration::ZERO);
        let mut standing = QueueSamples::default();
        for i in 0..50 {
            // 6 ms, with a sample in ten at nothing.
            standing.add(if i % 10 == 0 { Duration::ZERO } else { ms(6) });
        }
        assert_eq!(standing.take(), ms(6));
        assert_eq!(standing.take(), Duration::ZERO, "taken, it starts afresh");
        let mut long = QueueSamples::default();
        long.add(ms(500));
        assert_eq!(long.take(), BUCKET * (BUCKETS as u32 - 1));
    }

    #[test]
    fn a_site_with_room_shows_no_queue_and_a_full_one_its_lanes_queue() {
        // Two lanes at their path delays, nothing queued: no queue.
        let idle = [lane(0, 20, 20, 100_000, 0), lane(1, 40, 40, 100_000, 0)];
        assert_eq!(lanes_queue(&idle), Duration::ZERO);
        // The short lane queues 10 ms, up to the long one's delay, inside braid, as AFMT
        // means it to: still no queue.
        let striped = [
            lane(0, 20, 20, 100_000, 50_000),
            lane(1, 40, 40, 100_000, 0),
        ];
        assert_eq!(lanes_queue(&striped), Duration::ZERO);
        // A short lane 8 ms over its path delay at the bottleneck, the long one
        // idle: room (the lanes' controllers keep such queues whether the site is
        // full or not).
        let short = [lane(0, 20, 28, 100_000, 0), lane(1, 40, 40, 100_000, 0)];
        assert_eq!(lanes_queue(&short), Duration::ZERO);
        // Both windows full and more queued in braid: the short lane's packets wait
        // 20 ms (100 kB at 100 kB per 20 ms), 10 more than AFMT means; the long
        // one's 10 ms (25 kB at 100 kB per 40 ms): 10 ms.
        let full = [
            lane(0, 20, 20, 100_000, 100_000),
            lane(1, 40, 40, 100_000, 25_000),
        ];
        let q = lanes_queue(&full);
        assert!((9900..=10100).contains(&q.as_micros()), "{q:?}");
        // A lane that is down does not count: the short lane alone waits 20 ms
        // beyond its own path delay.
        let mut down = full;
        down[1].up = false;
        assert_eq!(lanes_queue(&down), Duration::from_millis(20));
    }
}
