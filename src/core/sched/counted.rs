//! The flows a stateless scheduler carries, counted. Round-robin, weighted
//! round-robin, min-RTT and single keep no flow table, yet operators read the flows a
//! gateway carries whatever its scheduler (`braid_flows_active`, `braid status`):
//! this wrapper keeps a table of them with AFMT's idle expiry and bound, and nothing
//! else of it decides anything.

use std::time::Duration;

use crate::core::flow::FlowTable;
use crate::core::time::Instant;

use super::{Pick, PickContext, Scheduler};

pub struct Counted<S> {
    inner: S,
    flows: FlowTable<()>,
}

impl<S: Scheduler + 'static> Counted<S> {
    pub fn new(inner: S, flow_idle_timeout: Duration, max_flows: usize) -> Counted<S> {
        Counted {
            inner,
            flows: FlowTable::new(flow_idle_timeout, max_flows),
        }
    }

    /// `inner` with its flows counted, as the engine keeps schedulers.
    pub fn boxed(inner: S, flow_idle_timeout: Duration, max_flows: usize) -> Box<dyn Scheduler> {
        Box::new(Counted::new(inner, flow_idle_timeout, max_flows))
    }
}

impl<S: Scheduler> Scheduler for Counted<S> {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let pick = self.inner.pick(cx)?;
        self.flows.record(cx.flow, (), cx.now);
        Some(pick)
    }

    fn flows(&self) -> usize {
        self.flows.len()
    }

    fn expire(&mut self, now: Instant) {
        self.flows.expire(now, |()| ());
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.flows.next_expiry()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::FlowKey;
    use crate::core::sched::RoundRobin;
    use crate::core::sched::testing::lane;

    #[test]
    fn flows_are_counted_until_idle_for_the_timeout() {
        let lanes = [lane(0, 10, 10_000, 0), lane(1, 10, 10_000, 0)];
        let mut s = Counted::new(RoundRobin::default(), Duration::from_secs(1), 100);
        let at = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        for (flow, ms) in [(1, 0), (2, 10), (1, 500)] {
            let cx = PickContext::test(FlowKey(flow), 100, 0, &lanes, at(ms));
            assert!(s.pick(&cx).is_some());
        }
        assert_eq!(s.flows(), 2);
        assert_eq!(s.next_expiry(), Some(at(1010)), "flow 2, idle since 10 ms");
        s.expire(at(1010));
        assert_eq!(s.flows(), 1, "flow 2 idle for the timeout");
        s.expire(at(1500));
        assert_eq!(s.flows(), 0);
    }

    #[test]
    fn a_packet_no_lane_takes_counts_no_flow() {
        let mut s = Counted::new(RoundRobin::default(), Duration::from_secs(1), 100);
        let cx = PickContext::test(FlowKey(1), 100, 0, &[], Instant::ZERO);
        assert!(s.pick(&cx).is_none());
        assert_eq!(s.flows(), 0);
    }
}
