//! AFMT (Sailer & Hähner, "An Adaptive Flow-Aware Packet Scheduling Algorithm for
//! Multipath Tunnelling"), Algorithms 1 and 2, and striping for flows one lane cannot
//! carry.
//!
//! A known flow may leave its last lane only for a lane on which the packet cannot
//! overtake the flow's previous packet: `srtt_i + δ > srtt_last`, with δ the time since
//! that packet was sent (flowlet switching). Among the applicable lanes the one with
//! the lowest weighted fill `(fill + len) * srtt / cwnd` wins. New flows, and flows
//! whose lane went down, choose among all lanes that are up.
//!
//! Additions to the paper, each for a failure seen in the testbed
//! (docs/design/afmt-and-striping.md):
//! - A lane's delay in the flowlet rule is its SRTT plus the time to drain what braid
//!   has queued for it (`fill * srtt / cwnd`): a packet put behind a queue arrives that
//!   much later, and a switch to an emptier lane could otherwise overtake it.
//! - Another lane counts as slower only by a margin (2 ms plus an eighth of the last
//!   lane's delay): a smoothed RTT lags the queue it measures, and without the margin
//!   bulk flows switched lanes back and forth and arrived out of order.
//! - A new flow's weighted fill is multiplied by one plus the number of busy flows
//!   (sent within the last 500 ms) its lane already carries. On idle lanes QUIC's cwnd
//!   and SRTT say nothing about capacity (cwnd does not grow while a connection is
//!   application-limited), so without it all flows that start together land on one
//!   lane; counting quiet flows too kept bulk flows off a lane holding only a control
//!   connection.
//! - A busy flow moves only when its lane backs up (fill over half the cwnd), and only
//!   to a lane carrying at least two busy flows fewer, on which it cannot overtake its
//!   previous packet. Bulk TCP backs up whatever lane it is on, and without this rule
//!   flows drifted onto ever slower lanes and left the others empty for good: an unused
//!   lane has the lowest delay, so no busy flow may move to it under the flowlet rule.
//!
//! Striping (`afmt`, not `afmt-flowlet`): a flow whose lane is full (a packet would
//! wait more than 2 ms and a sixteenth of the lane's lowest SRTT in braid's queue and
//! at the uplink's bottleneck together) while no lane with two busy flows fewer takes
//! it and some other lane has room is striped: from then on each of its packets takes
//! the lane where it is expected to arrive first, `srtt / 2 + (fill + len) * srtt /
//! cwnd` (`srtt / 2` for a lane with nothing queued, `LaneView::arrival`), which
//! spreads a bulk flow over the lanes in proportion to what each carries and keeps
//! arrival order close to send order. A lane where the packet may arrive after the
//! receiver stops waiting for it (`LaneView::latest_arrival` later than the first
//! estimate by more than the resequencing deadline) is passed over: a full window of
//! a few bursts in a lane's first slow start may hold a packet a whole round trip.
//! Its packets carry the gap to the flow's previous packet, and the receiving
//! gateway puts them back in order (`reseq.rs`).
//! The flow stops being striped once it pauses for longer than the slowest lane takes
//! to deliver, so short and light flows never stripe. A bulk flow (more than
//! [`BULK_BYTES`] without a pause) that has its lane to itself stripes before the
//! lane fills, as soon as another lane has room: the inner TCP's slow start then
//! meets the capacity of all lanes, not the first lane's queue (Linux CUBIC's
//! HyStart leaves slow start on the first long ACK train, and the window it then
//! grows by CUBIC's curve took 5 to 10 s to fill three uplinks).
//! A lane idle for longer than its SRTT counts by its lowest SRTT: its queue has
//! drained, and an idle connection's SRTT is not renewed. Where no lane has room (every
//! lane full, e.g. several bulk flows and cross traffic), striping would only move
//! queues around: the flowlet rules decide as in `afmt-flowlet`, which moves a
//! backed-up flow to a lane with fewer busy flows even if its queued packets then
//! arrive late. With striping on, any move of a flow between lanes also numbers its
//! packets until the flow pauses (a striped flow: until it pauses while not
//! striped), so the receiver keeps its order whatever the flowlet rule misjudged.

use std::time::Duration;

use super::{DecisionKind, Pick, PickContext, Scheduler, least_weighted_fill};
use crate::core::flow::FlowTable;
use crate::core::lane::{LaneId, LaneView, longest_one_way};
use crate::core::packet::FlowKey;
use crate::core::reseq::base_deadline;
use crate::core::time::Instant;
use crate::core::wire::MAX_GAP;

/// Fixed part of the margin by which another lane must be slower before a busy flow
/// may move to it (the other part is an eighth of the last lane's delay).
const SWITCH_MARGIN: Duration = Duration::from_millis(2);
/// How long a packet may wait on a lane (plus a sixteenth of the lane's lowest SRTT)
/// before the lane counts as full: little, as the inner TCP leaves slow start once
/// its RTT grows by an eighth of it (at least 4 ms; Linux's HyStart), and a flow that
/// needs more than its lane should spread before that.
const QUEUE_MARGIN: Duration = Duration::from_millis(2);
/// A flow counts as busy, and towards its lane's load, for this long after its last
/// packet: a connection that went quiet (a control channel, an idle SSH session)
/// should not keep bulk flows off its lane.
const BUSY_WINDOW: Duration = Duration::from_millis(500);

