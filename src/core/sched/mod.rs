//! Scheduling: which lane carries a packet.
//!
//! Contract: a [`Scheduler`] picks one lane from a site's lane snapshots for a packet of
//! a given flow and length at a given instant. It does no I/O, reads no clock and
//! never calls quinn; everything it knows arrives as arguments. Ties go to the lane
//! listed first, so every decision is reproducible.

mod afmt;
mod counted;
mod min_rtt;
mod round_robin;
#[cfg(test)]
pub(crate) mod sim;
mod single;
mod weighted_round_robin;

use std::time::Duration;

pub use afmt::Afmt;
use counted::Counted;
pub use min_rtt::MinRtt;
pub use round_robin::RoundRobin;
pub use single::Single;
pub use weighted_round_robin::WeightedRoundRobin;

use super::lane::LaneView;
use super::packet::FlowKey;
use super::time::Instant;

/// What kind of decision a pick was: the `kind` label of `braid_sched_decisions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionKind {
    /// The flow had no lane yet (or its lane went down).
    NewFlow,
    /// The flow stayed on its last lane.
    SameLane,
    /// The flow moved to another lane without risk of reordering.
    Switch,
    /// The flow is striped over several lanes: the packet took the lane where it
    /// arrives first, and the receiver keeps the flow in order.
    Stripe,
    /// The algorithm keeps no per-flow state (the baselines).
    Stateless,
}

impl DecisionKind {
    pub const ALL: [DecisionKind; 5] = [
        DecisionKind::NewFlow,
        DecisionKind::SameLane,
        DecisionKind::Switch,
        DecisionKind::Stripe,
        DecisionKind::Stateless,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::NewFlow => "new_flow",
            DecisionKind::SameLane => "same_lane",
            DecisionKind::Switch => "switch",
            DecisionKind::Stripe => "stripe",
            DecisionKind::Stateless => "stateless",
        }
    }
}

/// One decision: the index of the chosen lane in the slice, its kind, and the flow
/// gap for the datagram header (see `wire::DATAGRAM_HEADER_LEN`): how many sequence
/// numbers back the flow's previous packet is when the receiver must keep the flow in
/// order behind it, else 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    pub lane: usize,
    pub kind: DecisionKind,
    pub gap: u16,
    /// How long before this packet the flow's previous one was scheduled; `None` for
    /// a flow's first packet, and from a scheduler that keeps no flows.
    pub since_previous: Option<Duration>,
}

impl Pick {
    /// A decision of an algorithm without per-flow state.
    pub fn stateless(lane: usize) -> Pick {
        Pick {
            lane,
            kind: DecisionKind::Stateless,
            gap: 0,
            since_previous: None,
        }
    }
}

/// What a scheduler decides on: one packet and the lanes it may take.
#[derive(Debug, Clone, Copy)]
pub struct PickContext<'a> {
    /// The packet's flow.
    pub flow: FlowKey,
    /// The packet's length in bytes.
    pub len: usize,
    /// The site-wide sequence number the packet will carry.
    pub seq: u32,
    /// The lanes it may take; [`Pick::lane`] indexes them.
    pub lanes: &'a [LaneView],
    pub now: Instant,
}

#[cfg(test)]
impl<'a> PickContext<'a> {
    /// A packet of `len` bytes of `flow`, numbered `seq`, over `lanes` at `now`.
    pub fn test(flow: FlowKey, len: usize, seq: u32, lanes: &'a [LaneView], now: Instant) -> Self {
        PickContext {
            flow,
            len,
            seq,
            lanes,
            now,
        }
    }
}

/// A per-packet lane choice.
pub trait Scheduler: Send {
    /// The lane (index into `cx.lanes`) that should carry the packet, or `None` when
    /// no lane is up.
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick>;

    /// The packet of the last [`Scheduler::pick`] for `flow` was not sent after all
    /// (dropped on its lane): forget that it was.
    fn unsent(&mut self, _flow: FlowKey) {}

    /// Flows the scheduler currently tracks (0 for a stateless algorithm itself; the
    /// engine's are counted, see `counted.rs`).
    fn flows(&self) -> usize {
        0
    }

    /// Forgets flows idle for the flow timeout at `now`.
    fn expire(&mut self, _now: Instant) {}

