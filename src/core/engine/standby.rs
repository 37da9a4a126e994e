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

    /// Carries traffic: healthy, of a tier that carries, not replaced, not cut off.
    pub(super) fn carries(&self) -> bool {
        self.healthy && !self.standby && !self.retired && !self.cut_off()
    }

    /// Stands by, ready: healthy, of a tier that does not carry now, not replaced,
    /// not cut off.
    pub(super) fn stands_by(&self) -> bool {
        self.healthy && self.standby && !self.retired && !self.cut_off()
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
    /// Not dialled at all (an uplink at its data cap, `cap_action = "off"`).
    pub off: bool,
}

/// The entry's shell is to dial an uplink's lanes (`dial`), or to hang them up: a
/// cold one as its tier is wanted or not, one that turned cold or off or back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UplinkDemand {
    pub uplink: String,
    pub dial: bool,
}

/// A configured uplink of the entry's site, and whether it is dialled now.
#[derive(Debug)]
pub(super) struct ConfiguredUplink {
    tier: UplinkTier,
    dialled: bool,
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
    /// The entry's uplinks' tiers and the gateway's tier timing, at the start, at a
    /// reload, and as data caps demote uplinks and give them back. Cold and off
    /// uplinks start hung up (as the shell starts them); a warm one that turns cold
    /// or off is hung up, and one that turns warm again dialled, through
    /// [`DataPath::poll_uplink_demand`]; a cold one is dialled when its tier is
    /// wanted. An entry's own configuration sets its lanes' tiers over what they
    /// came up with.
    pub fn handle_uplink_tiers(
        &mut self,
        uplinks: &[UplinkTier],
        settings: TierSettings,
        now: Instant,
    ) {
        self.tier_settings = settings;
        self.tiers_started.get_or_insert(now);
        let before = std::mem::take(&mut self.configured_uplinks);
        for tier in uplinks {
            let was = before.iter().find(|c| c.tier.name == tier.name);
            let held = tier.cold || tier.off;
            // A warm one is dialled; a held one as it was (the shell starts a new one
            // hung up), until the review below says whether it is wanted.
            let dialled = !held || was.is_some_and(|c| c.dialled);
            if was.is_some_and(|c| c.dialled != dialled) {
                self.uplink_demands.push_back(UplinkDemand {
                    uplink: tier.name.clone(),
                    dial: dialled,
                });
            }
            self.configured_uplinks.push(ConfiguredUplink {
                tier: tier.clone(),
                dialled,
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
            configured_uplinks: configured,
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
            let tier = configured.iter().find(|c| c.tier.name == l.uplink);
            let (priority, overflow) = tier.map_or((l.policy.priority, l.policy.overflow), |c| {
                (c.tier.priority, c.tier.overflow)
            });
            let up = l.up_for_tier() && !tier.is_some_and(|c| c.tier.off);
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
                        priority,
                        overflow,
                        up,
                        full,
                    });
                    scratch.named_by.push(Some(v.id.0 as usize));
                }
            }
        }
        // The entry's uplinks without a lane are members too: down.
        let entry_site = *role == super::Role::Entry;
        if entry_site {
            for c in configured.iter() {
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
            let tier = configured.iter().find(|c| c.tier.name == l.uplink);
            let standby = match tier {
                Some(c) => c.tier.off || !carrying.carries(c.tier.priority, c.tier.overflow),
                None => !carrying.carries(l.policy.priority, l.policy.overflow),
            };
            if standby != l.standby && l.healthy {
                l.state_since = now;
            }
            l.standby = standby;
            v.up = l.carries();
        }
        if entry_site {
            let starting =
                tiers_started.is_none_or(|at| now.saturating_since(at) < COLD_START_GRACE);
            for c in configured.iter_mut().filter(|c| c.tier.cold || c.tier.off) {
                let wanted = !c.tier.off
                    && s.tiers.wanted(
                        &scratch.members,
                        (c.tier.priority, c.tier.overflow),
                        starting,
                        now,
                    );
                if wanted != c.dialled {
                    c.dialled = wanted;
                    uplink_demands.push_back(UplinkDemand {
                        uplink: c.tier.name.clone(),
                        dial: wanted,
                    });
                }
            }
        }
    }
}
