//! Uplink tiers: which uplinks of a site carry traffic now.
//!
//! Each uplink has a `priority` (1 is highest). Traffic goes over the best tier that
//! has an uplink up (the *active* tier); the uplinks of lower tiers stand by. A lower
//! tier takes over at once when every uplink of the active one is down, and gives the
//! traffic back once a better tier has been up for [`TierSettings::hold`] without a
//! break, so that an uplink that flaps does not pull traffic back and forth. Uplinks
//! marked `overflow` below the active tier also carry while the active tier is
//! exhausted: its uplinks' queues have been full for most of
//! [`TierSettings::overflow_after`]; they stop once the queues have been short for a
//! hold time.
//!
//! A standby uplink is `warm` (its lanes stay connected, keep-alives only) or `cold`
//! (dialled only when [`Tiers::wanted`] says so, for uplinks billed by the byte).
//! Pure: the engine hands in what each uplink looks like and the time.

use std::time::Duration;

use crate::core::time::Instant;

/// The fraction of the time the active tier's queues must have been full, averaged
/// over [`TierSettings::overflow_after`], before the overflow tier joins; below
/// [`OVERFLOW_CALM`] the time to leave again starts.
pub const OVERFLOW_FULL: f64 = 0.8;
pub const OVERFLOW_CALM: f64 = 0.3;
/// After the gateway starts, cold uplinks are not dialled for this long: the better
/// tiers' lanes are still handshaking, not down.
pub const COLD_START_GRACE: Duration = Duration::from_secs(3);
/// A cold uplink stays connected this long after its tier stopped carrying, so that
/// what the other gateway still sends it (it judges its own hold) arrives.
pub const COLD_LINGER: Duration = Duration::from_secs(2);

/// The gateway-wide timing of the tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierSettings {
    /// How long a better tier must have been up before traffic returns to it, and
    /// how long an overflow must have been unneeded before it stops.
    pub hold: Duration,
    /// How long the active tier must have been full before the overflow tier joins.
    pub overflow_after: Duration,
}

impl Default for TierSettings {
    fn default() -> TierSettings {
        TierSettings {
            hold: Duration::from_secs(10),
            overflow_after: Duration::from_secs(2),
        }
    }
}

/// One uplink as the tier policy sees it at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierMember {
    pub priority: u32,
    /// May carry traffic when the tiers above are exhausted.
    pub overflow: bool,
    /// Has a lane that is up.
    pub up: bool,
    /// Its lanes that are up all have a full queue.
    pub full: bool,
}

/// What carries traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Carrying {
    /// The active tier; `None` while no uplink has ever been up.
    pub tier: Option<u32>,
    /// The overflow uplinks below the active tier carry too.
    pub overflow: bool,
}

impl Carrying {
    /// Whether an uplink of `priority`, marked `overflow` or not, carries traffic.
    pub fn carries(self, priority: u32, overflow: bool) -> bool {
        match self.tier {
            None => true,
            Some(tier) => priority == tier || (self.overflow && overflow && priority > tier),
        }
    }
}

/// The tier state of one site.
#[derive(Debug, Clone, Default)]
pub struct Tiers {
    carrying: Carrying,
    /// A better tier than the active one that is up, and since when without a break.
    better: Option<(u32, Instant)>,
    /// The best tier ever up: a better one comes up for the first time (the lanes
    /// connect in any order at a start), not back, and takes over without a hold.
    best_ever: Option<u32>,
    /// The time-weighted share of the recent past the active tier was full (0 to 1),
    /// and when it was last updated.
    fullness: f64,
    observed_at: Option<Instant>,
    /// Since when an overflow has been unneeded (fullness below [`OVERFLOW_CALM`]).
    calm_since: Option<Instant>,
    /// What carried before the last change, and when it changed.
    before: Option<(Carrying, Instant)>,
}

impl Tiers {
    pub fn carrying(&self) -> Carrying {
        self.carrying
    }

    /// The best tier ever up.
    pub fn best_ever(&self) -> Option<u32> {
        self.best_ever
    }

