//! CoDel (RFC 8289) for a lane's queue inside braid (and, fitted to its rate, for an
//! application's pacer queue, [`CoDel::for_rate`]): the queue is managed by how long
//! packets wait in it, not by how many bytes it holds, so that a slow uplink does not
//! hide a quarter of a second of queue behind a byte limit sized for a fast one.
//!
//! braid's queue for a lane is the send task's channel plus quinn's datagram buffer,
//! both in the shell and neither timestamped. So the sojourn time is estimated when a
//! packet arrives, from the bytes ahead of it and the rate the lane drains at (its
//! congestion window per SRTT, as AFMT weighs lanes), and the packet that CoDel would
//! drop at the head is dropped at the tail instead, as PIE does: the inner transport
//! hears of the queue one queue delay later, at most the target plus a packet.
//!
//! CoDel's rule: a queue whose sojourn time stayed above a target ([`lane_target`] for a
//! lane's queue, [`shaper_target`] for a shaper's) for a whole interval is a standing
//! queue; drop one packet, then the next ones at intervals shrinking with the square
//! root of the drops so far, until the sojourn time falls
//! below the target. A burst that drains within the interval is never dropped.

use std::time::Duration;

use super::time::Instant;

/// Queueing delay a queue may keep standing: CoDel's default, a few percent of
/// the interval, well below the round trips the inner flows see.
pub const TARGET: Duration = Duration::from_millis(5);

/// Queueing delay a lane's queue may keep standing at a site whose longest lane is
/// `longest_one_way` away: 5 % of the round trip of a flow striped over the site's
/// lanes, as a shaper's queue keeps ([`shaper_target`]). CoDel's 5 ms while every
/// lane is within 25 ms, 8.5 ms for a lane 60 ms away, at most 12.5 ms.
///
/// Why: the lanes' queues are the inner flows' bottleneck, and a standing queue is
/// what keeps the uplinks busy while a flow whose window was cut grows it back.
/// RFC 8289 sizes the target at 5 to 10 % of the flows' round trip; CoDel's 5 ms is
/// 5 % of its 100 ms, but far less of the round trip of downloads striped over far
/// lanes. Each drop cuts what they send, and a 5 ms queue drains long before CUBIC
/// grows it back, so the uplinks idle (docs/design/lane-queues.md).
pub fn lane_target(longest_one_way: Duration) -> Duration {
    shaper_target(shaper_interval(longest_one_way))
}

/// The largest inner packet an application's pacer queue is judged by: a queue
/// holding one is never too long, and its target is at least two of them.
pub const PACED_MTU: u64 = 1500;

/// How long an application's pacer queue may stand above its target before packets
/// are dropped. An application's queue fills in bursts that end by themselves, a
/// page load in its slow start for as long as the page takes (500 kB, 0.4 s at 10
/// Mbit/s); with CoDel's 100 ms such loads were dropped from, and the web class of
/// the pacing paper's Section 7 (`benches/section7.rs`, 20 applications) got 7.5 of
/// its 9.9 Mbit/s. A queue that stands longer than such a burst is a long flow's,
/// which would otherwise keep the whole queue limit standing.
pub const APP_INTERVAL: Duration = Duration::from_millis(500);

/// How long the delay may stay above the target before packets are dropped: a worst
/// case round trip of the inner flows, CoDel's default.
pub const INTERVAL: Duration = Duration::from_millis(100);
/// The interval of a lane's queue over a path of `min_rtt`: the path's round trip,
/// the least the inner flows through it see, between half CoDel's default and its
/// default. Flows through a short path see round trips far below CoDel's 100 ms, and
/// at that interval they keep a standing queue several times the target; flows over
/// a longer path need the longer interval to keep their windows
/// (docs/design/lane-queues.md).
pub fn lane_interval(min_rtt: Duration) -> Duration {
    min_rtt.clamp(INTERVAL / 2, INTERVAL)
}

