//! The budget of a site's duplicates: what the copies of its `duplicate`
//! applications may add to what a gateway sends for it (`duplicate_kbps` in the
//! site's application table), as a token bucket.

use std::time::Duration;

use crate::core::time::Instant;

/// The bucket holds this much of the budget's rate: a burst of a few packets of
/// every call at once, not a second's worth, which would let a bulk application
/// marked `duplicate` double a whole burst of its traffic.
const BURST: Duration = Duration::from_millis(100);
/// And at least this many bytes, so that a low budget still copies full-size packets.
const MIN_BURST_BYTES: u64 = 3000;

#[derive(Debug, Clone, Default)]
pub struct DuplicateBudget {
    /// Bytes the next copies may take.
    bytes: u64,
    /// When `bytes` was last topped up.
    at: Option<Instant>,
}

impl DuplicateBudget {
    /// Takes `len` bytes for a copy at `now` from a budget of `rate_bps`, if it has
    /// them; whether it did.
    pub fn take(&mut self, len: u64, rate_bps: u64, now: Instant) -> bool {
        if rate_bps == 0 {
            return false;
        }
        let rate = u128::from(rate_bps);
        let cap = u64::try_from(rate * BURST.as_nanos() / 8_000_000_000)
            .unwrap_or(u64::MAX)
            .max(MIN_BURST_BYTES);
        match self.at {
            None => {
                self.bytes = cap;
                self.at = Some(now);
            }
            Some(at) => {
                let nanos = now.saturating_since(at).as_nanos();
                let earned = rate * nanos / 8_000_000_000;
                if u64::try_from(earned).is_ok_and(|e| self.bytes.saturating_add(e) < cap) {
                    // Time moves on by what the whole bytes took: the fraction of a
                    // byte is earned with the next packet.
                    self.bytes += earned as u64;
                    let took = earned * 8_000_000_000 / rate;
                    self.at = Some(at + Duration::from_nanos(took as u64));
                } else {
                    self.bytes = cap;
                    self.at = Some(now);
                }
            }
        }
        if self.bytes < len {
            return false;
        }
        self.bytes -= len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn copies_take_at_most_the_budgets_rate_after_a_burst() {
        // 800 kbit/s: 100 bytes a millisecond, a burst of 10,000 bytes.
        let mut b = DuplicateBudget::default();
        let taken = (0..200).filter(|_| b.take(200, 800_000, at(0))).count();
        assert_eq!(taken, 50, "the burst");
        // One second later: 100,000 bytes earned, but the bucket holds 10,000.
        let taken = (0..200).filter(|_| b.take(200, 800_000, at(1000))).count();
        assert_eq!(taken, 50);
        // At a packet of 200 bytes every millisecond (1.6 Mbit/s), half are copied.
        let taken = (1001..3001)
            .filter(|ms| b.take(200, 800_000, at(*ms)))
            .count();
        assert!((995..=1005).contains(&taken), "{taken}");
    }

    #[test]
    fn a_low_budget_still_copies_a_full_size_packet_and_none_never_copies() {
        // 8 kbit/s: its 100 ms are 100 bytes, the bucket holds 3,000.
        let mut b = DuplicateBudget::default();
        assert!(b.take(1500, 8_000, at(0)) && b.take(1500, 8_000, at(0)));
        assert!(!b.take(1500, 8_000, at(1)));
        assert!(b.take(1500, 8_000, at(1501)), "1,500 bytes earned in 1.5 s");
        let mut none = DuplicateBudget::default();
        assert!(!none.take(1500, 0, at(0)));
        assert!(!none.take(1500, 0, at(10_000)));
    }

    #[test]
    fn fractions_of_a_byte_are_not_lost_between_small_packets() {
        // 8 kbit/s: a byte a millisecond; packets every 0.5 ms earn half a byte each.
        let mut b = DuplicateBudget::default();
        assert!(b.take(3000, 8_000, at(0)));
        let mut taken = 0;
        for half_ms in 1..=2000u64 {
            if b.take(100, 8_000, Instant::from_nanos(half_ms * 500_000)) {
                taken += 1;
            }
        }
        // 1,000 bytes earned in a second: ten copies of 100 bytes.
        assert_eq!(taken, 10);
    }
}
