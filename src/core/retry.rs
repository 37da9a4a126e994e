//! When a controller tries a gateway again after it could not reach it: at once the
//! first time, then after a wait that doubles up to a minute, and normally again once
//! it answers. Pure: the shell reports what happened and skips the gateway until told.

use std::time::Duration;

use super::time::Instant;

/// The first wait after a failure; it doubles up to [`MAX_WAIT`].
pub const FIRST_WAIT: Duration = Duration::from_secs(1);
/// A gateway down for long is still tried every minute.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// One gateway's standing.
#[derive(Debug, Clone, Default)]
pub struct Retry {
    /// Failures in a row.
    failures: u32,
    /// Not before this, after a failure.
    next: Option<Instant>,
}

impl Retry {
    /// Whether the gateway is to be tried at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// It answered.
    pub fn succeeded(&mut self) {
        *self = Retry::default();
    }

    /// It did not, at `now`; returns how many times in a row (the first is worth a
    /// warning, repeats of a gateway that stays away are not) and when to try again.
    pub fn failed(&mut self, now: Instant) -> (u32, Instant) {
        let wait = FIRST_WAIT
            .saturating_mul(1 << self.failures.min(16))
            .min(MAX_WAIT);
        self.failures = self.failures.saturating_add(1);
        let next = now + wait;
        self.next = Some(next);
        (self.failures, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_that_fails_is_tried_after_a_doubling_wait_and_normally_once_it_answers() {
        let s = Duration::from_secs;
        let t0 = Instant::ZERO;
        let mut r = Retry::default();
        assert!(r.due(t0));
        assert_eq!(r.failed(t0), (1, t0 + s(1)));
        assert!(!r.due(t0 + Duration::from_millis(999)));
        assert!(r.due(t0 + s(1)));
        assert_eq!(r.failed(t0 + s(1)).1, t0 + s(3));
        assert_eq!(r.failed(t0 + s(3)).1, t0 + s(7));
        for _ in 0..10 {
            r.failed(t0 + s(7));
        }
        assert_eq!(r.failed(t0 + s(100)), (14, t0 + s(160)), "a minute at most");
        r.succeeded();
        assert!(r.due(t0 + s(100)));
        assert_eq!(r.failed(t0 + s(200)), (1, t0 + s(201)));
    }
}
