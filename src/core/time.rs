//! braid's own notion of time for the pure core.
//!
//! Contract: an [`Instant`] is a count of nanoseconds on a monotonic clock whose origin
//! the I/O shell chooses (see `clock.rs`). There is deliberately no `now()` here: core
//! code receives time as an argument, so every algorithm can be driven by hand-made
//! instants in tests. All arithmetic saturates; time going backwards never panics.

use std::time::Duration;

/// A point in time, in nanoseconds since an origin chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);
    /// The end of time, where saturating arithmetic stops: "never" as a deadline.
    pub const MAX: Instant = Instant(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Saturating, like every time calculation of the core.
impl std::ops::Add<Duration> for Instant {
    type Output = Instant;

    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

/// Saturating at time zero.
impl std::ops::Sub<Duration> for Instant {
    type Output = Instant;

    fn sub(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backwards_time_saturates_instead_of_panicking() {
        let early = Instant::from_nanos(5_000_000);
        let late = Instant::from_nanos(9_000_000);
        assert_eq!(late.saturating_since(early), Duration::from_millis(4));
        assert_eq!(early.saturating_since(late), Duration::ZERO);
        assert_eq!(
            Instant::ZERO.saturating_since(Instant::from_nanos(u64::MAX)),
            Duration::ZERO
        );
        assert_eq!(early - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::from_nanos(1),
            Instant::from_nanos(u64::MAX)
        );
    }
}
