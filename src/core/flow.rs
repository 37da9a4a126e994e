//! Per-flow state with a bound and idle expiry: AFMT's flow table (flow -> last lane)
//! and the receiver's reordering table (flow -> highest sequence seen).
//!
//! Contract: an entry lives until it has been idle for `idle_timeout` (it is gone at
//! exactly that age) or until the table holds `max_flows` entries and it is the least
//! recently used. Entries are kept in last-use order, so expiry and eviction look only
//! at the front: O(1) per packet, no timers. Pure: time is an argument.

use std::time::Duration;

use hashlink::LinkedHashMap;

use super::packet::FlowKey;
use super::time::Instant;

use super::hash::FixedHasher;

/// One flow's entry: its value and when it was last used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowEntry<V> {
    pub value: V,
    pub last_used: Instant,
}

/// A bounded table of flows in last-use order.
#[derive(Debug, Clone)]
pub struct FlowTable<V> {
    map: LinkedHashMap<FlowKey, FlowEntry<V>, FixedHasher>,
    idle_timeout: Duration,
    max_flows: usize,
}

impl<V: Copy> FlowTable<V> {
    pub fn new(idle_timeout: Duration, max_flows: usize) -> FlowTable<V> {
        FlowTable {
            map: LinkedHashMap::with_hasher(FixedHasher::default()),
            idle_timeout,
            max_flows: max_flows.max(1),
        }
    }

    /// Forgets every flow idle for `idle_timeout` or longer at `now`, handing each
    /// forgotten value to `gone`.
    pub fn expire(&mut self, now: Instant, mut gone: impl FnMut(V)) {
        while let Some((_, e)) = self.map.front() {
            if now.saturating_since(e.last_used) < self.idle_timeout {
                break;
            }
            if let Some((_, e)) = self.map.pop_front() {
                gone(e.value);
            }
        }
    }

    /// The flow's entry, if it has one (not counting as a use).
    /// When the least recently used flow expires, if the table holds any.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.map
            .front()
            .map(|(_, e)| e.last_used.saturating_add(self.idle_timeout))
    }

    pub fn get(&self, flow: FlowKey) -> Option<FlowEntry<V>> {
        self.map.get(&flow).copied()
    }

    /// Sets the flow's value and marks it used at `now`. When the table is full, the
    /// least recently used flow makes room; its value is returned.
    pub fn record(&mut self, flow: FlowKey, value: V, now: Instant) -> Option<V> {
        self.update(flow, now, |_| value)
    }

    /// Like [`FlowTable::record`], with the new value computed from the flow's
    /// current one (`None` for a flow not in the table).
    pub fn update(
        &mut self,
        flow: FlowKey,
        now: Instant,
        value: impl FnOnce(Option<V>) -> V,
    ) -> Option<V> {
        // A known flow is updated in place and moved to the back (most recent): one
        // lookup and no allocation, which is what nearly every packet takes.
        if let Some(known) = self.map.to_back(&flow) {
            known.value = value(Some(known.value));
            known.last_used = now;
            return None;
        }
        let evicted = if self.map.len() >= self.max_flows {
            self.map.pop_front().map(|(_, e)| e.value)
        } else {
            None
        };
        let entry = FlowEntry {
            value: value(None),
            last_used: now,
        };
        self.map.insert(flow, entry);
        evicted
    }

    /// Marks a known flow used at `now` and returns its value; `None` for a flow
    /// without an entry (nothing is recorded then).
    pub fn refresh(&mut self, flow: FlowKey, now: Instant) -> Option<V> {
        let known = self.map.to_back(&flow)?;
        known.last_used = now;
        Some(known.value)
    }

    /// The value of a known flow, to change in place (not counting as a use).
    pub fn get_mut(&mut self, flow: FlowKey) -> Option<&mut V> {
        self.map.get_mut(&flow).map(|e| &mut e.value)
    }

    /// Every flow's value, to change in place (not counting as a use).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.map.iter_mut().map(|(_, e)| &mut e.value)
    }

    /// Keeps the flows whose value `keep` (which may change it) says to keep.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        self.map.retain(|_, e| keep(&mut e.value));
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn entries_expire_at_exactly_the_idle_timeout() {
        let mut t = FlowTable::new(Duration::from_millis(100), 10);
        t.record(FlowKey(1), 'a', Instant::from_nanos(0));
        t.record(FlowKey(2), 'b', Instant::from_nanos(50 * MS));
        t.expire(Instant::from_nanos(100 * MS - 1), |_| {
            panic!("nothing expires yet")
        });
        assert_eq!(
            t.len(),
            2,
            "one nanosecond before the timeout the flow is kept"
        );
        let mut gone = Vec::new();
        t.expire(Instant::from_nanos(100 * MS), |v| gone.push(v));
        assert_eq!(gone, ['a']);
        assert_eq!(t.get(FlowKey(1)), None, "at exactly the timeout it is gone");
        assert_eq!(t.get(FlowKey(2)).map(|e| e.value), Some('b'));
    }

    #[test]
    fn a_use_renews_the_flow_and_full_tables_evict_the_least_recent() {
        let mut t = FlowTable::new(Duration::from_secs(10), 2);
        t.record(FlowKey(1), 1, Instant::from_nanos(1));
        t.record(FlowKey(2), 2, Instant::from_nanos(2));
        t.record(FlowKey(1), 11, Instant::from_nanos(3)); // flow 1 is now the most recent
        assert_eq!(t.record(FlowKey(3), 3, Instant::from_nanos(4)), Some(2)); // evicts flow 2
        assert_eq!(t.get(FlowKey(2)), None);
        assert_eq!(
            t.get(FlowKey(1)),
            Some(FlowEntry {
                value: 11,
                last_used: Instant::from_nanos(3)
            })
        );
        assert_eq!(t.len(), 2);
        // A refresh renews without changing the value; an unknown flow stays unknown.
        assert_eq!(t.refresh(FlowKey(3), Instant::from_nanos(5)), Some(3));
        assert_eq!(t.refresh(FlowKey(9), Instant::from_nanos(5)), None);
        assert_eq!(t.len(), 2);
        assert_eq!(t.record(FlowKey(4), 4, Instant::from_nanos(6)), Some(11)); // flow 1 is now the least recent
    }

    proptest! {
        #[test]
        fn the_bound_is_never_exceeded_and_nothing_stale_survives_expiry(
            ops in prop::collection::vec((0u64..50, 0u64..20), 1..400),
            max in 1usize..16,
        ) {
            let timeout = Duration::from_millis(30);
            let mut t = FlowTable::new(timeout, max);
            let mut now = 0u64;
            for (flow, step_ms) in ops {
                now += step_ms * MS;
                let at = Instant::from_nanos(now);
                t.expire(at, |_| {});
                t.record(FlowKey(flow), flow, at);
                prop_assert!(t.len() <= max);
                prop_assert_eq!(t.get(FlowKey(flow)).map(|e| e.value), Some(flow));
                for (_, e) in t.map.iter() {
                    prop_assert!(at.saturating_since(e.last_used) < timeout);
                }
            }
        }
    }
}
