//! What the engine is built from: its role, its sites, which of an exit's threads it is,
//! and its settings, with their defaults and a builder.

use std::time::Duration;

use ipnet::IpNet;

use crate::core::background::BackgroundSettings;
use crate::core::pacing_table::Direction;
use crate::core::sched::Algorithm;
use crate::core::shaper::AbeSettings;
use crate::core::site::SiteIdx;
use crate::core::tiers::TierSettings;

use super::LANE_QUEUE_LIMIT;
use super::liveness::LANE_STALL;

/// Which end of the tunnel this gateway is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// At the branch: one site, packets from the TUN go to that site's lanes.
    Entry,
    /// At the concentrator: many sites, packets from the TUN go to the site whose
    /// prefixes contain the destination.
    Exit,
}

impl Role {
    /// The direction this end paces (SPEC §4): the entry `up`, the exit `down`.
    pub fn paced_direction(self) -> Direction {
        match self {
            Role::Entry => Direction::Up,
            Role::Exit => Direction::Down,
        }
    }
}

/// Which of an exit's data-path threads an engine is, of how many. The exit's sites
/// are spread over the threads by index, so that each site's flows, lanes, queues and
/// resequencing live on one thread and no per-packet state is shared: site `i` is
/// served by thread `i % count`. Every thread's engine knows every site (the indexes
/// then agree, and a reload gives each the same ones); a packet read from the TUN
/// device for another thread's site is handed over ([`DataPath::poll_handoff`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The one thread of an entry, or of an exit that runs one.
    pub const ONLY: Shard = Shard { index: 0, count: 1 };

    /// The thread serving `site`.
    pub fn of(site: SiteIdx, count: usize) -> usize {
        site.0 as usize % count.max(1)
    }
}

/// One site the engine carries traffic for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteSpec {
    pub id: String,
    /// The site's LAN prefixes (exit only; an entry's site has none).
    pub prefixes: Vec<IpNet>,
}

/// Everything the engine is built from.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub role: Role,
    pub sites: Vec<SiteSpec>,
    pub tun_mtu: usize,
    pub algorithm: Algorithm,
    /// Flows idle this long are forgotten (scheduler, classifier and reordering tables).
    pub flow_idle_timeout: Duration,
    /// At most this many flows per site and table; the least recently used goes.
    pub max_flows: usize,
    /// The rate of applications without one of their own (`pacing.default_rate_kbps`).
    pub default_rate_kbps: Option<u64>,
    /// How background applications find the spare capacity.
    pub background: BackgroundSettings,
    /// See [`LANE_STALL`].
    pub lane_stall: Duration,
    /// See [`LANE_QUEUE_LIMIT`].
    pub lane_queue_limit: u64,
    /// Inner DSCPs that make a packet green when its application has no colour
    /// (`abe.green_inner_dscp`).
    pub green_inner_dscp: Vec<u8>,
    /// How uplinks of known rate are shaped and served (`[abe]`).
    pub abe: AbeSettings,
    /// Which sites this engine serves ([`Shard::ONLY`]: all of them).
    pub shard: Shard,
    /// Whether blue lanes of unknown rate open their windows with padding as they
    /// come up ([`DataPath::warm_up`]): on in the daemon; off where only the packets
    /// a test sends should cross its lanes.
    pub warm_up_lanes: bool,
    /// How the uplinks' tiers take over and give back (`[tiers]`).
    pub tiers: TierSettings,
    /// An exit forwards a site's packets to other sites' prefixes (`site_to_site`).
    pub site_to_site: bool,
}

/// The daemon's settings where its configuration has a default, an entry serving no
/// site yet: a start for [`EngineConfig::builder`].
impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            role: Role::Entry,
            sites: Vec::new(),
            // What a QUIC datagram carries over a 1500-byte path that may be IPv6.
            tun_mtu: 1406,
            algorithm: Algorithm::default(),
            flow_idle_timeout: Duration::from_secs(10),
            max_flows: 65_536,
            default_rate_kbps: None,
            background: BackgroundSettings::default(),
            lane_stall: LANE_STALL,
            lane_queue_limit: LANE_QUEUE_LIMIT,
            green_inner_dscp: vec![46],
            abe: AbeSettings::default(),
            shard: Shard::ONLY,
            warm_up_lanes: true,
            tiers: TierSettings::default(),
            site_to_site: false,
        }
    }
}

impl EngineConfig {
    /// A builder that starts from [`EngineConfig::default`]: callers name only what
    /// they set, and a new setting does not touch them all.
    pub fn builder() -> EngineConfigBuilder {
        EngineConfigBuilder(EngineConfig::default())
    }
}

/// Builds an [`EngineConfig`]: one method per field, each setting it.
#[derive(Debug, Clone)]
pub struct EngineConfigBuilder(EngineConfig);

/// One setter per field of [`EngineConfig`], named after it.
macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {
        $(
            #[doc = concat!("Sets [`EngineConfig::", stringify!($field), "`].")]
            pub fn $field(mut self, $field: $ty) -> Self {
                self.0.$field = $field;
                self
            }
        )*
    };
}

impl EngineConfigBuilder {
    setters! {
        role: Role,
        sites: Vec<SiteSpec>,
        tun_mtu: usize,
        algorithm: Algorithm,
        flow_idle_timeout: Duration,
        max_flows: usize,
        default_rate_kbps: Option<u64>,
        background: BackgroundSettings,
        lane_stall: Duration,
        lane_queue_limit: u64,
        green_inner_dscp: Vec<u8>,
        abe: AbeSettings,
        shard: Shard,
        warm_up_lanes: bool,
        tiers: TierSettings,
        site_to_site: bool,
    }

    pub fn build(self) -> EngineConfig {
        self.0
    }
}
