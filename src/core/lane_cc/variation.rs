//! How much an uplink's delay varies by itself, learned from the round trips of a
//! lane's lone packets: the keep-alives and probes an idle lane sends, and the first
//! packet after any pause.
//!
//! Why lone packets: an uplink whose delay varies keeps its packets' order (a modem's
//! varying queue, a radio's scheduling), so each waits behind the slowest before it,
//! and a lane that sends densely sees its round trips near the top of the range, as
//! a standing queue would show them. A packet sent after a pause longer than the
//! variation meets none before it: its round trip is a fresh draw of the path's own
//! delay. A loaded lane sends no such packets, so what was learned while it idled
//! holds while it is loaded, which is when the delay cap needs it.
//!
//! Lone round trips also rise and fall with someone else's queue at the uplink (a
//! download beside braid's lanes): that is no variation of the path, and taken for
//! one it lets the lane keep a queue of that size once the cross traffic is gone.
//! The two differ in how fast they change: the path's delay is a fresh draw for each
//! lone packet, while a queue builds and drains over many round trips, so from one
//! keep-alive to the next it hardly moves (see [`SLOW_CHANGE`]).

use std::time::Duration;

use crate::core::time::Instant;

/// A packet sent this long after the lane's previous one is a lone packet: longer
/// than any variation braid bonds over (`LaneWindow`'s allowance covers a variation
/// of up to twice this), shorter than the keep-alive an idle lane sends every 100 ms.
const LONE_AFTER: Duration = Duration::from_millis(50);
/// Lone round trips remembered: three seconds of an idle lane's keep-alives.
const SAMPLES: usize = 32;
/// Lone round trips needed before any variation is taken as the uplink's: an idle
/// lane's first half second.
const MIN_SAMPLES: usize = 6;
/// The share of lone round trips below the one that measures the variation (75 %):
/// the highest include the hosts' scheduling hiccups, which a busy gateway's idle
/// lanes over steady paths showed often enough to pass for a variation at 90 %.
const PERCENTILE: (usize, usize) = (3, 4);
/// How many lone round trips' worth the measured span is taken larger by: with `n`
/// of them, by `(n + 6) / n`, and by at least a quarter. Of spans measured from
/// round trips that are the sum of two uniform draws, one in ten falls below 0.43 of
/// the variation with 6 of them, 0.6 with 12 and 0.86 with 32: so scaled, below 0.8
/// to 1.1 with any number, and the median lies a quarter above the variation with
/// 24 or more, a half with 6 to 10.
const SMALL_SAMPLE_MARGIN: u32 = 6;
/// Variation of the lone round trips below this is a steady path's own noise: the
/// peer's acknowledgement delay (at most [`crate::core::engine::PEER_ACK_DELAY`])
/// and the hosts' scheduling, which on a busy two-core gateway spread the idle
/// lanes' lone round trips over steady paths by up to 10 ms at the 75th percentile.
const NOISE: Duration = Duration::from_millis(10);

/// Lone round trips whose median change from one to the next is below this share
/// of their span (an eighth) rose and fell with a queue, not with the path: of
/// round trips drawn afresh each time, the median change falls below an eighth of
/// the span about once in 100 sets of 6, once in 500 of 12 and less than once in
/// 10,000 of 24 or more, while a queue that builds over two seconds or more,
/// sampled every 100 ms (an active site's keep-alives), stays under a tenth. Two
/// limits: an uplink whose own delay drifts slower than the keep-alives come
/// learns no variation (declare it, `delay_variation_ms`), and a quiet site's
/// lanes, sampled once a second, may take a queue for a variation.
const SLOW_CHANGE: (u32, u32) = (1, 8);

/// The variation learned from lone packets' round trips.
#[derive(Debug, Clone)]
pub struct VariationEstimate {
    /// When the lane last sent a packet.
    last_sent: Option<Instant>,
    /// When the lone packet whose acknowledgement is awaited was sent.
    lone_sent: Option<Instant>,
    /// The lone packets' round trips, a ring of the latest.
    samples: [Duration; SAMPLES],
    count: usize,
    next: usize,
    /// What the samples measured when the latest arrived (see [`Self::spread`]).
    spread: Duration,
}

