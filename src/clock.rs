//! The only place that reads a clock (enforced by `clippy.toml`). Everything else gets
//! time as a value: the core as [`crate::core::time::Instant`], the shell from here.

use std::time::Instant as StdInstant;

use crate::core::time::Instant;

/// A monotonic clock whose origin is its creation.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: StdInstant,
}

impl Clock {
    #[allow(clippy::disallowed_methods)] // the clock itself
    pub fn new() -> Clock {
        Clock {
            origin: StdInstant::now(),
        }
    }

    /// Now, as the core counts time.
    #[allow(clippy::disallowed_methods)] // the clock itself
    pub fn now(&self) -> Instant {
        let nanos = StdInstant::now()
            .saturating_duration_since(self.origin)
            .as_nanos();
        Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The tokio instant of a core instant, for timers.
    pub fn deadline(&self, at: Instant) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.origin + std::time::Duration::from_nanos(at.as_nanos()))
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// `CLOCK_MONOTONIC` in microseconds, as systemd's `MONOTONIC_USEC=` wants it.
pub fn monotonic_usec() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0)
}

/// Seconds since the Unix epoch (UTC), for data caps' periods.
#[allow(clippy::disallowed_methods)] // the clock itself
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Wall-clock time, for certificate validity.
#[allow(clippy::disallowed_methods)] // the clock itself
pub fn wall_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}
