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

    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`; zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
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
    }
}
