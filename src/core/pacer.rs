//! Earliest-departure-time pacing of many queues with one calendar (SPEC §4).
//!
//! Contract: each queue (an application of a site, in a [`Slot`]) releases its packets
//! in order, packet k at `d_k = max(arrival_k, d_{k-1} + len_{k-1} / rate)`, as Linux
//! fq and Carousel do. After a pause a queue may send up to `burst_bytes` at once, and
//! when the shell wakes late the queue catches up by at most [`CATCH_UP`] of
//! sending (plus the burst) instead of losing the time: over any window a queue sends
//! at most `rate × window + burst + rate × CATCH_UP + one packet`. A queue holding
//! packets has exactly one live entry in the calendar, a binary heap ordered by the
//! departure time of its head, so a packet costs O(log busy queues) and the shell
//! needs a single timer for every queue. A rate of 0 is unpaced: packets leave at
//! once (behind any still queued). Queues beyond `queue_limit_bytes` drop the
//! arriving packet (drop tail); a queue whose spec asks for it is also judged by how
//! long its packets wait, by CoDel (`core/aqm.rs`), and drops the arriving packet
//! once it has stood above its target for an interval. Re-rating keeps a queue's
//! packets.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use super::aqm::{CoDel, PACED_MTU};
use super::time::Instant;

/// How far behind schedule a queue may fall and still catch up at once: the shell's
/// timer resolution (tokio's is 1 ms) with margin for a busy event loop. Without it,
/// every late wake-up would be lost sending time and paced rates would come out low,
/// as they did with 2 ms (docs/design/pacing.md).
pub const CATCH_UP: Duration = Duration::from_millis(5);

/// Index of a queue in the pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlotId(pub u32);

/// How a queue is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceSpec {
    /// Bits per second; 0 for unpaced.
    pub rate_bps: u64,
    /// Bytes that may leave at once after a pause.
    pub burst_bytes: u64,
    /// Bytes the queue holds at most.
    pub queue_limit_bytes: u64,
    /// Whether CoDel also judges the queue by how long its packets wait, at a target
    /// fitted to the rate ([`CoDel::fit_rate`]).
    pub codel: bool,
}

/// What became of an enqueued packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Enqueued<T> {
    /// It may leave now.
    Now(T),
    /// It waits for its departure time; [`Pacer::release`] hands it back then.
    Queued,
    /// The queue is full: the packet is dropped (handed back to the caller).
    Dropped(T),
    /// The queue has stood above its target delay for an interval (its spec's
    /// `codel`): the packet is dropped (handed back to the caller).
    Standing(T),
}

#[derive(Debug)]
struct Slot<T> {
    spec: PaceSpec,
    /// When the next packet may leave, in nanoseconds.
    next_departure: u64,
    queue: VecDeque<(T, u32)>,
    queued_bytes: u64,
    /// The queue's CoDel state, used while the spec asks for it.
    codel: CoDel,
    /// Bumped whenever the slot's calendar entry is superseded or the slot is freed.
    epoch: u32,
    in_use: bool,
}

/// Every paced queue of a gateway and their calendar.
#[derive(Debug)]
pub struct Pacer<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// (departure time in ns, slot, epoch) of the head of every non-empty queue, plus
    /// superseded entries, which are skipped when they come up.
    calendar: BinaryHeap<Reverse<(u64, u32, u32)>>,
}

impl<T> Default for Pacer<T> {
    fn default() -> Pacer<T> {
        Pacer {
            slots: Vec::new(),
            free: Vec::new(),
            calendar: BinaryHeap::new(),
        }
    }
}

/// Nanoseconds to send `bytes` at `rate_bps` (0 when unpaced).
fn send_time(bytes: u64, rate_bps: u64) -> u64 {
    if rate_bps == 0 {
        return 0;
    }
    let nanos = u128::from(bytes) * 8 * 1_000_000_000 / u128::from(rate_bps);
    u64::try_from(nanos).unwrap_or(u64::MAX)
}

