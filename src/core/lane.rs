//! Lanes as the scheduler sees them.
//!
//! Contract: a [`LaneView`] is a snapshot of one lane's state (up, SRTT, cwnd, bytes
//! queued, largest datagram) taken by the I/O shell once per batch; the core never
//! asks quinn itself.

use std::fmt;
use std::time::Duration;

/// Index of a lane inside one gateway; reused after the lane is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId(pub u32);

impl fmt::Display for LaneId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lane{}", self.0)
    }
}

/// ABE colour of a lane and of the packets it carries.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Colour {
    /// Low delay; may be dropped first.
    Green,
    /// Throughput; never worse than flat best effort. Packets without a colour are blue.
    #[default]
    Blue,
}

impl Colour {
    pub fn as_str(self) -> &'static str {
        match self {
            Colour::Green => "green",
            Colour::Blue => "blue",
        }
    }
}

/// What the scheduler knows about a lane at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneView {
    pub id: LaneId,
    pub colour: Colour,
    pub up: bool,
    pub srtt: Duration,
    pub cwnd: u64,
    /// Bytes queued for this lane inside braid and not yet sent by QUIC.
    pub fill: u64,
    /// Largest inner packet the lane can carry right now.
    pub max_datagram: usize,
    /// The uplink's configured rate in this direction, when known (kbit/s).
    pub rate_kbps: Option<u64>,
    /// The uplink's position in the entry's configuration (0 first).
    pub rank: u32,
}

/// The part of a lane's state that changes while it runs, read from quinn by the shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStatus {
    pub up: bool,
    pub srtt: Duration,
    pub cwnd: u64,
    pub fill: u64,
    pub max_datagram: usize,
}

impl LaneView {
    /// A lane that is up, with an empty queue and QUIC's initial estimates.
    pub fn new(id: LaneId, colour: Colour) -> LaneView {
        LaneView {
            id,
            colour,
            up: true,
            srtt: Duration::from_millis(100),
            cwnd: 12_000,
            fill: 0,
            max_datagram: 1200,
            rate_kbps: None,
            rank: 0,
        }
    }
}

impl LaneStatus {
    /// Applies this status to `view`, keeping what does not change (id, colour, rate,
    /// rank).
    pub fn apply_to(self, view: &mut LaneView) {
        view.up = self.up;
        view.srtt = self.srtt;
        view.cwnd = self.cwnd;
        view.fill = self.fill;
        view.max_datagram = self.max_datagram;
    }
}