/// A flow that sent this much without pausing is bulk: striped while another lane
/// has room, before its lane fills, so that the inner transport's slow start sees
/// the capacity of every lane with room rather than ending at one lane's.
const BULK_BYTES: u64 = 128 * 1024;

/// What AFMT remembers of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FlowState {
    /// The lane of its last packet.
    lane: LaneId,
    /// The sequence number of its last packet.
    seq: u32,
    /// Striped: each packet takes the lane where it arrives first.
    striped: bool,
    /// Its packets may overtake each other (striped, or moved to another lane since
    /// its last pause): each names its predecessor, and the receiver keeps the order.
    ordered: bool,
    /// Bytes it sent since its last pause.
    burst: u64,
}

pub struct Afmt {
    /// SPEC §3's flow table: flow -> last lane and when it was last used.
    flows: FlowTable<FlowState>,
    /// The flows that sent within [`BUSY_WINDOW`], and their lanes.
    busy: FlowTable<LaneId>,
    /// How many busy flows each lane carries (lanes with none are absent).
    busy_on: Vec<(LaneId, u64)>,
    /// Whether flows its lane cannot carry are striped (`afmt`) or not
    /// (`afmt-flowlet`).
    stripe: bool,
    /// The flow of the last pick and its state before it, for [`Scheduler::unsent`].
    undo: Option<(FlowKey, Option<FlowState>)>,
}

impl Afmt {
    pub fn new(idle_timeout: Duration, max_flows: usize, stripe: bool) -> Afmt {
        Afmt {
            flows: FlowTable::new(idle_timeout, max_flows),
            busy: FlowTable::new(BUSY_WINDOW.min(idle_timeout), max_flows),
            busy_on: Vec::new(),
            stripe,
            undo: None,
        }
    }
}

/// How long a packet handed to the lane now takes to arrive: its SRTT plus the time
/// to drain braid's queue for it at the lane's rate (cwnd per SRTT).
fn delay(l: &LaneView) -> Duration {
    l.srtt + l.drain_time(0, l.srtt)
}

/// The up lane where a packet of `len` bytes arrives first; ties go to the first.
/// A lane whose queue is past its bound ([`LaneView::past_bound`]) is not taken while
/// another lane is within its own, nor is a lane where the packet may arrive after
/// the receiver stops waiting for it (later than the earliest lane's packets by more
/// than the resequencing deadline) while another is up.
///
/// Why the bound: a short lane's bound (30 ms beyond the longest lane's delay) is
/// tighter than a long lane's (50 ms), and striping evens out arrival times, so the
/// short lane reached its bound while the long one still had room: when cross
/// traffic cut one lane's window, the short lane, at its bound, dropped a burst of
/// every download's packets while the long lane's queue had room to spare
/// (docs/design/afmt-and-striping.md).
fn earliest_arrival(lanes: &[LaneView], len: usize, now: Instant) -> Option<usize> {
    // With `bounded`, the longest lane's one-way delay, lanes within their bound come
    // first (`false` orders before `true`), then arrival decides.
    let pick = |safe_by: Option<Duration>, bounded: Option<Duration>| {
        let mut best: Option<((bool, Duration), usize)> = None;
        for (i, l) in lanes.iter().enumerate() {
            if !l.up {
                continue;
            }
            let at = l.arrival(len, now);
            let latest = || l.latest_arrival(len, now).unwrap_or(at);
            if safe_by.is_some_and(|by| latest() > by) {
                continue;
            }
            let key = (bounded.is_some_and(|longest| l.past_bound(longest)), at);
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, i));
            }
        }
        best
    };
    let mut bounded = None;
    let mut best = pick(None, bounded)?;
    // The earliest lane is rarely past its bound: only then are all lanes asked.
    let longest = longest_one_way(lanes);
    if lanes[best.1].past_bound(longest) {
        bounded = Some(longest);
        best = pick(None, bounded)?;
    }
    let ((_, at), first) = best;
    // Only a full window of a few bursts arrives later than its estimate: the common
    // case takes the first lane without a second pass or the deadline.
    let Some(latest) = lanes[first].latest_arrival(len, now) else {
        return Some(first);
    };
    let by = at + base_deadline(lanes);
    if latest <= by {
        return Some(first);
    }
    Some(pick(Some(by), bounded).map_or(first, |(_, i)| i))
}

/// braid's queue for the lane holds more than half its congestion window.
fn backs_up(l: &LaneView) -> bool {
    l.fill.saturating_mul(2) > l.cwnd
}

