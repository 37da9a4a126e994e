//! Resequencing at the receiving gateway: a flow striped over lanes of unequal delay
//! reaches the TUN device in the order it was sent.
//!
//! Contract: every datagram carries the site-wide sequence number the sender gave it
//! and, for a flow whose packets may overtake each other (a striped flow), how far back
//! in that numbering its flow's previous packet is (`gap`, 0 for "no order to keep").
//! A packet whose predecessor has not been released yet is held until the predecessor
//! is released or the packet's deadline passes; then it and everything of its flow
//! before it are released in order, and the gap is given up. A packet that arrives
//! after its place was given up is released at once and counted as reordered. Holding
//! is bounded per flow ([`MAX_HELD_PER_FLOW`]) and by a byte budget shared by every
//! site of the gateway; at either bound the oldest held packets go early instead of
//! the new one being dropped. Flows that never carry a gap cost one flow-table update
//! per packet, as reordering measurement did before. Pure: time is an argument.
//!
//! The deadline is the caller's base (from the lanes' measured delays) or, if larger,
//! a quarter more than the longest hold that ended with the gap filled, or with a late
//! arrival (counted as at most twice the deadline then), in the last 10 to 20
//! seconds: holds that the delay difference really needs raise it, and a lost
//! datagram costs one deadline, not a stall.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use bytes::Bytes;

use super::flow::FlowTable;
use super::hash::FixedMap;
use super::lane::LaneView;
use super::packet::FlowKey;
use super::seen::SeenWindow;
use super::stats::DelayHistogram;
use super::time::Instant;
use super::wire::DatagramHeader;

/// A flow holds at most this many packets; beyond it its oldest go early.
pub const MAX_HELD_PER_FLOW: usize = 4096;
/// Bytes all sites of a gateway hold at most (1 Gbit/s for 250 ms), counting each
/// held packet's bookkeeping ([`HELD_OVERHEAD`]) with its bytes.
pub const MAX_HELD_BYTES: usize = 32 << 20;
/// What holding a packet costs beyond its bytes: its entry in its flow's queue and in
/// the deadline heap, and its share of the flow's map entry. Counted so that a flood
/// of tiny packets, each in a flow of its own, stays within [`MAX_HELD_BYTES`] too
/// (counting packet bytes alone, 40-byte packets would have let the bookkeeping
/// grow to several times the budget).
const HELD_OVERHEAD: usize = 128;
/// The longest deadline, whatever the lanes measure.
pub const MAX_DEADLINE: Duration = Duration::from_secs(1);
/// Observed holds are remembered for one to two of these: long enough that a
/// deadline raised by a late arrival keeps the next ones in order; a shorter memory
/// let the deadline fall back and the next late arrivals go out of order
/// (docs/design/resequencing.md).
const HOLD_WINDOW: Duration = Duration::from_secs(10);

/// The least time the resequencer holds a packet whose predecessor is missing. With
/// lanes that keep 5 ms of queue (`lane_cc/`), a shorter hold gives gaps up that
/// the lanes' queues were about to fill, and packets of one download then arrive
/// after their gap was given up, tens per give-up (docs/design/resequencing.md).
pub const RESEQ_MIN_DEADLINE: Duration = Duration::from_millis(10);

/// The least a site's resequencer holds a packet: half the spread of its live lanes'
/// SRTTs (the one-way delay difference, the RTT being split evenly) plus an eighth
/// of the largest SRTT for jitter, and never less than [`RESEQ_MIN_DEADLINE`].
pub fn base_deadline(lanes: &[LaneView]) -> Duration {
    let srtts = lanes.iter().filter(|l| l.up).map(|l| l.srtt);
    let (Some(min), Some(max)) = (srtts.clone().min(), srtts.max()) else {
        return RESEQ_MIN_DEADLINE;
    };
    ((max - min) / 2 + max / 8).max(RESEQ_MIN_DEADLINE)
}

/// `a` was sent before `b` (serial number arithmetic on the 32-bit sequence).
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// What the resequencer did, per site.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReseqCounters {
    /// Packets that had to wait for an earlier packet of their flow.
    pub held: u64,
    /// Held packets released in order once the gap before them filled.
    pub released_in_order: u64,
    /// Held packets released before the gap filled: at the deadline, or early at a
    /// memory bound.
    pub released_at_deadline: u64,
    /// Packets that arrived after their place in the flow was given up, or that were
    /// sent out of order on purpose (the baselines): the reordering the inner flow sees.
    pub reordered: u64,
    /// Duplicates of a packet already received (within the last 65,536 numbers,
    /// `core/seen.rs`).
    pub dropped: u64,
    /// How long held packets were held.
    pub hold: DelayHistogram,
}

