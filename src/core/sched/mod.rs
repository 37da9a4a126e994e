//! Scheduling: which lane carries a packet.
//!
//! Contract: a [`Scheduler`] picks one lane from a site's lane snapshots for a packet of
//! a given flow and length at a given instant. It does no I/O, reads no clock and
//! never calls quinn; everything it knows arrives as arguments.

mod round_robin;

pub use round_robin::RoundRobin;

use super::lane::LaneView;
use super::packet::FlowKey;
use super::time::Instant;

/// A per-packet lane choice.
pub trait Scheduler: Send {
    /// Index into `lanes` of the lane that should carry a packet of `flow` of `len`
    /// bytes, or `None` when no lane is up.
    fn pick(
        &mut self,
        flow: FlowKey,
        len: usize,
        lanes: &[LaneView],
        now: Instant,
    ) -> Option<usize>;
}

/// The scheduling algorithms a gateway can be configured with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    #[default]
    RoundRobin,
}

impl Algorithm {
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            Algorithm::RoundRobin => Box::new(RoundRobin::default()),
        }
    }
}