/// The longest a packet may expect to wait in a lane's queue inside braid: beyond it
/// packets are dropped at once, whatever CoDel's state. CoDel needs an interval to
/// notice a queue and then drops one packet at a time, while ten TCP flows in slow
/// start double their windows every round trip; without a bound in time their first
/// round trips would fill the byte limit, a quarter of a second on a 10 Mbit/s uplink.
pub const MAX_SOJOURN: Duration = Duration::from_millis(50);

/// The bound of a lane's queue over a path of `min_rtt`: half the round trip, between
/// 30 ms and [`MAX_SOJOURN`]. Flows over a short path refill a queue within a few
/// of their round trips, so a long bound there only lengthens what other flows wait
/// (docs/design/lane-queues.md).
pub fn lane_max_sojourn(min_rtt: Duration) -> Duration {
    (min_rtt / 2).clamp(MAX_SOJOURN * 3 / 5, MAX_SOJOURN)
}

/// A packet expected to wait `sojourn` in a queue holding `backlog` bytes is past
/// the queue's `bound` and dropped at once ([`AqmDrop::TooLate`]); a queue holding
/// at most one packet of `mtu` bytes never is. Striping asks it ahead of a lane's
/// queue (`LaneView::past_bound`), to send the packet where it is not.
pub fn past_bound(sojourn: Duration, bound: Duration, backlog: u64, mtu: u64) -> bool {
    sojourn > bound && backlog > mtu
}

/// The longest interval of a shaper's queue.
const MAX_SHAPER_INTERVAL: Duration = Duration::from_millis(250);

/// The interval of the queue of a shaper whose site's longest lane is
/// `longest_one_way` away: the longest round trip of the flows through it, as RFC 8289
/// asks, plus the bound. A flow striped over the site's lanes is resequenced to the
/// longest, both ways, and hears of a drop here, made as the packet arrives, only as
/// late as the packet would have left. With CoDel's 100 ms, one download over paths
/// 10, 30 and 60 ms away had its window cut twice a congestion episode, as the first
/// drop had not reached its sender before the second. At least CoDel's default, at
/// most 250 ms.
pub fn shaper_interval(longest_one_way: Duration) -> Duration {
    striped_round_trip(longest_one_way).clamp(INTERVAL, MAX_SHAPER_INTERVAL)
}

/// The longest round trip of a flow striped over a site's lanes, the longest
/// `longest_one_way` away: it is resequenced to the longest lane both ways, and may
/// wait in braid's queue up to the bound.
fn striped_round_trip(longest_one_way: Duration) -> Duration {
    2 * longest_one_way + MAX_SOJOURN
}

/// How long, once a lane's CoDel dropped a packet of a flow the receiver
/// resequences, no lane of the site drops another packet of that flow: two round
/// trips of such a flow ([`shaper_interval`]). A flow striped over the site's lanes
/// hears of the drop one of those later, and the queue it built meanwhile drains
/// within another. Each lane keeps its own CoDel, at an interval of its own path, so
/// one striped download meets drops on several lanes within one of its round trips,
/// the later ones past its recovery of the first, and has its window cut again for
/// each; with one round trip between drops, the second still cut it again. Kept per
/// flow: kept per site and colour, many downloads striped over
/// the same uplinks share too few drops, and their queue stands longer
/// (docs/design/lane-queues.md). What the site's striped flows meet together is
/// [`StripedDrops`].
pub fn resequenced_drop_spacing(longest_one_way: Duration) -> Duration {
    2 * shaper_interval(longest_one_way)
}

/// When the lanes' CoDel may next drop a packet of any flow a site's receiver
/// resequences: CoDel's control law over all of them, at their round trip.
///
/// Why: each lane keeps its own CoDel, at its own path's interval, and flows striped
/// over every lane reach each one: in one congestion episode every download lost a
/// packet, mostly to the shortest lane's CoDel and before the first drop could slow
/// its sender, and windows cut together cut what the downloads sent while CUBIC grew
/// them back. One drop, then a round trip for it to take effect, then drops ever
/// closer while the queue still stands: a few flows with large windows are cut one at
/// a time, and many with small windows still meet as many drops as they need, where
/// a fixed spacing kept their queue standing longer (docs/design/lane-queues.md).
#[derive(Debug, Clone, Default)]
pub struct StripedDrops {
    /// No such drop before this.
    after: Instant,
    /// The last such drop.
    last: Instant,
    /// Drops in the current run, each within two round trips of the one before.
    count: u32,
}