/// The lane carries all it can: a packet handed to it now waits, in braid's queue
/// and at the uplink's bottleneck ([`LaneView::bottleneck_queue`]), longer than
/// [`QUEUE_MARGIN`] plus a sixteenth of the lane's lowest SRTT. Either queue may be
/// the one that grows: QUIC's window may cover the bottleneck's queue, so that braid's
/// stays empty, or braid's may fill first on a lane with a large delay. Over an
/// uplink whose delay varies, the round trips above the lowest that the variation
/// accounts for are no queue: counted as one, the varying lane looked full at all
/// times, no flow striped onto it, and a 50 Mbit/s uplink carried 30 Mbit/s of a
/// download with its window three-quarters unused.
fn full(l: &LaneView, now: Instant) -> bool {
    let queued = l.drain_time(0, l.srtt) + l.bottleneck_queue(now);
    queued > QUEUE_MARGIN + l.min_srtt / 16
}

/// The lane could carry more: up and not full.
fn has_room(l: &LaneView, now: Instant) -> bool {
    l.up && !full(l, now)
}

/// Busy flows on `lane`.
fn count(flows_on: &[(LaneId, u64)], lane: LaneId) -> u64 {
    flows_on
        .iter()
        .find(|(l, _)| *l == lane)
        .map_or(0, |(_, n)| *n)
}

fn add_flow(flows_on: &mut Vec<(LaneId, u64)>, lane: LaneId) {
    match flows_on.iter_mut().find(|(l, _)| *l == lane) {
        Some((_, n)) => *n += 1,
        None => flows_on.push((lane, 1)),
    }
}

fn remove_flow(flows_on: &mut Vec<(LaneId, u64)>, lane: LaneId) {
    if let Some(i) = flows_on.iter().position(|(l, _)| *l == lane) {
        flows_on[i].1 -= 1;
        if flows_on[i].1 == 0 {
            flows_on.swap_remove(i);
        }
    }
}

impl Scheduler for Afmt {
    fn pick(&mut self, cx: &PickContext<'_>) -> Option<Pick> {
        let PickContext {
            flow,
            len,
            seq,
            lanes,
            now,
        } = *cx;
        self.expire(now);
        let known = self.flows.get(flow);
        // The lane this flow is counted on while busy.
        let counted_on = self.busy.get(flow).map(|e| e.value);
        let last = known.and_then(|e| {
            let i = lanes.iter().position(|l| l.id == e.value.lane && l.up)?;
            Some((i, now.saturating_since(e.last_used)))
        });
        let was_striped = known.is_some_and(|e| e.value.striped);
        let since_previous = known.map(|e| now.saturating_since(e.last_used));
        let mut burst = known.map_or(0, |e| e.value.burst) + len as u64;
        let mut ordered = known.is_some_and(|e| e.value.ordered);
        // A lane's load as a multiple of its weighted fill: the busy flows it would
        // carry with this one.
        let sharing = |i: usize| {
            let id = lanes[i].id;
            1 + count(&self.busy_on, id) - u64::from(counted_on == Some(id))
        };
        let mut striped = false;
        let pick = match last {
            Some((last, delta)) => {
                let current = &lanes[last];
                // A smoothed RTT lags the queue it measures: another lane must look
                // slower by a margin before a busy flow may move to it. A striped
                // flow's packets may still be on any lane: the slowest one counts.
                let delay_last = if was_striped {
                    lanes.iter().filter(|l| l.up).map(delay).max()?
                } else {
                    delay(current)
                };
                let bar = delay_last + SWITCH_MARGIN + delay_last / 8;
                let busy_here = count(&self.busy_on, current.id);
                let room_elsewhere = || {
                    lanes
                        .iter()
                        .enumerate()
                        .any(|(i, l)| i != last && has_room(l, now))
                };
                let lane = if delta > bar {
                    // The flow paused for longer than its last packet should take to
                    // arrive: every lane is applicable. A striped flow stays numbered:
                    // its packets were spread over lanes with queues, and the estimate
                    // lags (SRTTs are smoothed, and quinn may hold datagrams back
                    // behind a window that just shrank), so its next packets would
                    // overtake earlier ones (docs/design/resequencing.md). Other flows
                    // stop being numbered: a sparse flow (a VoIP call) that stays
                    // numbered waits a deadline at the receiver for each packet lost
                    // with a dead lane, a long gap in a failover.
                    ordered &= was_striped;
                    burst = len as u64;
                    least_weighted_fill(lanes, len, |_, l| l.up, sharing)?
                } else if was_striped {
                    striped = true;
                    earliest_arrival(lanes, len, now)?
                } else if !(backs_up(current) || self.stripe && full(current, now)) {
                    // The lane keeps up with the flow: no reason to move (a busier
                    // lane's larger cwnd would otherwise lure flows away from lanes
                    // whose cwnd never grew for want of load), unless it is bulk, has
                    // the lane to itself, and another lane has room.
                    let alone = busy_here <= 1;
                    let bulk = self.stripe && alone && burst >= BULK_BYTES;
                    if bulk && room_elsewhere() {
                        let first = earliest_arrival(lanes, len, now)?;
                        striped = first != last;
                        first
                    } else {
                        last
                    }
                } else {
                    // The lane backs up. Bulk flows never pause, so a lane nobody uses
                    // (the fastest, as it has no queue) would stay empty for good while
                    // others carry several. A flow may leave for a lane carrying at
                    // least two busy flows fewer, so that every move evens out the
                    // counts and flows cannot be traded back and forth, if it cannot
                    // overtake its previous packet there.
                    let fewer = |l: &LaneView| l.up && count(&self.busy_on, l.id) + 2 <= busy_here;
                    let safe_move = least_weighted_fill(
                        lanes,
                        len,
                        |i, l| i == last || (fewer(l) && delay(l) + delta > bar),
                        sharing,
                    )
                    .filter(|&i| i != last);
                    match safe_move {
                        Some(lane) => lane,
                        None if self.stripe && room_elsewhere() => {
                            // Another lane has room: the flow spreads, each packet to
                            // where it arrives first.
                            let first = earliest_arrival(lanes, len, now)?;
                            striped = first != last;
                            first
                        }
                        // The paper's AFMT: any lane with fewer flows, and the packets
                        // still queued on the old lane may then arrive late.
                        None => {
                            least_weighted_fill(lanes, len, |i, l| i == last || fewer(l), sharing)?
                        }
                    }
                };
                let kind = if striped {
                    DecisionKind::Stripe
                } else if lane == last {
                    DecisionKind::SameLane
                } else {
                    DecisionKind::Switch
                };
                // With a receiver that resequences, any move is insured: SRTTs lag
                // the queues they measure, and the flowlet rule can misjudge.
                ordered |= self.stripe && kind != DecisionKind::SameLane;
                let gap = match known {
                    Some(e) if ordered => u16::try_from(seq.wrapping_sub(e.value.seq))
                        .ok()
                        .filter(|&gap| gap <= MAX_GAP)
                        .unwrap_or(0),
                    _ => 0,
                };
                Pick {
                    lane,
                    kind,
                    gap,
                    since_previous,
                }
            }
            None => {
                let lane = least_weighted_fill(lanes, len, |_, l| l.up, sharing)?;
                ordered = false;
                burst = len as u64;
                Pick {
                    lane,
                    kind: DecisionKind::NewFlow,
                    gap: 0,
                    since_previous,
                }
            }
        };
        let chosen = lanes[pick.lane].id;
        if counted_on != Some(chosen) {
            if let Some(lane) = counted_on {
                remove_flow(&mut self.busy_on, lane);
            }
            add_flow(&mut self.busy_on, chosen);
        }
        if let Some(evicted) = self.busy.record(flow, chosen, now) {
            remove_flow(&mut self.busy_on, evicted);
        }
        let state = FlowState {
            lane: chosen,
            seq,
            striped,
            ordered,
            burst,
        };
        self.undo = Some((flow, known.map(|e| e.value)));
        self.flows.record(flow, state, now);
        Some(pick)
    }