    /// When [`Scheduler::expire`] will next forget a flow, if it tracks any.
    fn next_expiry(&self) -> Option<Instant> {
        None
    }
}

/// The scheduling algorithms a gateway can be configured with (`scheduler.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// AFMT with striping: a flow its lane cannot keep up with spreads over lanes.
    #[default]
    Afmt,
    /// The paper's AFMT: flowlet switching only, one lane per flow at a time.
    AfmtFlowlet,
    RoundRobin,
    WeightedRoundRobin,
    MinRtt,
    Single,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::Afmt,
        Algorithm::AfmtFlowlet,
        Algorithm::RoundRobin,
        Algorithm::WeightedRoundRobin,
        Algorithm::MinRtt,
        Algorithm::Single,
    ];

    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Afmt => "afmt",
            Algorithm::AfmtFlowlet => "afmt-flowlet",
            Algorithm::RoundRobin => "round-robin",
            Algorithm::WeightedRoundRobin => "weighted-round-robin",
            Algorithm::MinRtt => "min-rtt",
            Algorithm::Single => "single",
        }
    }

    pub fn from_name(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// A scheduler of this kind; `flow_idle_timeout` and `max_flows` bound its flow
    /// table (AFMT's, or the count of a stateless scheduler's flows).
    pub fn build(self, flow_idle_timeout: Duration, max_flows: usize) -> Box<dyn Scheduler> {
        match self {
            Algorithm::Afmt => Box::new(Afmt::new(flow_idle_timeout, max_flows, true)),
            Algorithm::AfmtFlowlet => Box::new(Afmt::new(flow_idle_timeout, max_flows, false)),
            Algorithm::RoundRobin => {
                Counted::boxed(RoundRobin::default(), flow_idle_timeout, max_flows)
            }
            Algorithm::WeightedRoundRobin => {
                Counted::boxed(WeightedRoundRobin::default(), flow_idle_timeout, max_flows)
            }
            Algorithm::MinRtt => Counted::boxed(MinRtt, flow_idle_timeout, max_flows),
            Algorithm::Single => Counted::boxed(Single, flow_idle_timeout, max_flows),
        }
    }
}

/// AFMT's load measure of a lane for a packet of `len` bytes, `(fill + len) * srtt /
/// cwnd`, scaled by `factor`: as a fraction (numerator, denominator) so that lanes are
/// compared exactly, cross-multiplied in 128 bits.
fn weighted_fill(l: &LaneView, len: usize, factor: u64) -> (u128, u128) {
    let num = u128::from(l.fill + len as u64) * l.srtt.as_nanos() * u128::from(factor);
    (num, u128::from(l.cwnd.max(1)))
}

/// Index of the lane with the lowest weighted fill (times `factor(i)`) among those
/// `eligible`, first listed on ties.
fn least_weighted_fill(
    lanes: &[LaneView],
    len: usize,
    eligible: impl Fn(usize, &LaneView) -> bool,
    factor: impl Fn(usize) -> u64,
) -> Option<usize> {
    let mut best: Option<(usize, (u128, u128))> = None;
    for (i, lane) in lanes.iter().enumerate() {
        if !eligible(i, lane) {
            continue;
        }
        let (num, den) = weighted_fill(lane, len, factor(i));
        if best.is_none_or(|(_, (bnum, bden))| num * bden < bnum * den) {
            best = Some((i, (num, den)));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
pub(crate) mod testing {
    use std::time::Duration;

    use crate::core::lane::{Colour, LaneId, LaneView};

    /// A lane that is up with the given SRTT (ms), cwnd and fill (bytes).
    pub fn lane(id: u32, srtt_ms: u64, cwnd: u64, fill: u64) -> LaneView {
        LaneView {
            srtt: Duration::from_millis(srtt_ms),
            cwnd,
            fill,
            max_datagram: 1400,
            ..LaneView::new(LaneId(id), Colour::Blue)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_algorithms_are_listed_in_order_and_named_uniquely() {
        for (i, k) in DecisionKind::ALL.iter().enumerate() {
            assert_eq!(
                *k as usize, i,
                "the shell indexes metric children by the kind"
            );
        }
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.as_str()), Some(a));
        }
        assert_eq!(Algorithm::from_name("fastest"), None);
    }
}