impl StripedDrops {
    /// The earliest the next drop of a resequenced flow may come.
    pub fn not_before(&self) -> Instant {
        self.after
    }

    /// A lane dropped a packet of a resequenced flow at `now`, the site's longest
    /// lane `longest_one_way` away: the next waits a round trip of the striped flows,
    /// divided by the square root of the drops in this run.
    pub fn dropped(&mut self, now: Instant, longest_one_way: Duration) {
        let round_trip = striped_round_trip(longest_one_way);
        let in_run = self.count > 0 && now.saturating_since(self.last) < 2 * round_trip;
        self.count = if in_run {
            self.count.saturating_add(1)
        } else {
            1
        };
        self.last = now;
        self.after = control_law(now, round_trip, self.count);
    }
}

/// The target of a shaper's queue of `interval`: 5 % of it, as RFC 8289 advises (5 to
/// 10 %), so CoDel's 5 ms at its 100 ms. A single flow over a long path keeps its
/// window above the path's round trip only if the queue may stand a little longer.
pub fn shaper_target(interval: Duration) -> Duration {
    interval / 20
}

/// Why a packet should be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AqmDrop {
    /// It would wait longer than the queue's bound ([`MAX_SOJOURN`] by default).
    TooLate,
    /// CoDel's rule: the queue has stood above its target for an interval.
    Standing,
}

/// CoDel's state for one queue.
#[derive(Debug, Clone)]
pub struct CoDel {
    /// The standing queue's sojourn time the queue may keep.
    target: Duration,
    /// How long the queue may stand above the target before packets are dropped.
    interval: Duration,
    /// The longest a packet may expect to wait: beyond it, it is dropped at once.
    max_sojourn: Duration,
    /// When the sojourn time, above the target since, will have been for an interval.
    first_above: Option<Instant>,
    /// In the dropping state: the queue has stood for an interval and not drained.
    dropping: bool,
    /// When the next packet is dropped while dropping.
    drop_next: Instant,
    /// Drops in this dropping state, and in the last one when it began.
    count: u32,
    last_count: u32,
}

impl Default for CoDel {
    /// CoDel with its default [`INTERVAL`], bounded at [`MAX_SOJOURN`].
    fn default() -> CoDel {
        CoDel::new(TARGET, INTERVAL, MAX_SOJOURN)
    }
}

impl CoDel {
    fn new(target: Duration, interval: Duration, max_sojourn: Duration) -> CoDel {
        CoDel {
            target,
            interval,
            max_sojourn,
            first_above: None,
            dropping: false,
            drop_next: Instant::ZERO,
            count: 0,
            last_count: 0,
        }
    }

    /// CoDel for the queue of a lane over a path of `min_rtt`.
    pub fn for_lane(min_rtt: Duration) -> CoDel {
        CoDel::new(TARGET, lane_interval(min_rtt), lane_max_sojourn(min_rtt))
    }

    /// CoDel for an application's pacer queue at `rate_bps` (`core/pacer.rs`),
    /// bounded only by the queue's bytes ([`CoDel::fit_rate`]).
    pub fn for_rate(rate_bps: u64) -> CoDel {
        let mut codel = CoDel::new(TARGET, INTERVAL, Duration::MAX);
        codel.fit_rate(rate_bps);
        codel
    }

