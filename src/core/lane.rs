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
}

impl LaneView {
    /// A lane that is up, with the given path properties and an empty queue.
    pub fn new(id: LaneId, colour: Colour) -> LaneView {
        LaneView {
            id,
            colour,
            up: true,
            srtt: Duration::from_millis(100),
            cwnd: 12_000,
            fill: 0,
            max_datagram: 1200,
        }
    }
}