/// Bytes held by every site of a gateway.
#[derive(Debug, Default)]
pub struct HeldBudget {
    bytes: usize,
}

impl HeldBudget {
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowOrder {
    /// The sequence number of the flow's packet released last (the latest in send
    /// order); `None` while its first packet seen is held for its predecessor.
    last: Option<u32>,
    /// When the flow last gave up waiting for a gap, and the deadline it had then.
    gave_up: Option<(Instant, Duration)>,
}

#[derive(Debug)]
struct Held {
    seq: u32,
    /// The sequence number of the flow's previous packet.
    prev: u32,
    arrived: Instant,
    packet: Bytes,
}

/// A site's resequencer.
#[derive(Debug)]
pub struct Resequencer {
    flows: FlowTable<FlowOrder>,
    held: FixedMap<FlowKey, VecDeque<Held>>,
    /// (deadline, flow, seq) of every held packet, earliest first; entries of packets
    /// released since are skipped when they come up.
    deadlines: BinaryHeap<Reverse<(Instant, FlowKey, u32)>>,
    /// Longest hold needed in this and the previous window, and when this one began.
    hold_peak: Duration,
    hold_peak_prev: Duration,
    window_start: Instant,
    /// The least a packet is held: from the lanes' measured delays.
    base: Duration,
    /// The site's numbers that arrived: a packet passes once.
    seen: SeenWindow,
    counters: ReseqCounters,
}

impl Resequencer {
    /// A resequencer whose flow table has these bounds, holding packets at least
    /// `base` until [`Resequencer::set_base_deadline`] says otherwise.
    pub fn new(idle_timeout: Duration, max_flows: usize, base: Duration) -> Resequencer {
        Resequencer {
            flows: FlowTable::new(idle_timeout, max_flows),
            held: FixedMap::default(),
            deadlines: BinaryHeap::new(),
            hold_peak: Duration::ZERO,
            hold_peak_prev: Duration::ZERO,
            window_start: Instant::ZERO,
            base,
            seen: SeenWindow::default(),
            counters: ReseqCounters::default(),
        }
    }

    pub fn counters(&self) -> &ReseqCounters {
        &self.counters
    }

    /// Flows seen within the idle timeout.
    #[cfg(test)]
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Forgets flows idle for the idle timeout.
    pub fn expire(&mut self, now: Instant) {
        self.flows.expire(now, |_| ());
    }

    /// When [`Resequencer::expire`] will next forget a flow.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.flows.next_expiry()
    }

    /// The earliest deadline of a held packet.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Sets the least time a packet is held, derived by the caller from the lanes'
    /// measured delays.
    pub fn set_base_deadline(&mut self, base: Duration) {
        self.base = base;
    }

    /// How long a packet held at `now` may wait: the base deadline, or a quarter more
    /// than the longest hold the flows needed recently, whichever is larger.
    pub fn deadline(&self, now: Instant) -> Duration {
        let age = now.saturating_since(self.window_start);
        let observed = if age >= 2 * HOLD_WINDOW {
            Duration::ZERO
        } else if age >= HOLD_WINDOW {
            self.hold_peak
        } else {
            self.hold_peak.max(self.hold_peak_prev)
        };
        self.base.max(observed + observed / 4).min(MAX_DEADLINE)
    }

    fn observe_needed_hold(&mut self, needed: Duration, now: Instant) {
        let age = now.saturating_since(self.window_start);
        if age >= HOLD_WINDOW {
            self.hold_peak_prev = if age >= 2 * HOLD_WINDOW {
                Duration::ZERO
            } else {
                self.hold_peak
            };
            self.hold_peak = Duration::ZERO;
            self.window_start = now;
        }
        self.hold_peak = self.hold_peak.max(needed);
    }