impl<T> Slot<T> {
    /// The earliest departure a queue that was idle may claim at `now`: it may have
    /// saved up the burst (and the catch-up allowance), no more.
    fn credit_floor(&self, now: u64) -> u64 {
        let catch_up = u64::try_from(CATCH_UP.as_nanos()).unwrap_or(u64::MAX);
        now.saturating_sub(send_time(self.spec.burst_bytes, self.spec.rate_bps) + catch_up)
    }
}

impl<T> Pacer<T> {
    /// A new empty queue.
    pub fn add(&mut self, spec: PaceSpec) -> SlotId {
        let slot = Slot {
            spec,
            next_departure: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            codel: CoDel::for_rate(spec.rate_bps),
            epoch: 0,
            in_use: true,
        };
        match self.free.pop() {
            Some(i) => {
                let epoch = self.slots[i as usize].epoch.wrapping_add(1);
                self.slots[i as usize] = Slot { epoch, ..slot };
                SlotId(i)
            }
            None => {
                self.slots.push(slot);
                SlotId(self.slots.len() as u32 - 1)
            }
        }
    }

    /// Changes how a queue is paced, keeping its packets; the head is rescheduled
    /// for no later than one packet time at the new rate from `now`.
    pub fn set(&mut self, id: SlotId, spec: PaceSpec, now: Instant) {
        let s = &mut self.slots[id.0 as usize];
        s.spec = spec;
        s.codel.fit_rate(spec.rate_bps);
        let Some(&(_, head_len)) = s.queue.front() else {
            return;
        };
        let now = now.as_nanos();
        let by = now.saturating_add(send_time(u64::from(head_len), spec.rate_bps));
        s.next_departure = s.next_departure.min(by);
        s.epoch = s.epoch.wrapping_add(1);
        self.calendar
            .push(Reverse((s.next_departure, id.0, s.epoch)));
    }

    /// Frees a queue, handing its packets to `out` in order.
    pub fn remove(&mut self, id: SlotId, mut out: impl FnMut(T)) {
        let s = &mut self.slots[id.0 as usize];
        for (item, _) in s.queue.drain(..) {
            out(item);
        }
        s.queued_bytes = 0;
        s.in_use = false;
        s.epoch = s.epoch.wrapping_add(1);
        self.free.push(id.0);
    }

    /// Offers a packet of `len` bytes to a queue at `now`.
    pub fn enqueue(&mut self, id: SlotId, item: T, len: usize, now: Instant) -> Enqueued<T> {
        let s = &mut self.slots[id.0 as usize];
        let now = now.as_nanos();
        let len32 = u32::try_from(len).unwrap_or(u32::MAX);
        if s.queue.is_empty() {
            s.next_departure = s.next_departure.max(s.credit_floor(now));
            if s.next_departure <= now {
                s.next_departure += send_time(u64::from(len32), s.spec.rate_bps);
                s.codel.drained();
                return Enqueued::Now(item);
            }
        }
        if s.queued_bytes + u64::from(len32) > s.spec.queue_limit_bytes {
            return Enqueued::Dropped(item);
        }
        if s.spec.codel {
            // The packet leaves once the head has and everything queued behind it.
            let wait =
                s.next_departure.saturating_sub(now) + send_time(s.queued_bytes, s.spec.rate_bps);
            let verdict = s.codel.verdict(
                Duration::from_nanos(wait),
                s.queued_bytes,
                PACED_MTU,
                Instant::from_nanos(now),
                || Instant::ZERO,
            );
            if verdict.is_some() {
                return Enqueued::Standing(item);
            }
        }
        s.queue.push_back((item, len32));
        s.queued_bytes += u64::from(len32);
        if s.queue.len() == 1 {
            self.calendar
                .push(Reverse((s.next_departure, id.0, s.epoch)));
        }
        Enqueued::Queued
    }