    fn unsent(&mut self, flow: FlowKey) {
        // The flow's next packet must name the last one that left as its previous.
        if let Some((undo_flow, Some(before))) = self.undo.take()
            && undo_flow == flow
            && let Some(state) = self.flows.get_mut(flow)
        {
            *state = before;
        }
    }

    fn flows(&self) -> usize {
        self.flows.len()
    }

    fn expire(&mut self, now: Instant) {
        let busy_on = &mut self.busy_on;
        self.busy.expire(now, |lane| remove_flow(busy_on, lane));
        self.flows.expire(now, |_| ());
    }

    fn next_expiry(&self) -> Option<Instant> {
        // The busy table forgets sooner than the flow table, but both at once is
        // enough: a lane's busy count only matters when a packet is scheduled.
        self.flows.next_expiry()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::sched::testing::lane;

    const MS: u64 = 1_000_000;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * MS)
    }

    /// The flowlet rules alone (`afmt-flowlet`).
    fn afmt() -> Afmt {
        Afmt::new(Duration::from_secs(10), 1000, false)
    }

    /// With striping (`afmt`).
    fn striping() -> Afmt {
        Afmt::new(Duration::from_secs(10), 1000, true)
    }

    #[test]
    fn a_new_flow_takes_the_lane_with_the_lowest_weighted_fill() {
        // weighted fill = (fill + 1000) * srtt / cwnd:
        //   lane 0: 11000 * 10 / 10000 = 11;  lane 1: 1000 * 40 / 20000 = 2;
        //   lane 2: 5000 * 20 / 10000 = 10
        let lanes = [
            lane(0, 10, 10_000, 10_000),
            lane(1, 40, 20_000, 0),
            lane(2, 20, 10_000, 4000),
        ];
        let p = afmt()
            .pick(&PickContext::test(FlowKey(1), 1000, 0, &lanes, at(0)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::NewFlow,
                gap: 0,
                since_previous: None
            }
        );
    }

    /// Lanes 0 (fast, 10 ms) and 1 (slow, 50 ms), and `flows` started on lane `on`
    /// while the other was down; afterwards both lanes are up and empty.
    fn flows_started_on(s: &mut Afmt, on: usize, flows: &[u64]) -> [LaneView; 2] {
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        lanes[1 - on].up = false;
        for &f in flows {
            assert_eq!(
                s.pick(&PickContext::test(FlowKey(f), 1000, 0, &lanes, at(0)))
                    .expect("pick")
                    .lane,
                on
            );
        }
        lanes[1 - on].up = true;
        lanes
    }

    #[test]
    fn a_known_flow_keeps_its_lane_unless_another_cannot_reorder() {
        let mut s = afmt();
        let mut lanes = flows_started_on(&mut s, 0, &[7, 8]);
        // Lane 0 keeps up (fill at most half the cwnd): its flows stay.
        lanes[0].fill = 5000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // Lane 0 backs up with 10 000 bytes: its delay is 10 + 10 000 * 10 / 10 000 =
        // 20 ms, its weighted fill 11 times 2 busy flows against lane 1's 5. Lane 1
        // (50 ms) is slower than 20 ms plus the margin (2 ms + 20/8 ms), so flow 7 may
        // move there without overtaking its previous packet.
        lanes[0].fill = 10_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::Switch,
                gap: 0,
                since_previous: Some(Duration::ZERO)
            }
        );
        // Now each lane carries one busy flow: flow 8 stays however backed up lane 0 is.
        lanes[0].fill = 100_000;
        let p = s
            .pick(&PickContext::test(FlowKey(8), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // The slow lane keeps up with flow 7, so it stays there until it pauses for
        // longer than that lane's delay plus the margin, 50 + 2 + 50/8 = 58.25 ms.
        lanes[0].fill = 0;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(1 + 58)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // After the pause every lane is applicable: lane 0's weighted fill, 1 times 2
        // busy flows (flow 8 and this one), beats lane 1's 5.
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(59 + 59)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 0,
                kind: DecisionKind::Switch,
                gap: 0,
                since_previous: Some(Duration::from_millis(59))
            }
        );
    }

    #[test]
    fn a_backed_up_lane_sheds_flows_only_to_lanes_with_two_busy_flows_fewer() {
        let mut s = afmt();
        let mut lanes = flows_started_on(&mut s, 0, &[7, 8, 9]);
        lanes[0].fill = 20_000;
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(1)))
                .expect("pick")
                .lane,
            1
        );
        // Lane 0 still carries two busy flows to lane 1's one: flow 8 may not follow,
        // lane 1 would then carry as many and the lanes could trade flows back and forth.
        let p = s
            .pick(&PickContext::test(FlowKey(8), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);

        // Two bulk flows on the slow lane, which backs up, and the fast lane empty: no
        // move can avoid overtaking (10 ms + 1 ms is not above 50 + 2 + 50/8 ms), but
        // left alone the fast lane would stay empty for good. One flow moves.
        let mut s = afmt();
        let mut lanes = flows_started_on(&mut s, 1, &[7, 8]);
        lanes[1].fill = 4000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane, "lane 1 keeps up");
        lanes[1].fill = 20_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 0, &lanes, at(2)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 0,
                kind: DecisionKind::Switch,
                gap: 0,
                since_previous: Some(Duration::from_millis(1))
            }
        );
        let p = s
            .pick(&PickContext::test(FlowKey(8), 1000, 0, &lanes, at(2)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane, "one busy flow each");
    }

    #[test]
    fn a_flow_its_lane_cannot_carry_is_striped_and_numbered_for_the_receiver() {
        let mut s = striping();
        let mut lanes = flows_started_on(&mut s, 1, &[7]);
        // Lane 1 backs up and no lane carries two busy flows fewer: the flow spreads.
        // Arrival on lane 0: 10/2 + 1000 * 10/10 000 = 6 ms; on lane 1: 50/2 + 21 000
        // * 50/10 000 = 130 ms. Its previous packet was number 0, this one is 5.
        lanes[1].fill = 20_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 5, &lanes, at(1)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 0,
                kind: DecisionKind::Stripe,
                gap: 5,
                since_previous: Some(Duration::from_millis(1))
            }
        );
        // Striped, every packet names its predecessor; one that was not sent after all
        // is not named.
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 6, &lanes, at(2)))
            .expect("pick");
        assert_eq!((p.kind, p.gap), (DecisionKind::Stripe, 1));
        s.unsent(FlowKey(7));
        lanes[0].fill = 200_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 7, &lanes, at(3)))
            .expect("pick");
        assert_eq!((p.lane, p.kind, p.gap), (1, DecisionKind::Stripe, 2));
        // After a pause longer than the slowest lane takes (lane 0 now: 10 + 200 000 *
        // 10/10 000 = 210 ms, plus the margin), the flow is a flowlet again, and still
        // numbered, as it was striped: the estimate may be wrong, and the receiver
        // holds the packet only if its predecessor is late.
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 8, &lanes, at(3 + 240)))
            .expect("pick");
        assert_eq!((p.lane, p.kind, p.gap), (1, DecisionKind::SameLane, 1));
        // Its next pause, no longer striped, ends the numbering.
        let p = s
            .pick(&PickContext::test(
                FlowKey(7),
                1000,
                9,
                &lanes,
                at(243 + 240),
            ))
            .expect("pick");
        assert_eq!((p.kind, p.gap), (DecisionKind::SameLane, 0));
        // A flow that was never moved is not numbered, pause or not.
        let p = s
            .pick(&PickContext::test(FlowKey(9), 1000, 10, &lanes, at(250)))
            .expect("pick");
        assert_eq!(p.gap, 0);
        let p = s
            .pick(&PickContext::test(FlowKey(9), 1000, 11, &lanes, at(500)))
            .expect("pick");
        assert_eq!((p.kind, p.gap), (DecisionKind::SameLane, 0));

        // The paper's AFMT leaves a single flow on its lane, however backed up.
        let mut s = afmt();
        let mut lanes = flows_started_on(&mut s, 1, &[7]);
        lanes[1].fill = 20_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 5, &lanes, at(1)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::SameLane,
                gap: 0,
                since_previous: Some(Duration::from_millis(1))
            }
        );
    }

    /// Two lanes of 10 ms, empty, and just used.
    fn two_equal_lanes(now: Instant) -> [LaneView; 2] {
        [0, 1].map(|i| LaneView {
            min_srtt: Duration::from_millis(10),
            last_sent: now,
            ..lane(i, 10, 100_000, 0)
        })
    }

    #[test]
    fn a_bulk_flow_alone_on_its_lane_stripes_before_the_lane_fills_and_a_short_one_does_not() {
        let mut s = striping();
        let lanes = two_equal_lanes(at(0));
        let first = s
            .pick(&PickContext::test(FlowKey(7), 1400, 0, &lanes, at(0)))
            .expect("pick")
            .lane;
        // Neither lane is full, so only the flow's size can make it stripe: the first
        // 128 KiB of a burst stay on their lane.
        let packets = (BULK_BYTES / 1400) as u32;
        for seq in 1..packets {
            let p = s
                .pick(&PickContext::test(FlowKey(7), 1400, seq, &lanes, at(1)))
                .expect("pick");
            assert_eq!(
                (p.lane, p.kind),
                (first, DecisionKind::SameLane),
                "packet {seq}"
            );
        }
        // Past that, its packets go where they arrive first: the other lane, as its
        // own has one packet's worth more queued.
        let mut busier = lanes;
        busier[first].fill = 1400;
        let p = s
            .pick(&PickContext::test(
                FlowKey(7),
                1400,
                packets,
                &busier,
                at(1),
            ))
            .expect("pick");
        assert_eq!((p.lane, p.kind), (1 - first, DecisionKind::Stripe));

        // Sharing its lane with another busy flow, a bulk flow is left to the flowlet
        // rules until its lane fills.
        let mut s = striping();
        let mut lanes = two_equal_lanes(at(0));
        lanes[1 - first].up = false;
        s.pick(&PickContext::test(FlowKey(8), 1400, 0, &lanes, at(0)))
            .expect("pick");
        for seq in 0..=packets {
            let p = s
                .pick(&PickContext::test(FlowKey(7), 1400, seq, &lanes, at(1)))
                .expect("pick");
            assert_eq!(p.lane, first);
        }
        lanes[1 - first].up = true;
        lanes[first].fill = 1400;
        let p = s
            .pick(&PickContext::test(
                FlowKey(7),
                1400,
                packets + 1,
                &lanes,
                at(1),
            ))
            .expect("pick");
        assert_eq!((p.lane, p.kind), (first, DecisionKind::SameLane));
    }

    #[test]
    fn an_empty_lane_takes_a_striped_packet_once_the_others_deliver_later_than_its_path() {
        // Lane 0: 20 ms round trip, a 50 kB window and 130 kB queued, so a packet arrives
        // after 10 + 131 400 * 20/50 000 = 62.6 ms. Lane 1: 120 ms, QUIC's initial window,
        // nothing queued: the packet leaves at once and arrives after 60 ms. Counted at
        // the window's rate, it would arrive after 60 + 1400 * 120/14 720 = 71.4 ms, and
        // striped packets would go there only once lane 0 queued 9 ms more.
        // Both at their paths' delays, so lane 0's queue, 2.6 ms beyond lane 1's path,
        // is within its bound.
        let mut lanes = [lane(0, 20, 50_000, 130_000), lane(1, 120, 14_720, 0)];
        for l in &mut lanes {
            l.min_srtt = l.srtt;
        }
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(1));
        // Once it holds a packet, the next one waits behind it at the window's rate:
        // 60 + 2800 * 120/14 720 = 82.8 ms.
        lanes[1].fill = 1400;
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(0));
    }

    #[test]
    fn a_striped_packet_passes_over_a_lane_at_its_bound_for_one_with_room() {
        // Lane 0: 10 ms away, a 50 kB window per 20 ms and 205 kB queued: a packet
        // arrives after 10 + 206 400 * 20/50 000 = 92.6 ms and waits 32 ms beyond the
        // 60 ms of lane 1's path, past lane 0's bound of 30. Lane 1: 60 ms away, its
        // SRTT 150 ms, a 900 kB window and 120 kB queued: 75 + 121 400 * 150/900 000
        // = 95.2 ms, 20 ms beyond its path, within its bound of 50.
        let lane_at = |id, min_srtt, srtt, cwnd, fill| LaneView {
            min_srtt: Duration::from_millis(min_srtt),
            ..lane(id, srtt, cwnd, fill)
        };
        let mut lanes = [
            lane_at(0, 20, 20, 50_000, 205_000),
            lane_at(1, 120, 150, 900_000, 120_000),
        ];
        assert!(lanes[0].past_bound(Duration::from_millis(60)));
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(1));
        // Of known rate, lane 0 goes through its uplink's shaper, bounded at 50 ms.
        lanes[0].rate_kbps = Some(16_000);
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(0));
        lanes[0].rate_kbps = None;
        // Within its bound (190 kB: 26 ms beyond), lane 0 is earliest again.
        lanes[0].fill = 190_000;
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(0));
        // With both past their bounds (lane 1: 400 kB, 67 ms beyond), the earliest
        // lane takes it, and its queue's bound decides.
        lanes[0].fill = 205_000;
        lanes[1].fill = 400_000;
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(0));
    }

    #[test]
    fn a_packet_that_a_full_window_of_a_few_bursts_may_hold_past_the_deadline_goes_elsewhere() {
        // Lane 0: 20 ms round trip, a 50 kB window and 200 kB queued: a packet arrives
        // after 10 + 201 400 * 20/50 000 = 90.6 ms. Lane 1: 120 ms, in its first slow
        // start with a 23.5 kB window (under 20 datagrams) and one datagram waiting:
        // by the window's rate the packet would arrive after 60 + 2 800 * 120/23 500
        // = 74.3 ms, but it may wait for the window's acknowledgements, 60 + 120 ms,
        // later than the receiver waits: 74.3 ms and a deadline of (120 - 20) / 2 +
        // 120 / 8 = 65 ms.
        let mut lanes = [
            lane(0, 20, 50_000, 200_000),
            LaneView {
                first_slow_start: true,
                ..lane(1, 120, 23_500, 1_400)
            },
        ];
        assert_eq!(
            lanes[1].latest_arrival(1400, at(0)),
            Some(Duration::from_millis(180))
        );
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(0));
        // With nothing waiting, the window has room and the packet leaves at once.
        lanes[1].fill = 0;
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(1));
        // A window of more bursts is paced: its queue drains at the window's rate.
        lanes[1].fill = 1_400;
        lanes[1].cwnd = 100_000;
        assert_eq!(lanes[1].latest_arrival(1400, at(0)), None);
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(1));
        // So does a small window once a reduction or loss ended the first slow start.
        lanes[1].cwnd = 23_500;
        lanes[1].first_slow_start = false;
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(1));
        // A short lane's whole round trip stays within the deadline: lane 2, 40 ms, in
        // its first slow start with a full 14 kB window, is expected after 20 + 2 800 *
        // 40/14 000 = 28 ms and arrives by 20 + 40 = 60 ms at the latest, within 28 +
        // 65 ms.
        let lanes = [
            lanes[0],
            lanes[1],
            LaneView {
                first_slow_start: true,
                ..lane(2, 40, 14_000, 1_400)
            },
        ];
        assert_eq!(
            lanes[2].latest_arrival(1400, at(0)),
            Some(Duration::from_millis(60))
        );
        assert_eq!(earliest_arrival(&lanes, 1400, at(0)), Some(2));
    }

    #[test]
    fn an_idle_lane_counts_by_its_lowest_srtt_not_its_last() {
        // Lane 0's SRTT still shows the queue it had when last used.
        let mut l = LaneView {
            min_srtt: Duration::from_millis(10),
            last_sent: at(0),
            ..lane(0, 40, 100_000, 0)
        };
        assert!(
            full(&l, at(5)) && !has_room(&l, at(5)),
            "in use, its queue is real"
        );
        assert!(
            has_room(&l, at(41)),
            "idle for longer than its SRTT: the queue is gone"
        );
        assert_eq!(l.arrival(0, at(41)), Duration::from_millis(5));
        l.last_sent = at(40);
        assert_eq!(l.arrival(0, at(41)), Duration::from_millis(20));
    }

    #[test]
    fn a_queue_at_the_uplink_shows_in_the_srtt_and_makes_a_flow_stripe_onto_lanes_with_room() {
        let mut s = striping();
        let mut lanes = flows_started_on(&mut s, 1, &[7]);
        lanes[0].min_srtt = Duration::from_millis(10);
        lanes[1].min_srtt = Duration::from_millis(50);
        // 5 ms above the lowest (2 ms and a sixteenth of 50) is still no queue...
        lanes[1].srtt = Duration::from_millis(55);
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 1, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // ...beyond it the lane carries all it can, but lane 0 has no room either
        // (6 ms to drain its queue): striping would only move queues around.
        lanes[1].srtt = Duration::from_millis(60);
        lanes[0].fill = 6_000;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 2, &lanes, at(2)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // Lane 0 has room again: the flow spreads.
        lanes[0].fill = 0;
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 3, &lanes, at(3)))
            .expect("pick");
        assert_eq!((p.lane, p.kind, p.gap), (0, DecisionKind::Stripe, 1));
    }

    #[test]
    fn round_trips_that_an_uplinks_delay_variation_accounts_for_leave_its_lane_room() {
        let mut s = striping();
        let mut lanes = flows_started_on(&mut s, 0, &[7]);
        // Lane 0's queue takes 40 ms to drain: a packet arrives 45 ms from now there,
        // 40 ms from now on lane 1, whose round trips stand 30 ms above its lowest.
        lanes[0].fill = 40_000;
        lanes[1].min_srtt = Duration::from_millis(50);
        lanes[1].srtt = Duration::from_millis(80);
        // Taken for a queue, those 30 ms leave no lane with room: the flow stays.
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 1, &lanes, at(1)))
            .expect("pick");
        assert_eq!(p.kind, DecisionKind::SameLane);
        // Over an uplink whose delay varies by 20 ms each way, a loaded lane's round
        // trips stand that far above the lowest without a queue: the flow stripes.
        lanes[1].delay_variation = Duration::from_millis(20);
        let p = s
            .pick(&PickContext::test(FlowKey(7), 1000, 2, &lanes, at(2)))
            .expect("pick");
        assert_eq!((p.lane, p.kind), (1, DecisionKind::Stripe));
        // Beyond the variation's allowance, the rest is a queue again.
        assert_eq!(lanes[1].bottleneck_queue(at(2)), Duration::ZERO);
        lanes[1].srtt = Duration::from_millis(86);
        assert_eq!(lanes[1].bottleneck_queue(at(2)), Duration::from_millis(6));
        assert!(full(&lanes[1], at(2)));
    }

    #[test]
    fn a_quiet_flow_stops_counting_for_its_lane() {
        let mut s = afmt();
        // Lane 1 is a little faster (weighted fill 10 against 11) but down at first.
        let mut lanes = [lane(0, 11, 1000, 0), lane(1, 10, 1000, 0)];
        lanes[1].up = false;
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(1), 1000, 0, &lanes, at(0)))
                .expect("pick")
                .lane,
            0
        );
        lanes[1].up = true;
        // Flow 1 is busy on lane 0 until 500 ms after its packet, so lane 0 counts
        // twice (22 against 10 and then 20): flows 2 and 3 go to lane 1.
        for f in [2, 3] {
            assert_eq!(
                s.pick(&PickContext::test(FlowKey(f), 1000, 0, &lanes, at(499)))
                    .expect("pick")
                    .lane,
                1
            );
        }
        // From then on flow 1 is quiet (though still in the flow table): lane 0's 11
        // beats lane 1's 3 times 10.
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(4), 1000, 0, &lanes, at(500)))
                .expect("pick")
                .lane,
            0
        );
        assert_eq!(s.flows(), 4);
    }

    #[test]
    fn a_down_lane_makes_its_flows_new() {
        let mut s = afmt();
        let mut lanes = [lane(0, 10, 10_000, 0), lane(1, 50, 10_000, 0)];
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(3), 1000, 0, &lanes, at(0)))
                .expect("pick")
                .lane,
            0
        );
        lanes[0].up = false;
        let p = s
            .pick(&PickContext::test(FlowKey(3), 1000, 0, &lanes, at(1)))
            .expect("pick");
        assert_eq!(
            p,
            Pick {
                lane: 1,
                kind: DecisionKind::NewFlow,
                gap: 0,
                since_previous: Some(Duration::from_millis(1))
            }
        );
        lanes[1].up = false;
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(3), 1000, 0, &lanes, at(2))),
            None
        );
    }

    #[test]
    fn an_idle_flow_expires_and_is_new_again() {
        let mut s = Afmt::new(Duration::from_millis(100), 10, true);
        let lanes = [lane(0, 10, 10_000, 0)];
        s.pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(0)));
        assert_eq!(s.flows(), 1);
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(99)))
                .expect("pick")
                .kind,
            DecisionKind::SameLane
        );
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(199)))
                .expect("pick")
                .kind,
            DecisionKind::NewFlow
        );
    }

    #[test]
    fn flows_starting_together_spread_over_idle_lanes() {
        let mut s = afmt();
        let lanes = [
            lane(0, 10, 12_000, 0),
            lane(1, 10, 12_000, 0),
            lane(2, 10, 12_000, 0),
        ];
        let picks: Vec<usize> = (0..6)
            .map(|f| {
                s.pick(&PickContext::test(FlowKey(f), 100, 0, &lanes, at(0)))
                    .expect("pick")
                    .lane
            })
            .collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        // A flow that expired no longer counts for its lane.
        let mut s = Afmt::new(Duration::from_millis(10), 100, true);
        s.pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(0)));
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(2), 100, 0, &lanes, at(20)))
                .expect("pick")
                .lane,
            0
        );
        // Neither does an evicted one: flow 2 avoids flow 1's lane, then evicts flow 1.
        let mut s = Afmt::new(Duration::from_secs(10), 1, true);
        s.pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(0)));
        assert_eq!(
            s.pick(&PickContext::test(FlowKey(2), 100, 0, &lanes, at(1)))
                .expect("pick")
                .lane,
            1
        );
        assert_eq!(s.busy_on, [(lanes[1].id, 1)]);
    }

    #[test]
    fn ties_go_to_the_first_lane() {
        let lanes = [lane(0, 10, 10_000, 0), lane(1, 10, 10_000, 0)];
        assert_eq!(
            afmt()
                .pick(&PickContext::test(FlowKey(1), 100, 0, &lanes, at(0)))
                .expect("pick")
                .lane,
            0
        );
    }
}
