//! Data caps: an uplink billed by the byte carries at most so many bytes a period
//! (a day, a week, a month, or a fixed span), counted both ways on the wire. Warned
//! at configured fractions; at the cap the uplink is demoted (cold standby, or off)
//! until the period resets. Pure: the shell hands in the bytes each uplink carried
//! and the wall-clock time (seconds since the Unix epoch, UTC), persists
//! [`CapLedger::usage`] and acts on the events.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

const DAY: u64 = 86_400;

/// When a cap's period starts over (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapPeriod {
    /// Every day at 00:00.
    Day,
    /// Every week on `weekday` (1 Monday to 7 Sunday) at 00:00.
    Week { weekday: u8 },
    /// Every month on `day` (1 to 28) at 00:00.
    Month { day: u8 },
    /// Every so many seconds from the epoch: shorter periods, for tests.
    Every { seconds: u64 },
}

impl CapPeriod {
    /// The start of the period that holds `now` (Unix seconds).
    pub fn start(self, now: u64) -> u64 {
        match self {
            CapPeriod::Day => now - now % DAY,
            CapPeriod::Every { seconds } => now - now % seconds.max(1),
            CapPeriod::Week { weekday } => {
                let today = now / DAY;
                // 1970-01-01 was a Thursday (weekday 4).
                let weekday_today = (today + 3) % 7 + 1;
                let back = (weekday_today + 7 - u64::from(weekday)) % 7;
                (today - back) * DAY
            }
            CapPeriod::Month { day } => {
                let (mut y, mut m, d) = civil_from_days(now / DAY);
                if d < u64::from(day) {
                    (y, m) = if m == 1 { (y - 1, 12) } else { (y, m - 1) };
                }
                days_from_civil(y, m, u64::from(day)) * DAY
            }
        }
    }
}

/// The calendar date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (i64, u64, u64) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day count since 1970-01-01 of a calendar date.
fn days_from_civil(y: i64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe - 719_468).max(0) as u64
}

/// What an uplink at its cap becomes until the period resets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CapAction {
    /// Dialled only when every other uplink is down.
    #[default]
    Cold,
    /// Not dialled at all.
    Off,
}

/// One uplink's cap.
#[derive(Debug, Clone, PartialEq)]
pub struct DataCap {
    pub bytes: u64,
    pub period: CapPeriod,
    /// Fractions of the cap (0 to 1, ascending) at which a warning is given.
    pub warn_at: Vec<f64>,
    pub action: CapAction,
}

/// An uplink's count in its current period, as persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CapUsage {
    /// The period's start (Unix seconds).
    pub period_start: u64,
    pub used_bytes: u64,
}

/// What the shell must act on.
#[derive(Debug, Clone, PartialEq)]
pub enum CapEvent {
    /// `used` bytes reached `fraction` of the cap.
    Warn {
        uplink: String,
        fraction: f64,
        used: u64,
    },
    /// At the cap: demoted until `resets_at` (Unix seconds).
    Reached { uplink: String, used: u64 },
    /// A new period: the count starts over and a demoted uplink is back.
    Reset { uplink: String, was: u64 },
}

/// Every capped uplink's count.
#[derive(Debug, Clone, Default)]
pub struct CapLedger {
    caps: BTreeMap<String, DataCap>,
    usage: BTreeMap<String, CapUsage>,
}

impl CapLedger {
    /// A ledger of `caps`, carrying on from `persisted` counts (those of uplinks
    /// without a cap are dropped; one from an earlier period starts over at the
    /// first [`CapLedger::account`]).
    pub fn new(caps: BTreeMap<String, DataCap>, persisted: &BTreeMap<String, CapUsage>) -> Self {
        let usage = caps
            .keys()
            .map(|u| (u.clone(), persisted.get(u).copied().unwrap_or_default()))
            .collect();
        CapLedger { caps, usage }
    }

    /// The caps of a reloaded configuration; counts carry on.
    pub fn set_caps(&mut self, caps: BTreeMap<String, DataCap>) {
        let usage = std::mem::take(&mut self.usage);
        *self = CapLedger::new(caps, &usage);
    }

    pub fn usage(&self) -> &BTreeMap<String, CapUsage> {
        &self.usage
    }

    pub fn cap(&self, uplink: &str) -> Option<&DataCap> {
        self.caps.get(uplink)
    }

    /// Whether `uplink` is at its cap in the current period.
    pub fn capped(&self, uplink: &str) -> Option<CapAction> {
        let cap = self.caps.get(uplink)?;
        let used = self.usage.get(uplink)?.used_bytes;
        (used >= cap.bytes).then_some(cap.action)
    }