impl Default for VariationEstimate {
    fn default() -> Self {
        VariationEstimate {
            last_sent: None,
            lone_sent: None,
            samples: [Duration::ZERO; SAMPLES],
            count: 0,
            next: 0,
            spread: Duration::ZERO,
        }
    }
}

impl VariationEstimate {
    /// The lane sent a packet at `now`.
    pub fn on_sent(&mut self, now: Instant) {
        if self
            .last_sent
            .is_none_or(|last| now.saturating_since(last) >= LONE_AFTER)
        {
            self.lone_sent = Some(now);
        }
        self.last_sent = Some(now);
    }

    /// A packet sent at `sent` was acknowledged at `now`.
    pub fn on_ack(&mut self, now: Instant, sent: Instant) {
        if self.lone_sent != Some(sent) {
            return;
        }
        self.lone_sent = None;
        self.samples[self.next] = now.saturating_since(sent);
        self.next = (self.next + 1) % SAMPLES;
        self.count = (self.count + 1).min(SAMPLES);
        self.spread = self.measure();
    }

    /// The variation the lone round trips measured when the latest arrived: a loaded
    /// lane asks on every acknowledgement, and lone ones come a few times a second.
    pub fn spread(&self) -> Duration {
        self.spread
    }

    /// The one-way delay's variation each way (lowest to highest) that the lone
    /// round trips show, or zero where they show only a steady path's noise. Measured
    /// among the lone round trips themselves, not above the lane's lowest: the
    /// exit's lone packets wait for the entry's acknowledgement delay, which a
    /// loaded lane's acknowledgements do not. A lone packet's round trip is the sum
    /// of two draws, one each way: the sum of two uniform spreads of `s` has 75 % of
    /// its draws within about 1.3 `s` of its lowest, and the lowest of a few dozen
    /// draws sits about 0.3 `s` above that, so their span is about `s`, give or take
    /// a fifth, with a few dozen of them; with six, from under half of `s` to a
    /// little more than `s` (the tenth to the ninetieth percentile). Taken larger by
    /// [`SMALL_SAMPLE_MARGIN`] lone round trips' worth (at least a quarter larger):
    /// an understated variation leaves a loaded lane's
    /// round trips above the delay cap's allowance, which then cuts the lane every
    /// round trip (in the lane's path simulator, a variation understated by an
    /// eighth kept a 40 ms one to 15 % of its path; in the testbed, one learned from
    /// the first six or eight as half of it kept the lane at half its path for a
    /// whole download, since a loaded lane sends no lone packets to correct it); an
    /// overstated one lets the lane keep a little more queued.
    fn measure(&self) -> Duration {
        if self.count < MIN_SAMPLES {
            return Duration::ZERO;
        }
        let mut sorted = self.samples;
        let sorted = &mut sorted[..self.count];
        sorted.sort_unstable();
        let (num, den) = PERCENTILE;
        let excess = sorted[(self.count * num).div_ceil(den) - 1] - sorted[0];
        if excess < NOISE || self.changes_slowly(excess) {
            return Duration::ZERO;
        }
        let count = self.count as u32;
        (excess * (count + SMALL_SAMPLE_MARGIN) / count).max(excess * 5 / 4)
    }