    /// Takes a packet of `flow` with the sequence number and flow gap of `header`;
    /// what may go to the TUN device now is pushed onto `out`. Returns false for a
    /// packet dropped as one that arrived before (a copy and its original).
    pub fn receive(
        &mut self,
        flow: FlowKey,
        header: DatagramHeader,
        packet: Bytes,
        now: Instant,
        budget: &mut HeldBudget,
        out: &mut VecDeque<Bytes>,
    ) -> bool {
        let DatagramHeader { seq, gap, copy, .. } = header;
        if !self.seen.first_arrival(seq, copy) {
            // A copy (a loss repair's or a duplicate application's) of a packet
            // that arrived, or the original behind its copy.
            self.counters.dropped += 1;
            return false;
        }
        let prev = seq.wrapping_sub(u32::from(gap));
        let mut verdict = Verdict::Release;
        self.flows.update(flow, now, |order| {
            let order = order.unwrap_or(FlowOrder {
                last: None,
                gave_up: None,
            });
            match order.last {
                Some(last) if !before(last, seq) => {
                    verdict = Verdict::Reordered(order.gave_up);
                    order
                }
                // No order to keep, or the predecessor has been released.
                last if gap == 0 || last.is_some_and(|l| !before(l, prev)) => FlowOrder {
                    last: Some(seq),
                    ..order
                },
                // The predecessor is still on its way (the first packet of a flow
                // seen may be one that overtook the flow's earlier packets).
                _ => {
                    verdict = Verdict::Hold;
                    order
                }
            }
        });
        match verdict {
            Verdict::Release => {
                out.push_back(packet);
                if !self.held.is_empty() {
                    self.release_chain(flow, now, Filled::ByArrival, budget, out);
                }
            }
            Verdict::Reordered(gave_up) => {
                self.counters.reordered += 1;
                // A copy's lateness is the repair's (a report's round trip, and
                // another if the copy was lost too), not the lanes' delay spread:
                // counted, each late copy could raise every flow's deadline up to
                // 2.5 times, to the 1 s bound over a lossy path.
                if gap != 0 && !copy {
                    // Its place was given up too soon: it needed the deadline then
                    // and the time since, but at most twice the deadline. A packet
                    // much later than that was not slowed by its lane's delay but
                    // stuck on a path that died and returned, or sent again over
                    // another lane when its lane was given up: no reason to hold
                    // every flow longer for the next seconds. A lane whose delay
                    // really grew raises the deadline again with its next packets.
                    let needed = match gave_up {
                        Some((at, deadline)) => deadline + now.saturating_since(at).min(deadline),
                        None => self.deadline(now) * 3 / 2,
                    };
                    self.observe_needed_hold(needed, now);
                }
                out.push_back(packet);
            }
            Verdict::Hold => {
                let held = Held {
                    seq,
                    prev,
                    arrived: now,
                    packet,
                };
                self.hold(flow, held, budget, out);
            }
        }
        true
    }

    fn hold(
        &mut self,
        flow: FlowKey,
        held: Held,
        budget: &mut HeldBudget,
        out: &mut VecDeque<Bytes>,
    ) {
        let (seq, now, len) = (held.seq, held.arrived, held.packet.len());
        let queue = self.held.entry(flow).or_default();
        // Mostly appended at the back: the fast lane's packets arrive in order.
        let at = queue.partition_point(|h| before(h.seq, seq));
        if queue.get(at).is_some_and(|h| h.seq == seq) {
            self.counters.dropped += 1;
            return;
        }
        queue.insert(at, held);
        let flow_full = queue.len() > MAX_HELD_PER_FLOW;
        budget.bytes += len + HELD_OVERHEAD;
        self.counters.held += 1;
        let deadline = now.saturating_add(self.deadline(now));
        self.deadlines.push(Reverse((deadline, flow, seq)));
        if flow_full {
            let front = self.held[&flow][0].seq;
            self.give_up_through(flow, front, now, budget, out);
        }
        // Over the shared budget: this site's oldest held packets go early.
        while budget.bytes > MAX_HELD_BYTES {
            let Some(Reverse((_, oldest_flow, oldest_seq))) = self.deadlines.pop() else {
                break;
            };
            self.give_up_through(oldest_flow, oldest_seq, now, budget, out);
        }
    }