    /// Hands every packet due at `now` to `out`, in departure order.
    pub fn release(&mut self, now: Instant, mut out: impl FnMut(SlotId, T)) {
        let now = now.as_nanos();
        while let Some(&Reverse((at, slot, epoch))) = self.calendar.peek() {
            if at > now {
                break;
            }
            self.calendar.pop();
            let s = &mut self.slots[slot as usize];
            if s.epoch != epoch || !s.in_use {
                continue;
            }
            let Some((item, len)) = s.queue.pop_front() else {
                continue;
            };
            s.queued_bytes -= u64::from(len);
            let sent = s.next_departure.max(s.credit_floor(now));
            s.next_departure = sent + send_time(u64::from(len), s.spec.rate_bps);
            if !s.queue.is_empty() {
                self.calendar
                    .push(Reverse((s.next_departure, slot, s.epoch)));
            }
            out(SlotId(slot), item);
        }
    }

    /// When [`Pacer::release`] has something to hand out next (possibly a little
    /// early: superseded entries are only skipped when they come up).
    pub fn next_release(&self) -> Option<Instant> {
        self.calendar
            .peek()
            .map(|Reverse((at, _, _))| Instant::from_nanos(*at))
    }

    /// Bytes waiting in a queue.
    pub fn queued_bytes(&self, id: SlotId) -> u64 {
        self.slots[id.0 as usize].queued_bytes
    }