    /// True if the lone round trips' median change from one to the next (in the
    /// order they came) is under [`SLOW_CHANGE`] of `span`.
    fn changes_slowly(&self, span: Duration) -> bool {
        let oldest = (self.next + SAMPLES - self.count) % SAMPLES;
        let at = |i: usize| self.samples[(oldest + i) % SAMPLES];
        let mut changes = [Duration::ZERO; SAMPLES];
        let changes = &mut changes[..self.count - 1];
        for (i, change) in changes.iter_mut().enumerate() {
            *change = at(i + 1).abs_diff(at(i));
        }
        changes.sort_unstable();
        let (num, den) = SLOW_CHANGE;
        changes[changes.len() / 2] * den < span * num
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Lone packets every 100 ms, each acknowledged after the given round trip.
    fn learn(rtts_ms: &[u64]) -> VariationEstimate {
        let mut v = VariationEstimate::default();
        for (i, rtt) in rtts_ms.iter().enumerate() {
            let sent = at(100 * i as u64);
            v.on_sent(sent);
            v.on_ack(sent + ms(*rtt), sent);
        }
        v
    }

    #[test]
    fn lone_round_trips_spread_over_twice_the_variation_measure_it() {
        // 60 ms apart from the variation; each way 0..20 ms: round trips 60..100,
        // the sum of two draws.
        let mut learned: Vec<Duration> = (1..=9)
            .map(|seed| {
                let mut rng = crate::core::sched::sim::Rng(seed);
                let rtts: Vec<u64> = (0..32).map(|_| 60 + rng.next(21) + rng.next(21)).collect();
                learn(&rtts).spread()
            })
            .collect();
        learned.sort();
        // The span, about the variation give or take a fifth, a quarter larger.
        let context = format!("a variation of 20 ms each way, learned as {learned:?}");
        assert!(learned[0] >= ms(16) && learned[8] <= ms(36), "{context}");
        assert!((ms(20)..=ms(30)).contains(&learned[4]), "{context}");
    }

    #[test]
    fn a_span_from_few_lone_round_trips_is_taken_with_a_wider_margin() {
        // Six round trips spanning 10 ms to their 75th percentile (the fifth).
        let few = learn(&[60, 70, 65, 72, 68, 62]).spread();
        assert_eq!(few, ms(20), "twice the span");
        // The same span of 10 ms over twelve: half again; over a full ring, and
        // over 27 (where six round trips' worth is less), a quarter.
        let spanning_10_ms = |n: u64| -> Vec<u64> { (0..n).map(|i| 60 + (i * 5 % 14)).collect() };
        assert_eq!(learn(&spanning_10_ms(12)).spread(), ms(15));
        assert_eq!(learn(&spanning_10_ms(27)).spread(), ms(10) * 5 / 4);
        assert_eq!(learn(&spanning_10_ms(32)).spread(), ms(10) * 5 / 4);
    }

    #[test]
    fn a_queue_that_builds_and_drains_over_seconds_is_no_variation() {
        // Someone else's download beside an idle lane: its queue grows by 2 ms
        // every 100 ms keep-alive for two seconds, then drains at once.
        let rtts: Vec<u64> = (0..32).map(|i| 60 + 20 + (i % 20) * 2).collect();
        assert_eq!(learn(&rtts).spread(), Duration::ZERO);
        // The same round trips in an order drawn afresh are a variation.
        let shuffled: Vec<u64> = (0..32).map(|i| rtts[i * 13 % 32]).collect();
        assert!(learn(&shuffled).spread() > ms(20));
    }

    #[test]
    fn a_steady_paths_noise_is_no_variation() {
        // The peer's acknowledgement delay and a few ms of scheduling.
        let rtts: Vec<u64> = (0..32).map(|i| 20 + (i * 7 % 9)).collect();
        assert_eq!(learn(&rtts).spread(), Duration::ZERO);
    }

    #[test]
    fn too_few_lone_round_trips_say_nothing() {
        let rtts = [60, 100, 70, 95, 80];
        assert_eq!(learn(&rtts).spread(), Duration::ZERO);
        let mut more = rtts.to_vec();
        more.push(85);
        assert!(learn(&more).spread() > Duration::ZERO);
    }

    #[test]
    fn packets_sent_close_together_are_not_lone() {
        // A loaded lane: its round trips sit at the top of the range, and must not
        // be read as the variation's draws.
        let mut v = VariationEstimate::default();
        for i in 0..100 {
            let sent = at(i);
            v.on_sent(sent);
            v.on_ack(sent + ms(100), sent);
        }
        assert_eq!(v.count, 1, "only the first packet was lone");
    }

    #[test]
    fn the_latest_lone_round_trips_replace_the_oldest() {
        let mut rtts: Vec<u64> = (0..32).map(|i| 60 + (i * 37 % 41)).collect();
        rtts.extend(std::iter::repeat_n(61, 32));
        assert_eq!(learn(&rtts).spread(), Duration::ZERO, "the path steadied");
    }
}
