//! What the engine counts and reports to the shell: drops by reason, packets per
//! colour, per-lane counters, and snapshots of lanes, shapers and sites.

use crate::core::app_pacing::{AppCounters, AppPacing};
use crate::core::lane::{Colour, LaneId, LaneView};
use crate::core::pacing_table::AppIdx;
use crate::core::reseq::ReseqCounters;
use crate::core::sched::DecisionKind;
use crate::core::site::SiteIdx;
use crate::core::stats::{DelayHistogram, DropReason};
use crate::core::time::Instant;

use super::DataPath;
use super::config::Role;

/// What a lane carried, counted by the engine (decisions, receptions) or passed on
/// from the shell's samples (what quinn sent and lost).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Bytes on the wire both ways, headers counted (`LaneSample::wire_bytes`).
    pub wire_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub lost_packets: u64,
    /// Times the lane was taken out of service because its peer fell silent.
    pub stalls: u64,
    /// Times the lane went beyond its uplink's quality limits (`core::cutoff`).
    pub cutoffs: u64,
    /// Datagrams sent again over the other lanes when it was.
    pub resent: u64,
    /// Probes sent while an answer was overdue (see [`PROBE_INTERVAL`]), and probes
    /// received from the peer.
    pub probes_sent: u64,
    pub probes_received: u64,
    /// Bytes of padding sent to open the lane's window (see `DataPath::open_lanes`).
    pub opening_bytes: u64,
    /// The peer's packets found missing on the lane and reported to it, and the
    /// lane's own packets its peer reported missing that were sent again over the
    /// other lanes (see [`LossReport`]).
    pub loss_reported: u64,
    pub loss_repaired: u64,
    /// Copies of sparse flows' packets it carried as a standby lane while its
    /// site's carrying tier was in doubt (`standby_copies.rs`).
    pub standby_copies: u64,
    /// Scheduler decisions for this lane, indexed like `DecisionKind::ALL`.
    pub decisions: [u64; DecisionKind::ALL.len()],
}

/// What the engine tells about one lane.
#[derive(Debug, Clone, Copy)]
pub struct LaneReport<'a> {
    pub site: SiteIdx,
    pub uplink: &'a str,
    pub view: &'a LaneView,
    pub counters: &'a LaneCounters,
    /// When it last changed state.
    pub state_since: Instant,
    pub state: LaneState,
}

/// A lane's state as the operator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneState {
    /// Carries traffic.
    Up,
    /// Healthy, but its uplink's tier does not carry now (`core::tiers`).
    Standby,
    /// Healthy, but beyond its uplink's quality limits (`core::cutoff`).
    CutOff,
    Down,
    /// Replaced by a newer lane of its uplink and colour.
    Replaced,
}

impl LaneState {
    pub fn as_str(self) -> &'static str {
        match self {
            LaneState::Up => "up",
            LaneState::Standby => "standby",
            LaneState::CutOff => "cut_off",
            LaneState::Down => "down",
            LaneState::Replaced => "replaced",
        }
    }

    /// Connected and heard from: carrying or ready to.
    pub fn healthy(self) -> bool {
        matches!(self, LaneState::Up | LaneState::Standby | LaneState::CutOff)
    }
}

/// Green packets DSD dropped (`abe_green_drops_total{reason}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GreenDrops {
    /// Refused at arrival: they could not have left within `abe.green_delay_ms`.
    pub acceptance: u64,
    /// Waited until they could no longer leave in time.
    pub stale: u64,
}

/// What the engine tells about an uplink's shaper.
#[derive(Debug, Clone, Copy)]
pub struct ShaperReport<'a> {
    pub site: SiteIdx,
    pub uplink: &'a str,
    /// DSD's g.
    pub green_bias: f64,
}

impl DataPath {
    pub fn role(&self) -> Role {
        self.role
    }

    /// Packets dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize]
    }

    /// Packets of `colour` sent so far, and how many of them took the other
    /// colour's lanes because `colour` had none up.
    pub fn colour_packets(&self, colour: Colour) -> (u64, u64) {
        (
            self.colour_packets[colour as usize],
            self.colour_fallbacks[colour as usize],
        )
    }

    /// How long packets of a colour were expected to wait in their lane's queue
    /// inside braid when they were queued.
    pub fn queue_delay(&self, colour: Colour) -> &DelayHistogram {
        &self.queue_delay[colour as usize]
    }

    pub fn green_drops(&self) -> GreenDrops {
        self.green_drops
    }

    /// The shapers of the uplinks of known rate.
    pub fn shapers(&self) -> impl Iterator<Item = ShaperReport<'_>> {
        self.shapers.iter().map(|s| ShaperReport {
            site: s.site,
            uplink: &s.uplink,
            green_bias: s.shaper.green_bias(),
        })
    }

    /// Packets of a site written to the TUN device after a later-sent packet of their
    /// flow: the reordering the inner flows see.
    pub fn reordered(&self, site: SiteIdx) -> u64 {
        self.sites[site.0 as usize].reseq.counters().reordered
    }

    /// What a site's resequencer held, released and counted.
    pub fn reseq_counters(&self, site: SiteIdx) -> &ReseqCounters {
        self.sites[site.0 as usize].reseq.counters()
    }

    /// Flows the schedulers of all sites track.
    pub fn flows_active(&self) -> usize {
        self.sites
            .iter()
            .flat_map(|s| &s.schedulers)
            .map(|scheduler| scheduler.flows())
            .sum()
    }

    /// A lane: whose it is, how the scheduler sees it, and what it carried.
    pub fn lane(&self, lane: LaneId) -> Option<LaneReport<'_>> {
        let l = self.lanes.get(lane.0 as usize)?.as_ref()?;
        let view = self.sites[l.site.0 as usize]
            .lanes
            .iter()
            .find(|v| v.id == lane)?;
        Some(LaneReport {
            site: l.site,
            uplink: &l.uplink,
            view,
            counters: &l.counters,
            state_since: l.state_since,
            state: if l.retired {
                LaneState::Replaced
            } else if l.healthy && l.cut_off() {
                LaneState::CutOff
            } else if l.healthy && l.standby {
                LaneState::Standby
            } else if view.up {
                LaneState::Up
            } else {
                LaneState::Down
            },
        })
    }

    /// The ids of every lane the engine knows (up, down or replaced).
    pub fn lane_ids(&self) -> impl Iterator<Item = LaneId> + '_ {
        self.lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_some())
            .map(|(i, _)| LaneId(i as u32))
    }

    /// Whether the gateway can carry traffic, as the service manager is told: the
    /// exit as soon as it runs (sites come to it), the entry once a lane is up.
    pub fn ready(&self) -> bool {
        self.role == Role::Exit || self.lanes_up() > 0
    }

    /// Lanes that are up, carrying or standing by.
    pub fn lanes_up(&self) -> usize {
        self.lanes.iter().flatten().filter(|l| l.healthy).count()
    }

    /// Per-application pacing state (tables, queues, flows, targets).
    pub fn pacing(&self) -> &AppPacing<impl Sized> {
        &self.pacing
    }

    /// What an application of a site carried and lost.
    pub fn app_counters(&self, site: SiteIdx, app: AppIdx) -> AppCounters {
        self.pacing.counters(site, app)
    }

    pub(super) fn count_drop(&mut self, reason: DropReason) {
        self.dropped[reason as usize] += 1;
    }
}
