//! When an entry dials its lane again, and how long the exit may take to answer.
//! Pure: the shell reports what happened and sleeps and times out as told.
//!
//! quinn resends a lost Initial after 1 s, then 2 s, then 4 s: an attempt still
//! waiting for the exit's first answer when the exit returns waits for the next
//! resend, up to 4 s after an exit gone for long. So an attempt gets a short time for
//! the exit's first answer (its Initial and the exit's first flight), and the whole
//! handshake and hello limit only once the exit answered, and a path that is down is
//! tried afresh within the backoff, which grows while attempts fail or lanes die
//! young and starts over after a lane that lasted.
//!
//! An exit that is there but busy is waited for: an exit that a thousand sites dial at
//! once (at its restart) refuses the handshakes beyond its bound and answers the others
//! late, and when every attempt gave up at 1.5 s, the work it had done for them was
//! lost and its sites' lanes took 61-84 s to come back. So after an attempt the exit
//! answered, if only to refuse it, and before any lane of the uplink was up, the next
//! attempt may wait the longest for the first answer, and while it refuses, attempts
//! are spaced up to 2 s apart: 34-35 s.

use std::time::Duration;

/// The first wait between attempts; it doubles up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Short: a path that returns must be used again within two seconds, and a failed
/// attempt costs a few Initial packets. An attempt sends its Initial at once and
/// again after 1 s (quinn's first resend); with this wait before the next, an Initial
/// leaves at least every second while the exit is away.
pub const MAX_BACKOFF: Duration = Duration::from_millis(500);
/// The backoff's cap while the exit answers but refuses or fails the attempts: it is
/// there, so no Initial need find it, and a thousand sites retrying less often leave
/// it more of its time for the handshakes it admitted.
pub const BUSY_MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The least time the exit's first answer may take; four round trips of the last
/// lane if longer. A path whose round trip grew beyond it since the uplink's last lane
/// is not dialled again: no lane over it would carry anything useful.
pub const FIRST_ANSWER: Duration = Duration::from_millis(1500);
/// A lane that stayed up this long starts the next backoff from the minimum again.
pub const STABLE_LANE: Duration = Duration::from_secs(10);

/// The dialing state of one uplink and colour.
#[derive(Debug)]
pub struct Redial {
    /// The longest the exit's first answer may take, however slow the last lane.
    longest_answer: Duration,
    backoff: Duration,
    /// Failed attempts in a row.
    failures: u32,
    /// The round trip of the last lane (zero: none yet).
    last_rtt: Duration,
    /// The exit answered the last attempt, which failed all the same.
    exit_busy: bool,
}

impl Redial {
    pub fn new(longest_answer: Duration) -> Redial {
        Redial {
            longest_answer,
            backoff: MIN_BACKOFF,
            failures: 0,
            last_rtt: Duration::ZERO,
            exit_busy: false,
        }
    }

    /// How long the next attempt may wait for the exit's first answer: the longest
    /// until a lane of this uplink was up, and after the exit answered an attempt that
    /// failed (see the module's documentation).
    pub fn answer_limit(&self) -> Duration {
        if self.last_rtt.is_zero() || self.exit_busy {
            return self.longest_answer;
        }
        (4 * self.last_rtt)
            .max(FIRST_ANSWER)
            .min(self.longest_answer)
    }

    /// An attempt failed, the exit having `answered` it or not; returns how many
    /// failed in a row (the first is worth a warning, repeats of an uplink that stays
    /// down are not).
    pub fn failed(&mut self, answered: bool) -> u32 {
        self.failures += 1;
        self.exit_busy = answered;
        self.failures
    }

    /// A lane came up.
    pub fn connected(&mut self) {
        self.failures = 0;
        self.exit_busy = false;
    }

    /// The lane went down after `up_for`, its round trip `rtt` at the end.
    pub fn lane_down(&mut self, up_for: Duration, rtt: Duration) {
        self.last_rtt = rtt;
        if up_for >= STABLE_LANE {
            self.backoff = MIN_BACKOFF;
        }
    }

    /// How long to wait before the next attempt; the one after waits twice as long,
    /// up to [`MAX_BACKOFF`], or [`BUSY_MAX_BACKOFF`] while the exit is busy.
    pub fn next_wait(&mut self) -> Duration {
        let cap = if self.exit_busy {
            BUSY_MAX_BACKOFF
        } else {
            MAX_BACKOFF
        };
        let wait = self.backoff.min(cap);
        self.backoff = (self.backoff * 2).min(cap);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn the_exit_may_take_four_round_trips_of_the_last_lane_to_answer_the_longest_before_any() {
        let mut r = Redial::new(LONG);
        assert_eq!(r.answer_limit(), LONG, "no round trip known yet");
        r.connected();
        r.lane_down(MS(500), MS(20));
        for _ in 0..5 {
            r.failed(false);
            assert_eq!(r.answer_limit(), FIRST_ANSWER, "however many had no answer");
        }
        r.failed(true);
        assert_eq!(r.answer_limit(), LONG, "the exit answered, busy");
        r.failed(false);
        assert_eq!(r.answer_limit(), FIRST_ANSWER, "and then did not");
        r.failed(true);
        r.connected();
        assert_eq!(r.answer_limit(), FIRST_ANSWER, "a lane came up");
        // A slow path: four of its round trips.
        r.lane_down(MS(500), MS(600));
        assert_eq!(r.answer_limit(), MS(2400));
        r.lane_down(MS(500), MS(2000));
        assert_eq!(r.answer_limit(), LONG, "never more than the longest");
    }

    #[test]
    fn backoff_doubles_to_half_a_second_and_starts_over_after_a_lane_that_lasted() {
        let mut r = Redial::new(LONG);
        let waits: Vec<_> = (0..5).map(|_| r.next_wait()).collect();
        assert_eq!(waits, [MS(200), MS(400), MS(500), MS(500), MS(500)]);
        r.lane_down(STABLE_LANE - MS(1), MS(20));
        assert_eq!(r.next_wait(), MS(500), "a lane that died young");
        r.lane_down(STABLE_LANE, MS(20));
        assert_eq!(r.next_wait(), MIN_BACKOFF);
        // A busy exit is retried less often.
        r.failed(true);
        let waits: Vec<_> = (0..5).map(|_| r.next_wait()).collect();
        assert_eq!(waits, [MS(400), MS(800), MS(1600), MS(2000), MS(2000)]);
        r.failed(false);
        assert_eq!(r.next_wait(), MAX_BACKOFF, "gone again");
    }
}