    /// How a queue is paced.
    pub fn spec(&self, id: SlotId) -> PaceSpec {
        self.slots[id.0 as usize].spec
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MS: u64 = 1_000_000;

    fn spec(rate_bps: u64, burst_bytes: u64) -> PaceSpec {
        PaceSpec {
            rate_bps,
            burst_bytes,
            queue_limit_bytes: 1 << 20,
            codel: false,
        }
    }

    /// Feeds `arrivals` (time ns, slot, len) and releases every 0.1 ms until `until`;
    /// returns (time ns, slot, len) of every departure.
    fn simulate(
        pacer: &mut Pacer<(u32, u32)>,
        arrivals: &[(u64, SlotId, u32)],
        until: u64,
    ) -> Vec<(u64, SlotId, u32)> {
        let mut out = Vec::new();
        let mut next = arrivals.iter().peekable();
        let mut now = 0;
        while now <= until {
            while let Some(&&(at, slot, len)) = next.peek() {
                if at > now {
                    break;
                }
                next.next();
                match pacer.enqueue(slot, (slot.0, len), len as usize, Instant::from_nanos(now)) {
                    Enqueued::Now((s, l)) => out.push((now, SlotId(s), l)),
                    Enqueued::Queued => {}
                    Enqueued::Dropped(_) | Enqueued::Standing(_) => {
                        panic!("the queue limit is generous")
                    }
                }
            }
            pacer.release(Instant::from_nanos(now), |slot, (_, l)| {
                out.push((now, slot, l))
            });
            now += MS / 10;
        }
        out
    }

    #[test]
    fn packets_are_spaced_by_their_length_over_the_rate() {
        let mut p = Pacer::default();
        // 8 Mbit/s: a 1000-byte packet takes 1 ms.
        let a = p.add(spec(8_000_000, 0));
        let arrivals: Vec<_> = (0..5).map(|_| (0, a, 1000)).collect();
        let out = simulate(&mut p, &arrivals, 10 * MS);
        let times: Vec<u64> = out.iter().map(|d| d.0).collect();
        assert_eq!(times, [0, MS, 2 * MS, 3 * MS, 4 * MS]);
        assert_eq!(p.next_release(), None, "nothing left in the calendar");
    }

    #[test]
    fn a_burst_leaves_at_once_after_a_pause_then_the_rate_holds() {
        let mut p = Pacer::default();
        let a = p.add(spec(8_000_000, 3000));
        // Idle since 0: at 20 ms the burst (3 packets), the catch-up allowance (5 ms =
        // 5 packets) and the packet due now go at once; then one per ms.
        let arrivals: Vec<_> = (0..12).map(|_| (20 * MS, a, 1000)).collect();
        let out = simulate(&mut p, &arrivals, 30 * MS);
        let times: Vec<u64> = out.iter().map(|d| d.0 / MS).collect();
        assert_eq!(times, [20, 20, 20, 20, 20, 20, 20, 20, 20, 21, 22, 23]);
    }

    #[test]
    fn one_calendar_interleaves_queues_by_departure_time() {
        let mut p = Pacer::default();
        let slow = p.add(spec(4_000_000, 0)); // 2 ms per 1000 bytes
        let fast = p.add(spec(8_000_000, 0)); // 1 ms
        let mut arrivals: Vec<_> = (0..3).map(|_| (0, slow, 1000)).collect();
        arrivals.extend((0..4).map(|_| (0, fast, 1000)));
        let out = simulate(&mut p, &arrivals, 10 * MS);
        let order: Vec<(u64, u32)> = out.iter().map(|d| (d.0 / MS, d.1.0)).collect();
        assert_eq!(
            order,
            [(0, 0), (0, 1), (1, 1), (2, 0), (2, 1), (3, 1), (4, 0)]
        );
    }

    #[test]
    fn unpaced_queues_pass_packets_at_once() {
        let mut p = Pacer::default();
        let a = p.add(spec(0, 0));
        for _ in 0..100 {
            assert_eq!(p.enqueue(a, 1, 1500, Instant::ZERO), Enqueued::Now(1));
        }
    }

    #[test]
    fn a_full_queue_drops_the_arriving_packet() {
        let mut p = Pacer::default();
        let a = p.add(PaceSpec {
            rate_bps: 8_000,
            burst_bytes: 0,
            queue_limit_bytes: 2500,
            codel: false,
        });
        let now = Instant::from_nanos(10_000 * MS);
        assert_eq!(p.enqueue(a, 1, 1000, now), Enqueued::Now(1));
        assert_eq!(p.enqueue(a, 2, 1000, now), Enqueued::Queued);
        assert_eq!(p.enqueue(a, 3, 1000, now), Enqueued::Queued);
        assert_eq!(p.enqueue(a, 4, 1000, now), Enqueued::Dropped(4));
        assert_eq!(p.queued_bytes(a), 2000);
    }

    /// Offers 1000-byte packets to a queue paced at 8 Mbit/s (1 ms each), every
    /// `spacing_us`, for `ms`, releasing every 0.1 ms; returns when each packet CoDel
    /// refused arrived, in ms.
    fn standing_drops(codel: bool, spacing_us: u64, ms: u64) -> Vec<u64> {
        let mut p = Pacer::default();
        let a = p.add(PaceSpec {
            codel,
            ..spec(8_000_000, 0)
        });
        let mut drops = Vec::new();
        let mut next_arrival = 0;
        for tick in 0..ms * 10 {
            let now = tick * MS / 10;
            while next_arrival <= now {
                let at = Instant::from_nanos(next_arrival);
                match p.enqueue(a, 0, 1000, at) {
                    Enqueued::Standing(_) => drops.push(next_arrival / MS),
                    Enqueued::Dropped(_) => panic!("the queue holds 1 MiB"),
                    Enqueued::Now(_) | Enqueued::Queued => {}
                }
                next_arrival += spacing_us * 1000;
            }
            p.release(Instant::from_nanos(now), |_, _| {});
        }
        drops
    }

    #[test]
    fn a_queue_judged_by_codel_drops_once_its_packets_waited_too_long_for_an_interval() {
        // Offered a quarter over its rate, the queue's wait grows a millisecond every
        // four: past CoDel's 5 ms target after 20 ms, so the first drop comes an
        // interval later.
        let drops = standing_drops(true, 800, 1_500);
        let first = *drops.first().expect("a standing queue is dropped from");
        assert!((515..=525).contains(&first), "first drop at {first} ms");
        // Then ever more often, as CoDel's control law has it.
        assert!(
            drops.len() >= 3 && drops[2] - drops[1] < drops[1] - drops[0],
            "{drops:?}"
        );
        // The same queue without CoDel only grows.
        assert!(standing_drops(false, 800, 1_500).is_empty());
        // Offered 90 % of its rate, the queue never stands.
        assert!(standing_drops(true, 1_111, 2_000).is_empty());
    }

    #[test]
    fn re_rating_keeps_the_queue_and_applies_the_new_rate() {
        let mut p = Pacer::default();
        // 8 kbit/s: 1 s per 1000 bytes.
        let a = p.add(spec(8_000, 0));
        for i in 0..4 {
            p.enqueue(a, i, 1000, Instant::ZERO);
        }
        assert_eq!(p.queued_bytes(a), 3000);
        // Now 8 Mbit/s: the head leaves within 1 ms, the rest 1 ms apart.
        p.set(a, spec(8_000_000, 0), Instant::from_nanos(MS));
        let mut out = Vec::new();
        for t in 0..10 {
            p.release(Instant::from_nanos(MS + t * MS), |_, i| out.push((t, i)));
        }
        assert_eq!(out, [(1, 1), (2, 2), (3, 3)]);
        assert_eq!(p.queued_bytes(a), 0);
    }

    #[test]
    fn a_removed_queue_hands_back_its_packets_and_its_slot_is_reused() {
        let mut p = Pacer::default();
        let a = p.add(spec(8_000, 0));
        for i in 0..3 {
            p.enqueue(a, i, 1000, Instant::ZERO);
        }
        let mut flushed = Vec::new();
        p.remove(a, |i| flushed.push(i));
        assert_eq!(flushed, [1, 2]);
        let b = p.add(spec(0, 0));
        assert_eq!(b, a);
        // The old calendar entry is stale and releases nothing.
        let mut out = Vec::new();
        p.release(Instant::from_nanos(u64::MAX), |_, i| out.push(i));
        assert!(out.is_empty());
    }

    #[test]
    fn ten_thousand_queues_share_the_calendar() {
        let mut p = Pacer::default();
        let slots: Vec<SlotId> = (0..10_000).map(|_| p.add(spec(1_000_000, 0))).collect();
        for (i, &s) in slots.iter().enumerate() {
            for _ in 0..3 {
                p.enqueue(s, i, 125, Instant::ZERO);
            }
        }
        // 125 bytes at 1 Mbit/s = 1 ms: each queue sends its first packet at 0, its
        // second at 1 ms and its third at 2 ms.
        let mut count = 0;
        p.release(Instant::from_nanos(MS), |_, _| count += 1);
        assert_eq!(count, 10_000);
        p.release(Instant::from_nanos(2 * MS), |_, _| count += 1);
        assert_eq!(count, 20_000);
        assert_eq!(p.next_release(), None);
    }

    proptest! {
        /// Over any window, a queue sends at most rate × window + burst + the
        /// catch-up allowance + one packet, whatever the arrivals.
        #[test]
        fn output_never_exceeds_the_rate_plus_the_burst(
            rate_kbps in 100u64..100_000,
            burst in 0u64..20_000,
            arrivals in proptest::collection::vec((0u64..200, 64u32..1500), 1..300),
        ) {
            let mut p = Pacer::default();
            let a = p.add(PaceSpec { rate_bps: rate_kbps * 1000, burst_bytes: burst, queue_limit_bytes: u64::MAX, codel: false });
            let mut arrivals: Vec<(u64, SlotId, u32)> =
                arrivals.into_iter().map(|(ms, len)| (ms * MS, a, len)).collect();
            arrivals.sort_by_key(|x| x.0);
            let out = simulate(&mut p, &arrivals, 200 * MS);
            let allowance = burst as f64 + (rate_kbps * 1000) as f64 / 8.0 * CATCH_UP.as_secs_f64() + 1500.0;
            for (i, start) in out.iter().enumerate() {
                let mut sent = 0.0;
                for d in &out[i..] {
                    sent += f64::from(d.2);
                    let window = (d.0 - start.0) as f64 / 1e9;
                    let bound = (rate_kbps * 1000) as f64 / 8.0 * window + allowance;
                    prop_assert!(sent <= bound + 1.0, "{sent} bytes in {window} s > {bound}");
                }
            }
        }
    }
}