    /// Decides what carries from `members` (every uplink of the site that has lanes
    /// or is configured) at `now`. Called at every sample of the site's lanes (at
    /// least every 100 ms), which times the holds.
    pub fn decide(
        &mut self,
        members: &[TierMember],
        settings: &TierSettings,
        now: Instant,
    ) -> Carrying {
        let was = self.carrying;
        let best_up = members.iter().filter(|m| m.up).map(|m| m.priority).min();
        let active_up = self
            .carrying
            .tier
            .is_some_and(|t| members.iter().any(|m| m.up && m.priority == t));
        match (self.carrying.tier, best_up) {
            (_, None) => self.better = None,
            // None carried yet, or the active tier is down: the best one up takes
            // over at once.
            (None, Some(best)) => self.switch_to(best, now),
            (Some(_), Some(best)) if !active_up => self.switch_to(best, now),
            (Some(_), Some(best)) if self.best_ever.is_none_or(|ever| best < ever) => {
                self.switch_to(best, now);
            }
            (Some(active), Some(best)) if best < active => {
                let since = match self.better {
                    Some((tier, since)) if tier == best => since,
                    _ => now,
                };
                self.better = Some((best, since));
                if now >= since.saturating_add(settings.hold) {
                    self.switch_to(best, now);
                }
            }
            (Some(_), Some(_)) => self.better = None,
        }
        if let Some(best) = best_up {
            self.best_ever = Some(self.best_ever.map_or(best, |ever| ever.min(best)));
        }
        self.judge_overflow(members, settings, now);
        if self.carrying != was {
            self.before = Some((was, now));
        }
        self.carrying
    }

    /// Whether a decision waits on time at `now`: a better tier's hold, an
    /// overflow's calm, or a cold uplink's linger after a change. While none does, a
    /// decision changes only with its members.
    pub fn waiting(&self, now: Instant) -> bool {
        self.better.is_some()
            || self.carrying.overflow
            || self.calm_since.is_some()
            || self
                .before
                .is_some_and(|(_, at)| now < at.saturating_add(COLD_LINGER))
    }

    fn switch_to(&mut self, tier: u32, now: Instant) {
        if self.carrying.tier != Some(tier) {
            self.carrying = Carrying {
                tier: Some(tier),
                overflow: false,
            };
            self.fullness = 0.0;
            self.calm_since = None;
            self.observed_at = Some(now);
        }
        self.better = None;
    }

    /// Follows how full the active tier is and starts or stops the overflow.
    fn judge_overflow(&mut self, members: &[TierMember], settings: &TierSettings, now: Instant) {
        let Some(tier) = self.carrying.tier else {
            return;
        };
        if !members.iter().any(|m| m.overflow && m.priority > tier) {
            self.carrying.overflow = false;
            return;
        }
        let mut active = members.iter().filter(|m| m.up && m.priority == tier);
        let full = active.clone().next().is_some() && active.all(|m| m.full);
        // An average over about `overflow_after`: each observation weighs by the
        // time since the last one.
        let elapsed = self
            .observed_at
            .map_or(0.0, |at| now.saturating_since(at).as_secs_f64());
        let span = settings.overflow_after.as_secs_f64().max(1e-3);
        let weight = (elapsed / span).min(1.0);
        self.fullness += weight * (f64::from(u8::from(full)) - self.fullness);
        self.observed_at = Some(now);
        if !self.carrying.overflow {
            if self.fullness >= OVERFLOW_FULL {
                self.carrying.overflow = true;
                self.calm_since = None;
            }
        } else if self.fullness >= OVERFLOW_CALM {
            self.calm_since = None;
        } else {
            let since = *self.calm_since.get_or_insert(now);
            if now >= since.saturating_add(settings.hold) {
                self.carrying.overflow = false;
                self.calm_since = None;
            }
        }
    }

