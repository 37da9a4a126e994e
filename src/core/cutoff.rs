//! Quality cut-offs: an uplink whose round trip or loss is beyond its limits
//! (`uplinks[].max_rtt_ms`, `max_loss_percent`) is worse than none for a call. Its
//! lanes stop carrying green traffic, or any (`cut_off = "all"`), at once, and carry
//! it again once they have been within the limits for a hold time. Pure: the engine
//! hands in each lane's samples and the time.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::time::Instant;

/// Loss is measured over windows at least this long...
pub const LOSS_WINDOW: Duration = Duration::from_secs(5);
/// ...and of at least this many packets sent (keep-alives count): fewer say little.
pub const LOSS_MIN_PACKETS: u64 = 40;

/// What traffic a lane beyond its limits stops carrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CutOff {
    /// Green traffic (its green lane): what a long or lossy path spoils.
    #[default]
    Green,
    /// Everything: the uplink counts as down for its tier.
    All,
}

/// An uplink's limits; none set, nothing is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QualityLimits {
    pub max_rtt: Option<Duration>,
    /// In hundredths of a percent (basis points), so that the limits compare exactly.
    pub max_loss_bp: Option<u32>,
    pub cut_off: CutOff,
}

/// Why a lane was cut off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Breach {
    Rtt {
        rtt: Duration,
        max: Duration,
    },
    /// Loss over the last window, and the limit, in percent.
    Loss {
        percent: f64,
        max: f64,
    },
}

impl Breach {
    pub fn reason(&self) -> &'static str {
        match self {
            Breach::Rtt { .. } => "rtt",
            Breach::Loss { .. } => "loss",
        }
    }
}

/// A change of a lane's cut-off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CutChange {
    Cut(Breach),
    /// Within its limits for the hold, after `cut_for`.
    Restored {
        cut_for: Duration,
    },
}

/// One lane's cut-off state.
#[derive(Debug, Clone, Default)]
pub struct Cutoff {
    /// The current loss window's start: when, and the lane's sent and lost packets.
    window: Option<(Instant, u64, u64)>,
    /// The loss of the last complete window (a fraction).
    loss: Option<f64>,
    cut_since: Option<Instant>,
    within_since: Option<Instant>,
}

impl Cutoff {
    pub fn is_cut(&self) -> bool {
        self.cut_since.is_some()
    }