    /// Releases every held packet whose deadline passed at `now`, with everything of
    /// its flow sent before it.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        budget: &mut HeldBudget,
        out: &mut VecDeque<Bytes>,
    ) {
        while let Some(Reverse((at, flow, seq))) = self.deadlines.peek().copied() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            self.give_up_through(flow, seq, now, budget, out);
        }
    }

    /// Gives up waiting for the gaps before `seq` in `flow`: releases its held packets
    /// up to `seq` (if still held) and then those whose predecessor that releases.
    fn give_up_through(
        &mut self,
        flow: FlowKey,
        seq: u32,
        now: Instant,
        budget: &mut HeldBudget,
        out: &mut VecDeque<Bytes>,
    ) {
        let Some(queue) = self.held.get_mut(&flow) else {
            return;
        };
        if queue.front().is_none_or(|h| before(seq, h.seq)) {
            return; // Released already.
        }
        let mut last = None;
        while let Some(h) = queue.front()
            && !before(seq, h.seq)
        {
            let Some(h) = queue.pop_front() else { break };
            budget.bytes -= h.packet.len() + HELD_OVERHEAD;
            self.counters.released_at_deadline += 1;
            self.counters.hold.observe(now.saturating_since(h.arrived));
            last = Some(h.seq);
            out.push_back(h.packet);
        }
        if let Some(last) = last {
            let gave_up = Some((now, self.deadline(now)));
            match self.flows.get_mut(flow) {
                Some(order) => {
                    if order.last.is_none_or(|l| before(l, last)) {
                        order.last = Some(last);
                    }
                    order.gave_up = gave_up;
                }
                None => {
                    let order = FlowOrder {
                        last: Some(last),
                        gave_up,
                    };
                    self.flows.record(flow, order, now);
                }
            }
        }
        self.release_chain(flow, now, Filled::GivenUp, budget, out);
    }

    /// Releases the flow's held packets whose predecessor has been released, in order.
    fn release_chain(
        &mut self,
        flow: FlowKey,
        now: Instant,
        filled: Filled,
        budget: &mut HeldBudget,
        out: &mut VecDeque<Bytes>,
    ) {
        let Some(queue) = self.held.get_mut(&flow) else {
            return;
        };
        let Some(order) = self.flows.get_mut(flow) else {
            return;
        };
        let mut longest = Duration::ZERO;
        while let Some(h) = queue.front()
            && order.last.is_some_and(|l| !before(l, h.prev))
        {
            let Some(h) = queue.pop_front() else { break };
            budget.bytes -= h.packet.len() + HELD_OVERHEAD;
            let held_for = now.saturating_since(h.arrived);
            longest = longest.max(held_for);
            self.counters.released_in_order += 1;
            self.counters.hold.observe(held_for);
            if order.last.is_some_and(|l| before(l, h.seq)) {
                order.last = Some(h.seq);
            }
            out.push_back(h.packet);
        }
        if queue.is_empty() {
            self.held.remove(&flow);
        }
        // Only a gap that an arrival filled shows how long holding is worth it;
        // packets that waited behind a gap given up say nothing about the delays.
        if filled == Filled::ByArrival && longest > Duration::ZERO {
            self.observe_needed_hold(longest, now);
        }
    }

    /// Packets held now.
    #[cfg(test)]
    pub fn held_packets(&self) -> usize {
        self.held.values().map(VecDeque::len).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Filled {
    ByArrival,
    GivenUp,
}

enum Verdict {
    Release,
    /// Too late (or out of order on purpose), with when the flow last gave up a gap.
    Reordered(Option<(Instant, Duration)>),
    Hold,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOW: FlowKey = FlowKey(7);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn base() -> Duration {
        Duration::from_millis(50)
    }

    struct Rig {
        r: Resequencer,
        budget: HeldBudget,
        out: VecDeque<Bytes>,
    }

    impl Rig {
        fn new() -> Rig {
            Rig {
                r: Resequencer::new(Duration::from_secs(30), 1024, base()),
                budget: HeldBudget::default(),
                out: VecDeque::new(),
            }
        }

        /// Packet `seq` of FLOW whose previous packet is `prev` (None: no order kept).
        fn recv(&mut self, seq: u32, prev: Option<u32>, ms: u64) {
            self.recv_as(seq, prev, ms, false);
        }

        /// The same, or a copy of it sent again after a loss (`copy`).
        fn recv_as(&mut self, seq: u32, prev: Option<u32>, ms: u64, copy: bool) {
            let gap = prev.map_or(0, |p| u16::try_from(seq.wrapping_sub(p)).unwrap());
            let packet = Bytes::from(seq.to_be_bytes().to_vec());
            let header = DatagramHeader {
                seq,
                gap,
                copy,
                lane_seq: 0,
            };
            self.r.receive(
                FLOW,
                header,
                packet,
                at(ms),
                &mut self.budget,
                &mut self.out,
            );
        }

        fn timeout(&mut self, ms: u64) {
            self.r
                .handle_timeout(at(ms), &mut self.budget, &mut self.out);
        }

        fn released(&mut self) -> Vec<u32> {
            self.out
                .drain(..)
                .map(|b| u32::from_be_bytes(b[..4].try_into().unwrap()))
                .collect()
        }
    }

    #[test]
    fn a_packet_that_overtook_its_predecessor_waits_for_it() {
        let mut rig = Rig::new();
        rig.recv(10, None, 0);
        // 12 and 13 took the fast lane; 11 the slow one.
        rig.recv(12, Some(11), 1);
        rig.recv(13, Some(12), 2);
        assert_eq!(rig.released(), [10]);
        assert_eq!(rig.budget.bytes(), 8 + 2 * HELD_OVERHEAD);
        rig.recv(11, Some(10), 20);
        assert_eq!(rig.released(), [11, 12, 13]);
        let c = rig.r.counters();
        assert_eq!((c.held, c.released_in_order, c.reordered), (2, 2, 0));
        assert_eq!(rig.budget.bytes(), 0);
        assert_eq!(rig.r.held_packets(), 0);
        // The holds of 19 and 18 ms are remembered: the deadline grows past them.
        rig.r.set_base_deadline(Duration::ZERO);
        assert_eq!(rig.r.deadline(at(20)), Duration::from_micros(23_750));
    }

    #[test]
    fn a_lost_packet_costs_one_deadline_not_a_stall() {
        let mut rig = Rig::new();
        rig.recv(1, None, 0);
        rig.recv(3, Some(2), 5); // 2 is lost
        rig.recv(4, Some(3), 6);
        assert_eq!(rig.released(), [1]);
        assert_eq!(rig.r.poll_timeout(), Some(at(55)));
        rig.timeout(54);
        assert!(rig.released().is_empty());
        rig.timeout(55);
        assert_eq!(rig.released(), [3, 4], "3 at its deadline, 4 behind it");
        rig.recv(5, Some(4), 56);
        assert_eq!(rig.released(), [5], "after the gap, the flow flows");
        // 2 turns up after all: released at once, counted as reordered.
        rig.recv(2, Some(1), 60);
        assert_eq!(rig.released(), [2]);
        let c = rig.r.counters();
        assert_eq!(
            (c.released_at_deadline, c.released_in_order, c.reordered),
            (1, 1, 1)
        );
        // Stale deadline entries (4's) release nothing.
        rig.timeout(100);
        assert!(rig.released().is_empty());
        assert_eq!(rig.r.poll_timeout(), None);
    }

    #[test]
    fn a_first_packet_that_overtook_the_flows_earlier_ones_waits_for_them() {
        let mut rig = Rig::new();
        // 5 and 6 took a fast lane; 1 to 4 are still on a slow one.
        rig.recv(5, Some(4), 0);
        rig.recv(6, Some(5), 1);
        assert!(rig.released().is_empty());
        for seq in 1..=4 {
            rig.recv(seq, None, 30);
        }
        assert_eq!(rig.released(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(rig.r.counters().reordered, 0);
    }

    #[test]
    fn flows_without_a_gap_are_never_held() {
        let mut rig = Rig::new();
        for seq in [1, 2, 4, 3, 5] {
            rig.recv(seq, None, 0);
        }
        assert_eq!(rig.released(), [1, 2, 4, 3, 5]);
        let c = rig.r.counters();
        assert_eq!((c.held, c.reordered), (0, 1), "3 came after 4");
    }

    #[test]
    fn held_packets_are_released_in_sequence_whatever_their_arrival_order() {
        let mut rig = Rig::new();
        rig.recv(100, None, 0);
        for (seq, ms) in [(104, 1), (102, 2), (105, 3), (103, 4)] {
            rig.recv(seq, Some(seq - 1), ms);
        }
        assert_eq!(rig.released(), [100]);
        rig.recv(101, Some(100), 10);
        assert_eq!(rig.released(), [101, 102, 103, 104, 105]);
        // A gap in the site-wide numbering that belongs to other flows is no gap.
        rig.recv(110, Some(105), 11);
        assert_eq!(rig.released(), [110]);
    }

    #[test]
    fn a_duplicate_of_a_held_packet_is_dropped() {
        let mut rig = Rig::new();
        rig.recv(1, None, 0);
        rig.recv(3, Some(2), 1);
        rig.recv(3, Some(2), 2);
        assert_eq!(rig.r.counters().dropped, 1);
        rig.recv(2, Some(1), 3);
        assert_eq!(rig.released(), [1, 2, 3]);
    }

    #[test]
    fn the_deadline_is_the_base_or_more_for_holds_measured_recently() {
        let mut rig = Rig::new();
        assert_eq!(rig.r.deadline(at(0)), base());
        rig.recv(1, None, 0);
        rig.recv(3, Some(2), 0);
        rig.recv(2, Some(1), 80);
        assert_eq!(rig.released(), [1, 2, 3]);
        assert_eq!(rig.r.deadline(at(80)), Duration::from_millis(100));
        // Remembered for one to two windows, then forgotten.
        let window = HOLD_WINDOW.as_millis() as u64;
        assert_eq!(
            rig.r.deadline(at(2 * window - 100)),
            Duration::from_millis(100)
        );
        assert_eq!(rig.r.deadline(at(2 * window)), base());
        rig.r.set_base_deadline(Duration::from_secs(9));
        assert_eq!(rig.r.deadline(at(0)), MAX_DEADLINE);
        rig.r.set_base_deadline(base());
        // A packet arriving 10 ms after its place was given up (at a 50 ms deadline)
        // needed 60 ms: the deadline becomes a quarter more.
        let t = 3 * window;
        rig.recv(5, Some(4), t);
        rig.timeout(t + 50);
        rig.recv(4, Some(3), t + 60);
        assert_eq!(rig.released(), [5, 4]);
        assert_eq!(rig.r.deadline(at(t + 60)), Duration::from_millis(75));
        // One arriving a second after its place was given up (it waited out an
        // outage) counts as needing twice the deadline, not a second more.
        let t = 6 * window;
        rig.recv(7, Some(6), t);
        rig.timeout(t + 50);
        rig.recv(6, Some(5), t + 1050);
        assert_eq!(rig.released(), [7, 6]);
        assert_eq!(rig.r.deadline(at(t + 1050)), Duration::from_millis(125));
        // A copy of a lost packet that comes after its place was given up is passed
        // on, reordered, and teaches the deadline nothing: its lateness was the
        // repair's.
        let t = 9 * window;
        assert_eq!(rig.r.deadline(at(t)), base());
        rig.recv(9, Some(8), t);
        rig.timeout(t + 50);
        rig.recv_as(8, Some(7), t + 60, true);
        assert_eq!(rig.released(), [9, 8]);
        assert_eq!(rig.r.counters().reordered, 3);
        assert_eq!(rig.r.deadline(at(t + 60)), base());
    }

    #[test]
    fn memory_stays_bounded_per_flow_and_in_total() {
        let mut rig = Rig::new();
        rig.recv(0, None, 0);
        // Packet 1 never comes; the flow holds at most MAX_HELD_PER_FLOW.
        let n = MAX_HELD_PER_FLOW as u32 + 10;
        for seq in 2..2 + n {
            rig.recv(seq, Some(seq - 1), 1);
        }
        let released = rig.released().len();
        assert!(rig.r.held_packets() <= MAX_HELD_PER_FLOW);
        assert_eq!(released + rig.r.held_packets(), n as usize + 1);
        assert!(rig.r.counters().released_at_deadline >= 1);
        // A flood of flows, each with a gap, under a budget nearly spent already.
        let mut rig = Rig::new();
        rig.budget.bytes = MAX_HELD_BYTES - 100;
        for f in 0..1000u32 {
            let flow = FlowKey(1000 + u64::from(f));
            // Each flow's own numbers: the site numbers every packet once.
            for (seq, gap) in [(4 * f + 1, 0), (4 * f + 3, 1)] {
                rig.r.receive(
                    flow,
                    DatagramHeader {
                        seq,
                        gap,
                        copy: false,
                        lane_seq: 0,
                    },
                    Bytes::from_static(&[0; 40]),
                    at(1),
                    &mut rig.budget,
                    &mut rig.out,
                );
            }
        }
        assert!(rig.budget.bytes() <= MAX_HELD_BYTES);
        assert_eq!(
            rig.out.len() + rig.r.held_packets(),
            2000,
            "nothing is lost: held ones go early"
        );
        assert!(rig.r.held_packets() <= 2);
    }
}
