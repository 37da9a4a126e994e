//! Per-site state: the site's lanes as the scheduler sees them, its schedulers, its
//! sequence numbers and resequencer, and the routing of destinations to sites.

use std::time::Duration;

use ipnet::IpNet;

use crate::core::aqm::StripedDrops;
use crate::core::duplicate_budget::DuplicateBudget;
use crate::core::flow::FlowTable;
use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::reseq::{RESEQ_MIN_DEADLINE, Resequencer};
use crate::core::route::PrefixMap;
use crate::core::sched::{Algorithm, Scheduler};
use crate::core::site::SiteIdx;
use crate::core::tiers::Tiers;
use crate::core::time::Instant;

use super::DataPath;
use super::background::QueueSamples;
use super::config::{Shard, SiteSpec};

pub(super) struct Site {
    pub id: String,
    /// The site's LAN prefixes (exit only).
    pub prefixes: Vec<IpNet>,
    /// False once a reload removed the site: its lanes are closed and refused, and
    /// nothing is routed to it. It keeps its index should it come back.
    pub served: bool,
    /// Snapshots of the site's lanes, in the order they came up.
    pub lanes: Vec<LaneView>,
    /// By the packets' `Colour as usize`: a flow has one colour.
    pub schedulers: [Box<dyn Scheduler>; 2],
    /// Sequence number of the next packet sent to this site.
    pub tx_seq: u32,
    /// Puts this site's striped flows back in order and counts reordering.
    pub reseq: Resequencer,
    /// Flows the receiver resequences that the lanes' CoDel dropped a packet of: until
    /// when it drops no other, on whichever lane ([`aqm::resequenced_drop_spacing`]).
    pub resequenced_drops: FlowTable<Instant>,
    /// When the lanes' CoDel may drop a packet of any flow the receiver resequences
    /// (all blue: green flows are never striped).
    pub striped_drops: StripedDrops,
    /// What the copies of the site's `duplicate` applications may still add.
    pub duplicate_budget: DuplicateBudget,
    /// When a lane of its carrying tier was last given up (the tier is in doubt
    /// for a while after), and what copies of its sparse flows may still add to a
    /// standby uplink (`standby_copies.rs`).
    pub tier_doubted_at: Option<Instant>,
    pub standby_copy_budget: DuplicateBudget,
    /// The lanes' queue over the background applications' control interval.
    pub background_queue: QueueSamples,
    /// Which of its uplinks' tiers carry (`standby.rs`).
    pub tiers: Tiers,
    /// When a packet of its flows last crossed (none yet: quiet), and when it last
    /// became active after being quiet (`quiet.rs`).
    pub carried_at: Option<Instant>,
    pub active_since: Instant,
}

impl Site {
    pub(super) fn new(
        spec: &SiteSpec,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
    ) -> Site {
        Site {
            id: spec.id.clone(),
            prefixes: spec.prefixes.clone(),
            served: true,
            lanes: Vec::new(),
            schedulers: schedulers(algorithm, flow_idle_timeout, max_flows),
            tx_seq: 0,
            reseq: Resequencer::new(flow_idle_timeout, max_flows, RESEQ_MIN_DEADLINE),
            resequenced_drops: FlowTable::new(flow_idle_timeout, max_flows),
            striped_drops: StripedDrops::default(),
            duplicate_budget: DuplicateBudget::default(),
            tier_doubted_at: None,
            standby_copy_budget: DuplicateBudget::default(),
            background_queue: QueueSamples::default(),
            tiers: Tiers::default(),
            carried_at: None,
            active_since: Instant::ZERO,
        }
    }
}

/// A site's schedulers by colour. Green flows are not striped (`afmt` is
/// `afmt-flowlet` for them): the receiver's resequencing would add its deadline to
/// their delay, and a green packet DSD drops as stale after it was numbered would
/// hold its flow's next packets for a whole deadline. Moved between lanes only where
/// the flowlet rule allows, they stay in order without it.
pub(super) fn schedulers(
    algorithm: Algorithm,
    flow_idle_timeout: Duration,
    max_flows: usize,
) -> [Box<dyn Scheduler>; 2] {
    let green = match algorithm {
        Algorithm::Afmt => Algorithm::AfmtFlowlet,
        other => other,
    };
    [green, algorithm].map(|a| a.build(flow_idle_timeout, max_flows))
}

/// Which served site each destination prefix belongs to.
pub(super) fn prefix_map(sites: &[Site]) -> PrefixMap<SiteIdx> {
    let mut map = PrefixMap::default();
    for (i, site) in sites.iter().enumerate().filter(|(_, s)| s.served) {
        for p in &site.prefixes {
            map.insert(*p, SiteIdx(i as u32));
        }
    }
    map
}

/// The scheduler's view of a lane of `site`.
pub(super) fn view_mut(sites: &mut [Site], site: SiteIdx, lane: LaneId) -> Option<&mut LaneView> {
    sites[site.0 as usize]
        .lanes
        .iter_mut()
        .find(|v| v.id == lane)
}

/// Where the lanes of `colour` are among a site's lanes, which are grouped by colour.
pub(super) fn lanes_of(lanes: &[LaneView], colour: Colour) -> std::ops::Range<usize> {
    lanes.partition_point(|v| v.colour < colour)..lanes.partition_point(|v| v.colour <= colour)
}

impl DataPath {
    /// The index of the served site with this id.
    pub fn site_index(&self, id: &str) -> Option<SiteIdx> {
        self.sites
            .iter()
            .position(|s| s.id == id && s.served)
            .map(|i| SiteIdx(i as u32))
    }

    /// Whether this thread serves the site (see [`Shard`]).
    pub fn owns(&self, site: SiteIdx) -> bool {
        Shard::of(site, self.shard.count) == self.shard.index
    }

    /// Whether the site is served (a reload may have removed it).
    pub fn site_served(&self, site: SiteIdx) -> bool {
        self.sites[site.0 as usize].served
    }

    pub fn site_id(&self, site: SiteIdx) -> &str {
        &self.sites[site.0 as usize].id
    }

    /// Every site by index, served or removed by a reload.
    pub fn sites(&self) -> impl Iterator<Item = (SiteIdx, &str)> {
        self.sites
            .iter()
            .enumerate()
            .map(|(i, s)| (SiteIdx(i as u32), s.id.as_str()))
    }
}
