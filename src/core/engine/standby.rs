//! Uplink policy in the data path: which of a site's lanes stand by while a better
//! tier carries ([`crate::core::tiers`] decides), which are cut off for their
//! round trip or loss ([`crate::core::cutoff`]), and which of the entry's cold
//! uplinks its shell should dial.
//!
//! A lane is scheduled (its view `up`) when it is healthy (connected, heard from, not
//! recovering), its uplink's tier carries, and it is not cut off (a cut-off of green
//! traffic takes the green lane only; of all traffic, the uplink counts as down for
//! its tier). The tiers are reviewed whenever a lane of the site is sampled (at least
//! every 100 ms), and at once when one falls silent, so that the next tier takes over
//! before what the silent lane lost is sent again.

use crate::core::cutoff::{CutOff, QualityLimits};
use crate::core::lane::{Colour, LaneView};
use crate::core::site::SiteIdx;
use crate::core::tiers::{COLD_START_GRACE, TierMember, TierSettings};
use crate::core::time::Instant;

use super::DataPath;

/// An uplink's policy, from the entry's configuration or a lane's hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UplinkPolicy {
    /// Its tier, 1 highest.
    pub priority: u32,
    /// Carries when the better tier is full.
    pub overflow: bool,
    pub quality: QualityLimits,
}

impl Default for UplinkPolicy {
    fn default() -> UplinkPolicy {
        UplinkPolicy {
            priority: 1,
            overflow: false,
            quality: QualityLimits::default(),
        }
    }
}

impl super::lanes::Lane {
    /// Cut off for the traffic it carries: its quality is beyond its uplink's
    /// limits, and they cut its colour.
    pub(super) fn cut_off(&self) -> bool {
        self.cutoff.is_cut()
            && (self.policy.quality.cut_off == CutOff::All || self.colour == Colour::Green)
    }

    /// Counts for its uplink's tier: healthy, and not cut off from all traffic.
    fn up_for_tier(&self) -> bool {
        self.healthy && !(self.cutoff.is_cut() && self.policy.quality.cut_off == CutOff::All)
    }
}

/// One configured uplink's place in the tiers (the entry's configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkTier {
    pub name: String,
    pub priority: u32,
    pub overflow: bool,
    /// Dialled only when its tier is wanted.
    pub cold: bool,
}

/// The entry's shell is to dial a cold uplink's lanes (`dial`), or to hang them up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkDemand {
    pub uplink: String,
    pub dial: bool,
}

/// A cold uplink of the entry's site, and whether it is wanted now.
#[derive(Debug)]
pub(super) struct ColdUplink {
    tier: UplinkTier,
    wanted: bool,
}

/// The scratch of a review, kept to allocate nothing once grown: each uplink's
/// member, and a lane of it (an index into the engine's lanes) by which it is named.
#[derive(Debug, Default)]
pub(super) struct TierScratch {
    members: Vec<TierMember>,
    named_by: Vec<Option<usize>>,
}

/// A lane whose queue holds this many of its largest datagrams is full: it carries
/// what its window or its uplink's rate allows, and more waits.
const FULL_DATAGRAMS: u64 = 2;

fn is_full(view: &LaneView) -> bool {
    view.fill >= FULL_DATAGRAMS * view.max_datagram.max(1200) as u64
}

impl DataPath {
    /// The entry's uplinks' tiers and the gateway's tier timing, at the start and at
    /// a reload. Cold uplinks start hung up; the shell dials one when
    /// [`DataPath::poll_uplink_demand`] says so.
    pub fn handle_uplink_tiers(
        &mut self,
        uplinks: &[UplinkTier],
        settings: TierSettings,
        now: Instant,
    ) {
        self.tier_settings = settings;
        self.tiers_started.get_or_insert(now);
        let before = std::mem::take(&mut self.cold_uplinks);
        for tier in uplinks.iter().filter(|u| u.cold) {
            let wanted = before.iter().any(|c| c.wanted && c.tier.name == tier.name);
            self.cold_uplinks.push(ColdUplink {
                tier: tier.clone(),
                wanted,
            });
        }
        for site in 0..self.sites.len() {
            self.review_tiers(SiteIdx(site as u32), now);
        }
    }

    /// The next cold uplink to dial or hang up.
    pub fn poll_uplink_demand(&mut self) -> Option<UplinkDemand> {
        self.uplink_demands.pop_front()
    }

    /// Decides which of `site`'s lanes carry and which stand by, and which cold
    /// uplinks are wanted.
    pub(super) fn review_tiers(&mut self, site: SiteIdx, now: Instant) {
        let DataPath {
            lanes,
            sites,
            tier_scratch: scratch,
            cold_uplinks,
            uplink_demands,
            tier_settings,
            tiers_started,
            role,
            ..
        } = self;
        let Some(s) = sites.get_mut(site.0 as usize) else {
            return;
        };
        scratch.members.clear();
        scratch.named_by.clear();
        for v in &s.lanes {
            let Some(Some(l)) = lanes.get(v.id.0 as usize) else {
                continue;
            };
            if l.retired {
                continue;
            }
            let up = l.up_for_tier();
            let full = up && is_full(v);
            let same = scratch.named_by.iter().position(|n| {
                n.and_then(|n| lanes.get(n)?.as_ref())
                    .is_some_and(|other| other.uplink == l.uplink)
            });
            match same {
                Some(m) => {
                    let member = &mut scratch.members[m];
                    member.up |= up;
                    member.full |= full;
                }
                None => {
                    scratch.members.push(TierMember {
                        priority: l.policy.priority,
                        overflow: l.policy.overflow,
                        up,
                        full,
                    });
                    scratch.named_by.push(Some(v.id.0 as usize));
                }
            }
        }
        // The entry's cold uplinks without a lane are members too: down.
        let entry_site = *role == super::Role::Entry;
        if entry_site {
            for c in cold_uplinks.iter() {
                let has_lane = scratch.named_by.iter().any(|n| {
                    n.and_then(|n| lanes.get(n)?.as_ref())
                        .is_some_and(|l| l.uplink == c.tier.name)
                });
                if !has_lane {
                    scratch.members.push(TierMember {
                        priority: c.tier.priority,
                        overflow: c.tier.overflow,
                        up: false,
                        full: false,
                    });
                    scratch.named_by.push(None);
                }
            }
        }
        let carrying = s.tiers.decide(&scratch.members, tier_settings, now);
        for v in &mut s.lanes {
            let Some(Some(l)) = lanes.get_mut(v.id.0 as usize) else {
                continue;
            };
            let standby = !carrying.carries(l.policy.priority, l.policy.overflow);
            if standby != l.standby && l.healthy {
                l.state_since = now;
            }
            l.standby = standby;
            v.up = l.healthy && !standby && !l.retired && !l.cut_off();
        }
        if entry_site {
            let starting =
                tiers_started.is_none_or(|at| now.saturating_since(at) < COLD_START_GRACE);
            for c in cold_uplinks.iter_mut() {
                let wanted = s.tiers.wanted(
                    &scratch.members,
                    (c.tier.priority, c.tier.overflow),
                    starting,
                    now,
                );
                if wanted != c.wanted {
                    c.wanted = wanted;
                    uplink_demands.push_back(UplinkDemand {
                        uplink: c.tier.name.clone(),
                        dial: wanted,
                    });
                }
            }
        }
    }
}
