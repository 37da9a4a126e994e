//! How fast the exit starts handshakes: a token bucket, so that a flood of strangers'
//! connection attempts costs a bounded amount of TLS work per second, whatever
//! their number, while the sites' lanes, which reconnect in bursts after an exit
//! restart, get through within seconds.
//!
//! Contract: [`HandshakeLimit::admit`] says whether a handshake arriving `now` may
//! start. Pure: time is an argument.

use super::time::Instant;

/// Handshakes a second the exit starts at most, on average.
pub const HANDSHAKES_PER_SECOND: u32 = 200;
/// Handshakes it starts at once after a quiet spell: every lane of 40 sites with
/// three uplinks each, after an exit restart.
pub const HANDSHAKE_BURST: u32 = 256;

#[derive(Debug, Clone)]
pub struct HandshakeLimit {
    per_second: u32,
    burst: u32,
    /// Handshakes that may start now, in millionths.
    tokens_micro: u64,
    at: Instant,
}

impl HandshakeLimit {
    pub fn new(per_second: u32, burst: u32, now: Instant) -> HandshakeLimit {
        HandshakeLimit {
            per_second,
            burst,
            tokens_micro: u64::from(burst) * 1_000_000,
            at: now,
        }
    }

    /// Whether a handshake arriving `now` may start (and takes its token if so).
    pub fn admit(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_since(self.at);
        self.at = self.at.max(now);
        let earned = elapsed.as_micros() * u128::from(self.per_second);
        let full = u128::from(self.burst) * 1_000_000;
        let tokens = (u128::from(self.tokens_micro) + earned).min(full);
        let admitted = tokens >= 1_000_000;
        let left = if admitted { tokens - 1_000_000 } else { tokens };
        self.tokens_micro = u64::try_from(left).unwrap_or(u64::MAX);
        admitted
    }

    /// How long until one more handshake may start.
    #[cfg(test)]
    fn wait(&self) -> std::time::Duration {
        let missing = 1_000_000u64.saturating_sub(self.tokens_micro);
        std::time::Duration::from_micros(missing / u64::from(self.per_second.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn a_burst_is_admitted_at_once_and_then_the_rate() {
        let mut limit = HandshakeLimit::new(200, 256, at_ms(0));
        let burst = (0..1000).filter(|_| limit.admit(at_ms(0))).count();
        assert_eq!(burst, 256);
        assert_eq!(limit.wait(), Duration::from_millis(5));
        // A flood over the next second: 200 more, one every 5 ms.
        let flood = (1..=1000).filter(|&ms| limit.admit(at_ms(ms))).count();
        assert_eq!(flood, 200);
    }

    #[test]
    fn a_quiet_spell_refills_the_bucket_up_to_its_burst_only() {
        let mut limit = HandshakeLimit::new(200, 256, at_ms(0));
        while limit.admit(at_ms(0)) {}
        // An hour later: no more than the burst at once.
        let later = at_ms(3_600_000);
        let admitted = (0..1000).filter(|_| limit.admit(later)).count();
        assert_eq!(admitted, 256);
        // Time going backwards earns nothing.
        assert!(!limit.admit(at_ms(0)));
    }
}