    /// Fits the target and interval of an application's pacer queue to its rate,
    /// now `rate_bps`: CoDel's 5 ms, or two full packets' time at a rate too slow to
    /// send them in 5 ms (RFC 8289 §4.4: the target at least a packet's
    /// transmission), and an interval of [`APP_INTERVAL`], or twenty times the
    /// target where that is longer. A TCP flow paced at 1 Mbit/s keeps two packets
    /// queued whatever its window, and at 64 kbit/s one packet takes 190 ms: a 5 ms
    /// target would drop such flows' packets for as long as they run.
    pub fn fit_rate(&mut self, rate_bps: u64) {
        let two_packets = match rate_bps {
            0 => Duration::ZERO,
            bps => Duration::from_nanos(2 * PACED_MTU * 8 * 1_000_000_000 / bps),
        };
        self.target = TARGET.max(two_packets);
        self.interval = APP_INTERVAL.max(self.target * 20);
    }

    /// Fits the interval and the bound to the lane's path, now `min_rtt` long.
    pub fn fit_lane(&mut self, min_rtt: Duration) {
        self.interval = lane_interval(min_rtt);
        self.max_sojourn = lane_max_sojourn(min_rtt);
    }

    /// Fits the target of a lane's queue to the site's longest lane, now
    /// `longest_one_way` away ([`lane_target`]).
    pub fn fit_striped_paths(&mut self, longest_one_way: Duration) {
        self.target = lane_target(longest_one_way);
    }

    /// Fits the interval and target of a shaper's queue to the site's longest lane,
    /// now `longest_one_way` away.
    pub fn fit_shaper(&mut self, longest_one_way: Duration) {
        self.interval = shaper_interval(longest_one_way);
        self.target = shaper_target(self.interval);
    }

    /// Decides about a packet arriving at a queue whose packets wait `sojourn` and
    /// which holds `backlog` bytes: the queue's bound first, then CoDel's rule. A drop
    /// CoDel's rule makes due is not made before `not_before()`, asked only then (a
    /// packet spared that way leaves CoDel's state as it was). A queue holding at most
    /// one packet of `mtu` bytes is never too long.
    pub fn verdict(
        &mut self,
        sojourn: Duration,
        backlog: u64,
        mtu: u64,
        now: Instant,
        not_before: impl FnOnce() -> Instant,
    ) -> Option<AqmDrop> {
        if past_bound(sojourn, self.max_sojourn, backlog, mtu) {
            Some(AqmDrop::TooLate)
        } else if self.should_drop(sojourn, backlog, mtu, now, not_before) {
            Some(AqmDrop::Standing)
        } else {
            None
        }
    }

    /// CoDel's rule alone: decides about a packet arriving at a queue whose packets wait `sojourn` and
    /// which holds `backlog` bytes: true when it should be dropped, never before
    /// `not_before()`. A queue holding at
    /// most one packet of `mtu` bytes is never above the target (the sojourn of one
    /// packet on a slow link is its serialisation, not a queue).
    fn should_drop(
        &mut self,
        sojourn: Duration,
        backlog: u64,
        mtu: u64,
        now: Instant,
        not_before: impl FnOnce() -> Instant,
    ) -> bool {
        let ok_to_drop = if sojourn < self.target || backlog <= mtu {
            self.first_above = None;
            false
        } else {
            match self.first_above {
                None => {
                    self.first_above = Some(now.saturating_add(self.interval));
                    false
                }
                Some(at) => now >= at,
            }
        };
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
                return false;
            }
            if now < self.drop_next || now < not_before() {
                return false;
            }
            self.count = self.count.saturating_add(1);
            self.drop_next = control_law(self.drop_next, self.interval, self.count);
            return true;
        }
        if !ok_to_drop || now < not_before() {
            return false;
        }
        self.dropping = true;
        // A queue that stood again soon after the last dropping state ended starts
        // where that one left off, less the drops that ended it: the drop rate that
        // controlled it last time is the best guess now.
        let delta = self.count.saturating_sub(self.last_count);
        let recently = now.saturating_since(self.drop_next) < 16 * self.interval;
        self.count = if delta > 1 && recently { delta } else { 1 };
        self.last_count = self.count;
        self.drop_next = control_law(now, self.interval, self.count);
        true
    }

    /// The queue emptied: whatever stood before has drained.
    pub fn drained(&mut self) {
        self.first_above = None;
        self.dropping = false;
    }

    /// True while the queue has stood for an interval and packets are being dropped.
    #[cfg(test)]
    fn dropping(&self) -> bool {
        self.dropping
    }
}

