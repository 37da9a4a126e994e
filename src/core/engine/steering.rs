//! Steering: an application that keeps to some uplinks (`uplinks`, `avoid` and
//! `strict` in its site's application table) is scheduled over their lanes only.

use std::ops::Range;

use crate::core::lane::LaneView;
use crate::core::pacing_table::AppIdx;
use crate::core::site::SiteIdx;

use super::DataPath;

/// What an application's steering leaves the scheduler of a colour's lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Steered {
    /// The application keeps to no uplinks: every lane.
    Everywhere,
    /// The lanes of its uplinks, some of them up: [`DataPath::steered_lanes`].
    Allowed,
    /// None of its uplinks has a lane up and it is not `strict`: every lane,
    /// counted.
    Elsewhere,
    /// None of its uplinks has a lane up and it is `strict`: dropped.
    Refused,
}

impl DataPath {
    /// How the application `app` of `site` may use the site's lanes `group` (those of
    /// one colour). For [`Steered::Allowed`] the group's views are copied into
    /// [`DataPath::steered_lanes`] with the lanes of other uplinks marked down, so that
    /// the scheduler, which passes over lanes that are down, picks among the rest at
    /// the same indices. Only a steered application's packets pay for the copy.
    pub(super) fn steer(&mut self, site: SiteIdx, app: AppIdx, group: Range<usize>) -> Steered {
        let Some(spec) = self.pacing.table(site).app(app).filter(|a| a.steered()) else {
            return Steered::Everywhere;
        };
        let lanes = &self.lanes;
        let views = &self.sites[site.0 as usize].lanes[group];
        self.steered_lanes.clear();
        self.steered_lanes.extend(views.iter().map(|v| {
            let allowed = lanes
                .get(v.id.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(|l| spec.allows(&l.uplink));
            LaneView {
                up: v.up && allowed,
                ..*v
            }
        }));
        if self.steered_lanes.iter().any(|v| v.up) {
            Steered::Allowed
        } else if spec.strict {
            Steered::Refused
        } else {
            Steered::Elsewhere
        }
    }
}