    /// Takes a sample of the lane (its smoothed round trip, and the packets it has
    /// sent and lost so far) at `now`; returns what changed.
    pub fn observe(
        &mut self,
        limits: &QualityLimits,
        (srtt, sent, lost): (Duration, u64, u64),
        hold: Duration,
        now: Instant,
    ) -> Option<CutChange> {
        if limits.max_rtt.is_none() && limits.max_loss_bp.is_none() {
            return self.cut_since.take().map(|since| CutChange::Restored {
                cut_for: now.saturating_since(since),
            });
        }
        match self.window {
            Some((start, sent0, lost0)) if now.saturating_since(start) >= LOSS_WINDOW => {
                let sent_in = sent.saturating_sub(sent0);
                if sent_in >= LOSS_MIN_PACKETS {
                    self.loss = Some(lost.saturating_sub(lost0) as f64 / sent_in as f64);
                    self.window = Some((now, sent, lost));
                }
            }
            Some(_) => {}
            None => self.window = Some((now, sent, lost)),
        }
        let breach = match (limits.max_rtt, limits.max_loss_bp, self.loss) {
            (Some(max), _, _) if srtt > max => Some(Breach::Rtt { rtt: srtt, max }),
            (_, Some(bp), Some(loss)) if loss * 10_000.0 > f64::from(bp) => Some(Breach::Loss {
                percent: loss * 100.0,
                max: f64::from(bp) / 100.0,
            }),
            _ => None,
        };
        if let Some(breach) = breach {
            self.within_since = None;
            if self.cut_since.is_none() {
                self.cut_since = Some(now);
                return Some(CutChange::Cut(breach));
            }
            return None;
        }
        let cut_since = self.cut_since?;
        let within = *self.within_since.get_or_insert(now);
        if now.saturating_since(within) < hold {
            return None;
        }
        self.cut_since = None;
        self.within_since = None;
        Some(CutChange::Restored {
            cut_for: now.saturating_since(cut_since),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const HOLD: Duration = Duration::from_secs(5);

    fn at(ms: u64) -> Instant {
        Instant::ZERO + MS * ms as u32
    }

    fn rtt_limit(ms: u64) -> QualityLimits {
        QualityLimits {
            max_rtt: Some(Duration::from_millis(ms)),
            ..QualityLimits::default()
        }
    }

    #[test]
    fn a_round_trip_beyond_the_limit_cuts_at_once_and_returns_after_the_hold_within() {
        let limits = rtt_limit(100);
        let mut c = Cutoff::default();
        let rtt = |ms| (Duration::from_millis(ms), 0, 0);
        assert_eq!(c.observe(&limits, rtt(60), HOLD, at(0)), None);
        assert_eq!(
            c.observe(&limits, rtt(250), HOLD, at(100)),
            Some(CutChange::Cut(Breach::Rtt {
                rtt: Duration::from_millis(250),
                max: Duration::from_millis(100)
            }))
        );
        assert!(c.is_cut());
        // Within from 1 s, beyond again at 3 s: the hold starts over at 3.1 s.
        assert_eq!(c.observe(&limits, rtt(60), HOLD, at(1000)), None);
        assert_eq!(c.observe(&limits, rtt(150), HOLD, at(3000)), None);
        assert_eq!(c.observe(&limits, rtt(60), HOLD, at(3100)), None);
        assert_eq!(c.observe(&limits, rtt(60), HOLD, at(8099)), None);
        assert_eq!(
            c.observe(&limits, rtt(60), HOLD, at(8100)),
            Some(CutChange::Restored {
                cut_for: Duration::from_millis(8000)
            })
        );
        assert!(!c.is_cut());
    }

    #[test]
    fn loss_is_judged_over_windows_of_enough_packets() {
        let limits = QualityLimits {
            max_loss_bp: Some(500), // 5 %
            ..QualityLimits::default()
        };
        let mut c = Cutoff::default();
        let rtt = Duration::from_millis(20);
        c.observe(&limits, (rtt, 0, 0), HOLD, at(0));
        // 20 packets in 5 s, 10 lost: too few to judge.
        assert_eq!(c.observe(&limits, (rtt, 20, 10), HOLD, at(5000)), None);
        // 100 in 6 s, 4 lost: 4 %, within.
        assert_eq!(c.observe(&limits, (rtt, 100, 4), HOLD, at(6000)), None);
        assert!(!c.is_cut());
        // The next window: 100 more, 10 lost: 10 %.
        let change = c.observe(&limits, (rtt, 200, 14), HOLD, at(11_000));
        assert!(
            matches!(change, Some(CutChange::Cut(Breach::Loss { percent, max })) if (percent - 10.0).abs() < 1e-9 && max == 5.0),
            "{change:?}"
        );
        // A clean window, then the hold.
        assert_eq!(c.observe(&limits, (rtt, 300, 14), HOLD, at(16_000)), None);
        assert!(matches!(
            c.observe(&limits, (rtt, 400, 14), HOLD, at(21_000)),
            Some(CutChange::Restored { .. })
        ));
    }

    #[test]
    fn without_limits_nothing_is_cut_and_removing_them_restores() {
        let mut c = Cutoff::default();
        let none = QualityLimits::default();
        let huge = (Duration::from_secs(3), 1000, 900);
        assert_eq!(c.observe(&none, huge, HOLD, at(0)), None);
        let limits = rtt_limit(100);
        assert!(matches!(
            c.observe(&limits, huge, HOLD, at(10)),
            Some(CutChange::Cut(_))
        ));
        assert!(matches!(
            c.observe(&none, huge, HOLD, at(20)),
            Some(CutChange::Restored { .. })
        ));
    }
}