    /// Counts `bytes` more on `uplink` at `now` (Unix seconds); what changed. An
    /// uplink without a cap is not counted.
    pub fn account(&mut self, uplink: &str, bytes: u64, now: u64) -> Vec<CapEvent> {
        let mut events = Vec::new();
        let (Some(cap), Some(usage)) = (self.caps.get(uplink), self.usage.get_mut(uplink)) else {
            return events;
        };
        let start = cap.period.start(now);
        if usage.period_start != start {
            if usage.period_start != 0 || usage.used_bytes != 0 {
                events.push(CapEvent::Reset {
                    uplink: uplink.to_string(),
                    was: usage.used_bytes,
                });
            }
            *usage = CapUsage {
                period_start: start,
                used_bytes: 0,
            };
        }
        let before = usage.used_bytes;
        usage.used_bytes = before.saturating_add(bytes);
        let after = usage.used_bytes;
        for &fraction in &cap.warn_at {
            let at = (cap.bytes as f64 * fraction) as u64;
            if before < at && after >= at {
                events.push(CapEvent::Warn {
                    uplink: uplink.to_string(),
                    fraction,
                    used: after,
                });
            }
        }
        if before < cap.bytes && after >= cap.bytes {
            events.push(CapEvent::Reached {
                uplink: uplink.to_string(),
                used: after,
            });
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-06 (a Sunday) 13:45:00 UTC.
    const NOW: u64 = 1_796_564_700;

    #[test]
    fn periods_start_where_the_calendar_says() {
        assert_eq!(civil_from_days(NOW / DAY), (2026, 12, 6));
        assert_eq!(CapPeriod::Day.start(NOW), NOW - 13 * 3600 - 45 * 60);
        let midnight = CapPeriod::Day.start(NOW);
        // Weekly on Mondays: six days back; on Sundays: today.
        assert_eq!(
            CapPeriod::Week { weekday: 1 }.start(NOW),
            midnight - 6 * DAY
        );
        assert_eq!(CapPeriod::Week { weekday: 7 }.start(NOW), midnight);
        // Monthly on the 1st: 2026-12-01; on the 15th: 2026-11-15.
        assert_eq!(CapPeriod::Month { day: 1 }.start(NOW), midnight - 5 * DAY);
        assert_eq!(
            CapPeriod::Month { day: 15 }.start(NOW),
            days_from_civil(2026, 11, 15) * DAY
        );
        // In January, a period from the 15th starts in December of the year before.
        let jan3 = days_from_civil(2027, 1, 3) * DAY + 100;
        assert_eq!(
            civil_from_days(CapPeriod::Month { day: 15 }.start(jan3) / DAY),
            (2026, 12, 15)
        );
        assert_eq!(CapPeriod::Every { seconds: 60 }.start(NOW + 59), NOW);
    }

    fn ledger(action: CapAction) -> CapLedger {
        let cap = DataCap {
            bytes: 20_000_000,
            period: CapPeriod::Every { seconds: 60 },
            warn_at: vec![0.5, 0.9],
            action,
        };
        CapLedger::new(BTreeMap::from([("lte".to_string(), cap)]), &BTreeMap::new())
    }

    #[test]
    fn the_count_warns_demotes_at_the_cap_and_starts_over_with_the_period() {
        let mut l = ledger(CapAction::Cold);
        assert_eq!(l.account("lte", 9_000_000, NOW), []);
        let events = l.account("lte", 2_000_000, NOW + 1);
        assert_eq!(
            events,
            [CapEvent::Warn {
                uplink: "lte".into(),
                fraction: 0.5,
                used: 11_000_000
            }]
        );
        assert_eq!(l.capped("lte"), None);
        let events = l.account("lte", 10_000_000, NOW + 2);
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(
            events[1],
            CapEvent::Reached {
                used: 21_000_000,
                ..
            }
        ));
        assert_eq!(l.capped("lte"), Some(CapAction::Cold));
        // More is counted (what the other end still sent), but not warned again.
        assert_eq!(l.account("lte", 1_000_000, NOW + 3), []);
        // The next period: reset, and back.
        let events = l.account("lte", 0, NOW + 60);
        assert_eq!(
            events,
            [CapEvent::Reset {
                uplink: "lte".into(),
                was: 22_000_000
            }]
        );
        assert_eq!(l.capped("lte"), None);
        assert_eq!(l.account("dsl", 5, NOW), [], "no cap: not counted");
    }

    #[test]
    fn a_restart_carries_the_count_within_its_period_but_not_beyond() {
        let mut l = ledger(CapAction::Off);
        l.account("lte", 20_000_000, NOW);
        let persisted = l.usage().clone();
        let caps = BTreeMap::from([("lte".to_string(), l.cap("lte").unwrap().clone())]);
        let mut again = CapLedger::new(caps.clone(), &persisted);
        assert_eq!(again.capped("lte"), Some(CapAction::Off));
        assert_eq!(again.account("lte", 1, NOW + 30), []);
        let mut later = CapLedger::new(caps, &persisted);
        assert!(matches!(
            later.account("lte", 1, NOW + 90)[..],
            [CapEvent::Reset { .. }]
        ));
        assert_eq!(later.capped("lte"), None);
    }
}
