//! When an entry dials its lane again, and how long one attempt may take. Pure: the
//! shell reports what happened and sleeps and times out as told.
//!
//! A lost Initial is resent by quinn after 1 s, then 2 s, then 4 s, so a path that
//! came back during a long outage would wait for those resends; short attempts and a
//! short backoff find it within about a second instead. Backoff grows while
//! attempts fail or lanes die young, and starts over after a lane that lasted.

use std::time::Duration;

/// The first wait between attempts; it doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Short: a path that returns must be used again within two seconds, and a failed
/// attempt costs a few Initial packets.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// The least one attempt (handshake and hello) may take once the uplink's round trip
/// is known; four round trips if longer.
pub const SHORT_ATTEMPT: Duration = Duration::from_millis(1500);
/// Every this many attempts in a row, one may take the whole long limit: the path
/// may have become slower than it was.
pub const LONG_ATTEMPT_EVERY: u32 = 3;
/// A lane that stayed up this long starts the next backoff from the minimum again.
pub const STABLE_LANE: Duration = Duration::from_secs(10);

/// The dialing state of one uplink and colour.
#[derive(Debug)]
pub struct Redial {
    /// The limit of an attempt before any round trip is known, and of every
    /// [`LONG_ATTEMPT_EVERY`]th one.
    long_attempt: Duration,
    backoff: Duration,
    /// Failed attempts in a row.
    failures: u32,
    /// The round trip of the last lane (zero: none yet).
    last_rtt: Duration,
}

impl Redial {
    pub fn new(long_attempt: Duration) -> Redial {
        Redial {
            long_attempt,
            backoff: MIN_BACKOFF,
            failures: 0,
            last_rtt: Duration::ZERO,
        }
    }

    /// How long the next attempt may take.
    pub fn attempt_limit(&self) -> Duration {
        if self.last_rtt.is_zero() || self.failures % LONG_ATTEMPT_EVERY == LONG_ATTEMPT_EVERY - 1 {
            self.long_attempt
        } else {
            (4 * self.last_rtt)
                .max(SHORT_ATTEMPT)
                .min(self.long_attempt)
        }
    }

    /// An attempt failed; returns how many failed in a row (the first is worth a
    /// warning, repeats of an uplink that stays down are not).
    pub fn failed(&mut self) -> u32 {
        self.failures += 1;
        self.failures
    }

    /// A lane came up.
    pub fn connected(&mut self) {
        self.failures = 0;
    }

    /// The lane went down after `up_for`, its round trip `rtt` at the end.
    pub fn lane_down(&mut self, up_for: Duration, rtt: Duration) {
        self.last_rtt = rtt;
        if up_for >= STABLE_LANE {
            self.backoff = MIN_BACKOFF;
        }
    }

    /// How long to wait before the next attempt; the one after waits twice as long,
    /// up to [`MAX_BACKOFF`].
    pub fn next_wait(&mut self) -> Duration {
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn attempts_are_long_until_a_round_trip_is_known_then_short_but_every_third() {
        let mut r = Redial::new(LONG);
        assert_eq!(r.attempt_limit(), LONG, "no round trip known yet");
        r.connected();
        r.lane_down(MS(500), MS(20));
        assert_eq!(r.attempt_limit(), SHORT_ATTEMPT);
        r.failed();
        assert_eq!(r.attempt_limit(), SHORT_ATTEMPT);
        r.failed();
        assert_eq!(r.attempt_limit(), LONG, "the third in a row");
        r.failed();
        assert_eq!(r.attempt_limit(), SHORT_ATTEMPT);
        // A slow path: four of its round trips.
        r.lane_down(MS(500), MS(600));
        assert_eq!(r.attempt_limit(), MS(2400));
        r.lane_down(MS(500), MS(2000));
        assert_eq!(r.attempt_limit(), LONG, "never more than the long limit");
    }

    #[test]
    fn backoff_doubles_to_a_second_and_starts_over_after_a_lane_that_lasted() {
        let mut r = Redial::new(LONG);
        let waits: Vec<_> = (0..5).map(|_| r.next_wait()).collect();
        assert_eq!(waits, [MS(200), MS(400), MS(800), MS(1000), MS(1000)]);
        r.lane_down(STABLE_LANE - MS(1), MS(20));
        assert_eq!(r.next_wait(), MS(1000), "a lane that died young");
        r.lane_down(STABLE_LANE, MS(20));
        assert_eq!(r.next_wait(), MIN_BACKOFF);
    }
}