/// When the next drop is due: an interval divided by the square root of the drops so
/// far, so the drop rate grows until the senders slow down enough.
fn control_law(from: Instant, interval: Duration, count: u32) -> Instant {
    let spacing = interval.div_f64(f64::from(count.max(1)).sqrt());
    from.saturating_add(spacing)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u64 = 1400;

    fn ms(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// Offers a packet every millisecond from `from` to `to` (exclusive) at a queue
    /// that `sojourn(t)` describes; answers the instants of the drops.
    fn run(codel: &mut CoDel, from: u64, to: u64, sojourn: impl Fn(u64) -> Duration) -> Vec<u64> {
        (from..to)
            .filter(|&t| codel.should_drop(sojourn(t), 20 * MTU, MTU, ms(t), || Instant::ZERO))
            .collect()
    }

    #[test]
    fn an_application_queues_target_allows_two_packets_at_its_rate() {
        let video = CoDel::for_rate(5_000_000);
        assert_eq!((video.target, video.interval), (TARGET, APP_INTERVAL));
        // 64 kbit/s: a 1500-byte packet takes 187.5 ms.
        let terminal = CoDel::for_rate(64_000);
        assert_eq!(terminal.target, Duration::from_millis(375));
        assert_eq!(terminal.interval, Duration::from_millis(7_500));
        let mut refitted = terminal;
        refitted.fit_rate(5_000_000);
        assert_eq!(refitted.target, TARGET);
    }

    #[test]
    fn a_queue_below_the_target_is_never_dropped_from() {
        let mut codel = CoDel::default();
        assert!(run(&mut codel, 0, 10_000, |_| Duration::from_micros(4_900)).is_empty());
    }

    #[test]
    fn a_burst_that_drains_within_the_interval_is_never_dropped_from() {
        // 90 ms of a 50 ms queue, then a second below the target, again and again.
        let mut codel = CoDel::default();
        let burst = |t: u64| Duration::from_millis(if t % 1000 < 90 { 50 } else { 1 });
        assert!(run(&mut codel, 0, 10_000, burst).is_empty());
    }

    #[test]
    fn a_standing_queue_is_dropped_from_after_an_interval_ever_faster() {
        let mut codel = CoDel::default();
        let drops = run(&mut codel, 0, 1_000, |_| Duration::from_millis(20));
        // The first drop once the queue stood for an interval (it was first seen at 0).
        assert_eq!(drops[0], 100);
        // Then at 100 ms / sqrt(n) spacings: 100, 70.7, 57.7, 50, ...
        let spacings: Vec<u64> = drops.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&spacings[..4], &[100, 71, 58, 50]);
        assert!(spacings.windows(2).all(|w| w[1] <= w[0]), "{spacings:?}");
        assert!(codel.dropping());
    }

    #[test]
    fn a_lanes_interval_is_its_path_round_trip_between_50_and_100_ms() {
        let ms = Duration::from_millis;
        assert_eq!(lane_interval(Duration::ZERO), ms(50));
        assert_eq!(lane_interval(ms(75)), ms(75));
        assert_eq!(lane_interval(ms(240)), ms(100));
        // A lane 10 ms away drops from a standing queue after 50 ms, not 100.
        let mut codel = CoDel::for_lane(ms(20));
        let drops = run(&mut codel, 0, 300, |_| ms(20));
        assert_eq!(drops[0], 50);
    }

    #[test]
    fn a_lanes_target_is_5_percent_of_its_sites_striped_round_trip() {
        let ms = Duration::from_millis;
        // Every lane within 25 ms: CoDel's 5 ms.
        assert_eq!(lane_target(Duration::ZERO), TARGET);
        assert_eq!(lane_target(ms(25)), TARGET);
        // The AFMT paper's delay variant: the longest lane 60 ms away.
        assert_eq!(lane_target(ms(60)), Duration::from_micros(8_500));
        assert_eq!(lane_target(ms(300)), Duration::from_micros(12_500));
        // A lane 10 ms away, at a site whose longest lane is 60 ms away, leaves a
        // queue standing at 8 ms beyond that lane alone; its interval is its own path's.
        let mut codel = CoDel::for_lane(ms(20));
        codel.fit_striped_paths(ms(60));
        assert!(run(&mut codel, 0, 1_000, |_| ms(8)).is_empty());
        let drops = run(&mut codel, 1_000, 1_300, |_| ms(9));
        assert_eq!(drops[0], 1_050);
        // The same lane at a site whose lanes are all 10 ms away drops it.
        let mut codel = CoDel::for_lane(ms(20));
        codel.fit_striped_paths(ms(10));
        assert_eq!(run(&mut codel, 0, 300, |_| ms(8))[0], 50);
    }

    #[test]
    fn a_shapers_interval_is_a_striped_flows_round_trip_and_the_bound_its_target_5_percent() {
        let ms = Duration::from_millis;
        // Lanes 10 ms away or less: CoDel's defaults.
        assert_eq!(shaper_interval(Duration::ZERO), INTERVAL);
        assert_eq!(shaper_interval(ms(10)), INTERVAL);
        assert_eq!(shaper_target(INTERVAL), TARGET);
        // The AFMT paper's delay variant: the longest lane 60 ms away.
        assert_eq!(shaper_interval(ms(60)), ms(170));
        assert_eq!(shaper_target(ms(170)), Duration::from_micros(8_500));
        assert_eq!(shaper_interval(ms(300)), ms(250));
        // Fitted to it, a queue standing at 8 ms is left alone, and one at 20 ms is
        // first dropped from 170 ms after it began to stand.
        let mut codel = CoDel::default();
        codel.fit_shaper(ms(60));
        assert!(run(&mut codel, 0, 2_000, |_| ms(8)).is_empty());
        let drops = run(&mut codel, 2_000, 3_000, |_| ms(20));
        assert_eq!(drops[0], 2_170);
    }

    #[test]
    fn drops_wait_until_not_before_and_then_go_on_as_if_none_had_been_due() {
        let stands = |_| Duration::from_millis(20);
        let mut free = CoDel::default();
        let mut held = CoDel::default();
        let due: Vec<u64> = (0..400)
            .filter(|&t| free.should_drop(stands(t), 20 * MTU, MTU, ms(t), || Instant::ZERO))
            .collect();
        assert_eq!(due[..2], [100, 200], "CoDel's own drops");
        let not_before = ms(150);
        let drops: Vec<u64> = (0..400)
            .filter(|&t| held.should_drop(stands(t), 20 * MTU, MTU, ms(t), || not_before))
            .collect();
        // The first drop waits until 150 ms; the next comes an interval later, as
        // after a first drop.
        assert_eq!(drops[..2], [150, 250], "{drops:?}");
        // A packet spared leaves CoDel's state as it was: the next one, of a flow
        // without a wait, is dropped in its place.
        let mut mixed = CoDel::default();
        let wait = |t: u64| {
            if t.is_multiple_of(2) {
                not_before
            } else {
                Instant::ZERO
            }
        };
        let drops: Vec<u64> = (0..400)
            .filter(|&t| mixed.should_drop(stands(t), 20 * MTU, MTU, ms(t), || wait(t)))
            .collect();
        assert_eq!(drops[..3], [101, 201, 272], "{drops:?}");
    }

    #[test]
    fn a_lanes_bound_is_half_its_path_round_trip_between_30_and_50_ms() {
        let d = Duration::from_millis;
        assert_eq!(lane_max_sojourn(d(20)), d(30));
        assert_eq!(lane_max_sojourn(d(80)), d(40));
        assert_eq!(lane_max_sojourn(d(240)), d(50));
        let mut short = CoDel::for_lane(d(20));
        assert_eq!(
            short.verdict(d(31), 20 * MTU, MTU, ms(0), || Instant::ZERO),
            Some(AqmDrop::TooLate)
        );
        short.fit_lane(d(120));
        assert_eq!(
            short.verdict(d(31), 20 * MTU, MTU, ms(1), || Instant::ZERO),
            None
        );
    }

    #[test]
    fn dropping_stops_as_soon_as_the_queue_is_below_the_target() {
        let mut codel = CoDel::default();
        let stands = |t: u64| Duration::from_millis(if t < 400 { 20 } else { 2 });
        let drops = run(&mut codel, 0, 2_000, stands);
        assert!(drops.iter().all(|&t| t < 400), "{drops:?}");
        assert!(!codel.dropping());
    }

    #[test]
    fn a_queue_of_one_packet_is_not_a_standing_queue_however_slow_the_link() {
        // One packet on a 100 kbit/s link waits 112 ms: serialisation, not a queue.
        let mut codel = CoDel::default();
        let dropped = (0..5_000).any(|t| {
            codel.should_drop(Duration::from_millis(112), MTU, MTU, ms(t), || {
                Instant::ZERO
            })
        });
        assert!(!dropped);
    }

    #[test]
    fn a_wait_beyond_the_bound_is_dropped_at_once_unless_it_is_one_packet() {
        let mut codel = CoDel::default();
        let late = MAX_SOJOURN + Duration::from_millis(1);
        assert_eq!(
            codel.verdict(late, 20 * MTU, MTU, ms(0), || Instant::ZERO),
            Some(AqmDrop::TooLate)
        );
        assert_eq!(codel.verdict(late, MTU, MTU, ms(1), || Instant::ZERO), None);
        assert_eq!(
            codel.verdict(MAX_SOJOURN, 20 * MTU, MTU, ms(2), || Instant::ZERO),
            None
        );
    }

    #[test]
    fn a_queue_that_stands_again_soon_resumes_the_drop_rate_that_controlled_it() {
        let mut codel = CoDel::default();
        let first = run(&mut codel, 0, 1_000, |_| Duration::from_millis(20));
        // Drained for 200 ms, then standing again.
        run(&mut codel, 1_000, 1_200, |_| Duration::from_millis(1));
        let again = run(&mut codel, 1_200, 1_700, |_| Duration::from_millis(20));
        // The second state begins at the drop rate the first had reached, not at one
        // per interval.
        let spacing = again[1] - again[0];
        let first_spacing = first[1] - first[0];
        assert!(spacing < first_spacing / 2, "{first:?} {again:?}");
    }

    #[test]
    fn the_drops_of_striped_flows_follow_codels_law_at_their_round_trip() {
        // A site whose longest lane is 60 ms away: its striped flows' round trip is
        // 120 ms out and back plus the 50 ms bound.
        let longest = Duration::from_millis(60);
        let mut drops = StripedDrops::default();
        assert_eq!(drops.not_before(), Instant::ZERO);
        drops.dropped(ms(1_000), longest);
        assert_eq!(drops.not_before(), ms(1_170));
        // Drops within two round trips of the last make a run and come ever closer.
        drops.dropped(ms(1_170), longest);
        assert_eq!(
            drops.not_before(),
            ms(1_170) + Duration::from_millis(170).div_f64(2f64.sqrt())
        );
        drops.dropped(ms(1_300), longest);
        assert_eq!(
            drops.not_before(),
            ms(1_300) + Duration::from_millis(170).div_f64(3f64.sqrt())
        );
        // One after a pause of two round trips starts a run again.
        drops.dropped(ms(1_640), longest);
        assert_eq!(drops.not_before(), ms(1_810));
    }
}