    /// Whether a cold uplink of `priority` (marked `overflow` or not) should be
    /// dialled at `now`: it carries, or did until [`COLD_LINGER`] ago, or every
    /// better uplink is down, except while the gateway is `starting` (its first
    /// [`COLD_START_GRACE`]: the better ones are still connecting).
    pub fn wanted(
        &self,
        members: &[TierMember],
        (priority, overflow): (u32, bool),
        starting: bool,
        now: Instant,
    ) -> bool {
        if self.carrying.tier.is_some() && self.carrying.carries(priority, overflow) {
            return true;
        }
        if let Some((before, until)) = self.before
            && before.tier.is_some()
            && before.carries(priority, overflow)
            && now < until.saturating_add(COLD_LINGER)
        {
            return true;
        }
        let better_up = members.iter().any(|m| m.up && m.priority < priority);
        !better_up && !starting
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn at(ms: u64) -> Instant {
        Instant::ZERO + MS * ms as u32
    }

    fn member(priority: u32, up: bool) -> TierMember {
        TierMember {
            priority,
            overflow: false,
            up,
            full: false,
        }
    }

    fn settings() -> TierSettings {
        TierSettings {
            hold: Duration::from_secs(5),
            overflow_after: Duration::from_secs(1),
        }
    }

    #[test]
    fn the_best_tier_up_carries_and_the_others_stand_by() {
        let mut tiers = Tiers::default();
        let members = [member(1, true), member(1, true), member(2, true)];
        let c = tiers.decide(&members, &settings(), at(10));
        assert_eq!(c.tier, Some(1));
        assert!(c.carries(1, false));
        assert!(!c.carries(2, false));
        assert!(!c.carries(2, true), "no overflow while not full");
    }

    #[test]
    fn one_primary_down_keeps_the_other_all_down_fails_over_at_once() {
        let s = settings();
        let mut tiers = Tiers::default();
        tiers.decide(
            &[member(1, true), member(1, true), member(2, true)],
            &s,
            at(0),
        );
        let c = tiers.decide(
            &[member(1, false), member(1, true), member(2, true)],
            &s,
            at(100),
        );
        assert_eq!(c.tier, Some(1), "a primary is still up");
        let c = tiers.decide(
            &[member(1, false), member(1, false), member(2, true)],
            &s,
            at(200),
        );
        assert_eq!(c.tier, Some(2), "failover takes no hold");
    }

    #[test]
    fn traffic_returns_after_the_hold_and_a_flap_restarts_it() {
        let s = settings();
        let mut tiers = Tiers::default();
        let down = [member(1, false), member(2, true)];
        let up = [member(1, true), member(2, true)];
        tiers.decide(&up, &s, at(0));
        assert_eq!(tiers.decide(&down, &s, at(1000)).tier, Some(2));
        // Back at 2 s: returns at 7 s, not before.
        assert_eq!(tiers.decide(&up, &s, at(2000)).tier, Some(2));
        assert_eq!(tiers.decide(&up, &s, at(3999)).tier, Some(2));
        // It flaps at 4 s: the hold starts over when it is back at 4.5 s.
        assert_eq!(tiers.decide(&down, &s, at(4000)).tier, Some(2));
        assert_eq!(tiers.decide(&up, &s, at(4500)).tier, Some(2));
        assert_eq!(tiers.decide(&up, &s, at(9499)).tier, Some(2));
        assert_eq!(tiers.decide(&up, &s, at(9500)).tier, Some(1));
    }

    #[test]
    fn a_decision_waits_on_time_only_while_a_hold_or_linger_runs() {
        let s = settings();
        let mut tiers = Tiers::default();
        let down = [member(1, false), member(2, true)];
        let up = [member(1, true), member(2, true)];
        tiers.decide(&up, &s, at(0));
        assert!(tiers.waiting(at(0)), "the first decision lingers");
        assert!(!tiers.waiting(at(0) + COLD_LINGER));
        tiers.decide(&down, &s, at(10_000));
        tiers.decide(&up, &s, at(20_000));
        assert!(tiers.waiting(at(20_000)), "the primary's hold runs");
        assert_eq!(tiers.decide(&up, &s, at(25_000)).tier, Some(1));
        assert!(tiers.waiting(at(25_000)), "the backup lingers");
        assert!(!tiers.waiting(at(25_000) + COLD_LINGER), "settled");
    }

    #[test]
    fn a_tier_flapping_faster_than_the_hold_never_takes_traffic_back() {
        let s = settings();
        let mut tiers = Tiers::default();
        tiers.decide(&[member(1, true), member(2, true)], &s, at(0));
        tiers.decide(&[member(1, false), member(2, true)], &s, at(0));
        let mut switches = 0;
        let mut last = tiers.carrying().tier;
        for second in 1..60u64 {
            let up = second % 4 != 0; // down one second in four
            let c = tiers.decide(&[member(1, up), member(2, true)], &s, at(second * 1000));
            if c.tier != last {
                switches += 1;
                last = c.tier;
            }
        }
        assert_eq!(switches, 0);
    }

    #[test]
    fn a_better_tier_up_for_the_first_time_takes_over_without_a_hold() {
        // At a start the backup's lanes came up first.
        let s = settings();
        let mut tiers = Tiers::default();
        assert_eq!(
            tiers
                .decide(&[member(1, false), member(2, true)], &s, at(0))
                .tier,
            Some(2)
        );
        let up = [member(1, true), member(2, true)];
        assert_eq!(tiers.decide(&up, &s, at(50)).tier, Some(1));
        // Down and back: now it is held.
        assert_eq!(
            tiers
                .decide(&[member(1, false), member(2, true)], &s, at(100))
                .tier,
            Some(2)
        );
        assert_eq!(tiers.decide(&up, &s, at(200)).tier, Some(2));
    }

    #[test]
    fn with_nothing_up_the_tier_stays_and_the_first_back_takes_over() {
        let s = settings();
        let mut tiers = Tiers::default();
        assert_eq!(tiers.decide(&[member(1, false)], &s, at(0)).tier, None);
        assert!(
            tiers.carrying().carries(1, false),
            "nothing decided: all carry"
        );
        tiers.decide(&[member(1, true), member(2, true)], &s, at(10));
        let c = tiers.decide(&[member(1, false), member(2, false)], &s, at(20));
        assert_eq!(c.tier, Some(1));
        let c = tiers.decide(&[member(1, false), member(2, true)], &s, at(30));
        assert_eq!(c.tier, Some(2));
    }

    fn loaded(full: bool) -> [TierMember; 3] {
        [
            TierMember {
                full,
                ..member(1, true)
            },
            TierMember {
                overflow: true,
                ..member(2, true)
            },
            member(3, true),
        ]
    }

    #[test]
    fn the_overflow_tier_joins_once_the_active_one_is_full_and_leaves_after_the_hold() {
        let s = settings();
        let mut tiers = Tiers::default();
        tiers.decide(&loaded(false), &s, at(0));
        // Full at every 100 ms sample: joins after about the overflow time.
        let mut joined = None;
        for t in (100..3000).step_by(100) {
            if tiers.decide(&loaded(true), &s, at(t)).overflow {
                joined = Some(t);
                break;
            }
        }
        let joined = joined.expect("the overflow tier never joined");
        assert!((1000..=2000).contains(&joined), "joined at {joined} ms");
        let c = tiers.carrying();
        assert!(c.carries(2, true) && !c.carries(3, false));
        // Calm: it stays for the hold, then leaves.
        let mut left = None;
        for t in (joined + 100..joined + 10_000).step_by(100) {
            if !tiers.decide(&loaded(false), &s, at(t)).overflow {
                left = Some(t - joined);
                break;
            }
        }
        let left = left.expect("the overflow never stopped");
        assert!(
            (5000..=7000).contains(&left),
            "left {left} ms after joining"
        );
    }

    #[test]
    fn a_tier_full_now_and_then_does_not_overflow() {
        let s = settings();
        let mut tiers = Tiers::default();
        for t in (0..20_000).step_by(100) {
            let full = t % 300 == 0; // a third of the samples
            assert!(!tiers.decide(&loaded(full), &s, at(t)).overflow, "at {t}");
        }
    }

    #[test]
    fn a_cold_uplink_is_wanted_when_the_better_ones_are_down_but_not_at_start() {
        let s = settings();
        let mut tiers = Tiers::default();
        let down = [member(1, false)];
        tiers.decide(&down, &s, at(100));
        assert!(
            !tiers.wanted(&down, (2, false), true, at(100)),
            "still starting"
        );
        assert!(tiers.wanted(&down, (2, false), false, at(3000)));
        let up = [member(1, true)];
        tiers.decide(&up, &s, at(3100));
        assert!(!tiers.wanted(&up, (2, false), false, at(3100)));
        // Carrying (the primary went down), it stays wanted through the hold after
        // the primary returns and lingers a little, then is not.
        let both = [member(1, false), member(2, true)];
        tiers.decide(&both, &s, at(4000));
        let back = [member(1, true), member(2, true)];
        tiers.decide(&back, &s, at(5000));
        assert!(tiers.wanted(&back, (2, false), false, at(5000)));
        assert_eq!(tiers.decide(&back, &s, at(10_000)).tier, Some(1));
        assert!(
            tiers.wanted(&back, (2, false), false, at(11_999)),
            "lingers"
        );
        assert!(!tiers.wanted(&back, (2, false), false, at(12_000)));
        // An overflow uplink is wanted while the overflow carries.
        let mut tiers = Tiers::default();
        tiers.decide(&loaded(false), &s, at(0));
        assert!(!tiers.wanted(&loaded(false), (2, true), false, at(0)));
        for t in (100..3000).step_by(100) {
            tiers.decide(&loaded(true), &s, at(t));
        }
        assert!(tiers.wanted(&loaded(true), (2, true), false, at(3000)));
    }
}
