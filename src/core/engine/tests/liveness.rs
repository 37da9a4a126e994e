//! Lane liveness: stalls, answers, probes and replaced lanes.

use std::time::Duration;

use bytes::Bytes;

use crate::core::engine::liveness::{EXCHANGES_TO_STALL_WHEN_HELD, exchange_timeout};
use crate::core::engine::timers::Timer;
use crate::core::engine::*;
use crate::core::lane::{LaneId, LaneSample};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::stats::DropReason;
use crate::core::wire::{PROBE, PROBE_PADDING};

use super::harness::*;

#[test]
fn a_lane_that_falls_silent_is_not_scheduled_from_exactly_the_stall_time() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // b hears from its peer until 100 ms, a keeps hearing.
    for t in [50, 100] {
        e.handle_lane_sample(a, sample(1400, t), at(t));
        e.handle_lane_sample(b, sample(1400, t), at(t));
    }
    e.handle_lane_sample(a, sample(1400, 300), at(300));
    e.handle_lane_sample(b, sample(1400, 100), at(300));
    e.handle_timeout(at(450));
    assert_eq!(e.timers.get(Timer::StallCheck), Some(at(100) + LANE_STALL));
    e.handle_timeout(at(499));
    let lanes: Vec<_> = (0..2)
        .filter_map(|_| sent_on(&mut e, &pkt, at(499)))
        .collect();
    assert!(lanes.contains(&b), "one nanosecond early b is still up");
    // The deadline passes with the last sample 200 ms old: the engine asks for a
    // fresh one before it gives b up.
    e.handle_timeout(at(500));
    assert_eq!(e.lanes_up(), 2);
    assert!(wants_samples(&mut e, at(500)));
    assert!(e.poll_timeout().is_some_and(|due| due <= at(500)));
    e.handle_lane_sample(a, sample(1400, 500), at(500));
    e.handle_lane_sample(b, sample(1400, 100), at(500));
    e.handle_timeout(at(500));
    for _ in 0..4 {
        assert_eq!(sent_on(&mut e, &pkt, at(500)), Some(a));
    }
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(
        e.lane(b).map(|l| l.state_since),
        Some(at(500)),
        "down since"
    );
    // Its peer is heard again, and what was handed to b has left: b is back.
    e.handle_lane_sample(b, drained(&e, b, 101), at(520));
    assert_eq!(e.lane(b).map(|l| l.state_since), Some(at(520)), "up since");
    let lanes: Vec<_> = (0..2)
        .filter_map(|_| sent_on(&mut e, &pkt, at(520)))
        .collect();
    assert!(lanes.contains(&b));
}

/// Round-robin over lanes a and b over `span` (ms), a packet every 10 ms each,
/// sampled before every send; b's peer answers at the instants `b_heard` says,
/// quinn transmits b's packets once `b_sends` says so, and takes them out of
/// braid's queue at once if `b_drains`. Returns the last instant b was picked.
fn run_two_lanes(
    e: &mut DataPath,
    (a, b): (LaneId, LaneId),
    span: std::ops::RangeInclusive<u64>,
    b_heard: impl Fn(u64) -> bool,
    b_sends: impl Fn(u64) -> bool,
    b_drains: bool,
) -> Option<u64> {
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let (mut b_rx, mut b_last) = (*span.start(), None);
    let handed = |lane| drained(e, lane, 0).transmitted_datagrams;
    let (mut a_handed, mut b_handed) = (handed(a), handed(b));
    let mut b_transmitted = b_handed;
    for t in span.step_by(10) {
        b_rx += u64::from(b_heard(t));
        if b_sends(t) {
            b_transmitted = b_handed;
        }
        let a_sample = LaneSample {
            transmitted_datagrams: a_handed,
            ..sample(1400, t)
        };
        // What b was handed left braid's queue for quinn's, or stays in braid's.
        let b_dequeued = if b_drains {
            drained(e, b, 0).dequeued_bytes
        } else {
            0
        };
        let b_sample = LaneSample {
            transmitted_datagrams: b_transmitted,
            dequeued_bytes: b_dequeued,
            ..sample(1400, b_rx)
        };
        e.handle_lane_sample(a, a_sample, at(t));
        e.handle_lane_sample(b, b_sample, at(t));
        e.handle_timeout(at(t));
        for _ in 0..2 {
            match sent_on(e, &pkt, at(t)) {
                Some(lane) if lane == b => {
                    b_last = Some(t);
                    b_handed += 1;
                }
                Some(_) => a_handed += 1,
                None => {}
            }
        }
    }
    b_last
}

#[test]
fn a_busy_lane_whose_packets_go_unanswered_is_given_up_within_one_timeout() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    // b's path dies after 100 ms; its packet of 100 ms is the first unanswered,
    // seen on the wire at the sample of 110 ms, its successors every 10 ms. Its
    // samples report its packets still queued (it holds more than it sent): it
    // cannot probe, and one answer timeout of silence suffices, before four
    // failed exchanges would.
    let failed_after = exchange_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(
        failed_after, 45,
        "a 20 ms round trip, the peer's ACK delay, slack"
    );
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let decisive = 100 + 10 * EXCHANGES_TO_STALL_WHEN_HELD + failed_after;
    let b_last = run_two_lanes(&mut e, (a, b), 10..=400, |t| t <= 100, |_| true, false);
    assert_eq!(
        b_last,
        Some((100 + timeout) / 10 * 10),
        "b is given up at the first sample {timeout} ms after its wait began (100 ms), \
         before four failed exchanges ({decisive} ms), long before the idle bound of \
         {LANE_STALL:?}"
    );
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
    let stalled = e.poll_lane_service();
    assert_eq!(
        stalled,
        Some((
            b,
            LaneService::Stalled {
                silent_for: Duration::from_millis(70),
                unanswered: 7,
                pings: 0,
                // None: its queue is never empty, and what leaves it counts.
                probes: 0,
                // Every packet b was handed (its samples report none dequeued).
                queued: 2368,
                resent: 9,
                srtt: Duration::from_millis(20),
            }
        )),
        "why, for the log: heard last at 100 ms, given up at the sample of 170 ms, \
         its packets of 100 to 160 ms unanswered"
    );
    assert_eq!(e.poll_lane_service(), None, "once");
    // Its peer is heard again, but packets handed to b before the outage are still
    // inside quinn: they would arrive late, so b waits until they have left.
    let stuck = LaneSample {
        quinn_queued_bytes: 200,
        ..drained(&e, b, 1000)
    };
    e.handle_lane_sample(b, stuck, at(410));
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(e.poll_lane_service(), None, "not back yet");
    e.handle_lane_sample(b, drained(&e, b, 1001), at(420));
    assert_eq!(e.lanes_up(), 2);
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1), "one stall");
    assert_eq!(
        e.poll_lane_service(),
        Some((
            b,
            LaneService::Back {
                out_for: Duration::from_millis(250)
            }
        ))
    );
}

#[test]
fn a_lane_answered_within_its_timeout_stays_up_however_sparse_the_answers() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    // An answer every 60 ms: a packet waits at most 60 ms for one (timeout: 65).
    // quinn takes what b is handed, so that braid's queue for it stays empty.
    let b_last = run_two_lanes(&mut e, (a, b), 10..=2000, |t| t % 60 == 0, |_| true, true);
    assert_eq!(b_last, Some(2000));
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
}

#[test]
fn one_unanswered_packet_is_a_loss_until_two_timeouts_pass_in_silence() {
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // One packet, sent at 100 ms: it or its acknowledgement is lost. The peer's
    // next keep-alive, at 200 ms, is heard (within two timeouts): a loss.
    // With `probes_leave` false, braid's probes stay in the lane's queue (quinn
    // holds them): a lane holding only probes is not full of the flows' packets,
    // and still gets two timeouts.
    let lone_packet = |heard_again: u64, probes_leave: bool| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        e.handle_lane_sample(b, sample(1400, 100), at(100));
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
        let packet_left = drained(&e, b, 100);
        let mut up = Vec::new();
        for t in (110..=400).step_by(10) {
            let rx = if t >= heard_again { t } else { 100 };
            let sent = if probes_leave {
                drained(&e, b, rx)
            } else {
                LaneSample {
                    rx_datagrams: rx,
                    ..packet_left
                }
            };
            e.handle_lane_sample(b, sent, at(t));
            e.handle_timeout(at(t));
            up.push(e.lanes_up());
        }
        up
    };
    assert!(
        lone_packet(200, true).iter().all(|&n| n == 1),
        "{:?}",
        lone_packet(200, true)
    );
    // Silent past two timeouts: given up at the first sample after 100 + 2 × 65 ms.
    for probes_leave in [true, false] {
        let up = lone_packet(1000, probes_leave);
        let given_up_at = 110 + 10 * up.iter().position(|&n| n == 0).expect("given up") as u64;
        assert_eq!(
            given_up_at,
            (100 + 2 * timeout).div_ceil(10) * 10,
            "probes leave: {probes_leave}, {up:?}"
        );
    }
}

#[test]
fn a_lane_whose_window_is_full_when_its_path_dies_is_given_up_after_one_timeout() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // b's path dies at 100 ms with its congestion window full of packets it lost:
    // quinn sends nothing more but one probe, at 160 ms.
    let (mut b_last, mut b_on_the_wire) = (None, 0);
    for t in (10..=400).step_by(10) {
        let b_handed = drained(&e, b, 0).transmitted_datagrams;
        if t <= 100 {
            b_on_the_wire = b_handed;
        } else if t == 160 {
            b_on_the_wire += 1;
        }
        let b_sample = LaneSample {
            transmitted_datagrams: b_on_the_wire,
            ..sample(1400, t.min(100))
        };
        e.handle_lane_sample(a, drained(&e, a, t), at(t));
        e.handle_lane_sample(b, b_sample, at(t));
        e.handle_timeout(at(t));
        for _ in 0..2 {
            if sent_on(&mut e, &pkt, at(t)) == Some(b) {
                b_last = Some(t);
            }
        }
    }
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(
        b_last,
        Some(160),
        "its first unanswered packet left just after 100 ms (behind the packet queued \
         before it); quinn holds its packets, so at the first timeout ({timeout} ms) one \
         unanswered packet, the probe, is enough: given up at the sample of 170 ms, \
         long before the idle bound"
    );
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
}

#[test]
fn a_lane_whose_queue_is_stuck_when_its_path_dies_waits_for_quinns_probe_not_the_idle_bound() {
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Ten packets handed by 100 ms, five of them on the wire when the peer is last
    // heard; nothing is handed after that (the scheduler avoids the full lane).
    // quinn sends a probe (a PING) at `probe_at`, or none.
    let given_up_at = |probe_at: Option<u64>| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        for _ in 0..10 {
            assert_eq!(sent_on(&mut e, &pkt, at(90)), Some(b));
        }
        for t in (100..=600).step_by(10) {
            let stuck = LaneSample {
                transmitted_datagrams: 5,
                sent_pings: u64::from(probe_at.is_some_and(|p| t >= p)),
                ..sample(1400, t.min(100))
            };
            e.handle_lane_sample(b, stuck, at(t));
            e.handle_timeout(at(t));
            if e.lanes_up() == 0 {
                return Some(t);
            }
        }
        None
    };
    assert_eq!(
        given_up_at(Some(150)),
        Some((100 + timeout).div_ceil(10) * 10),
        "the wait for the stuck packets begins when the peer is last heard, and the \
         probe goes unanswered for a timeout (quinn holds the packets)"
    );
    assert_eq!(given_up_at(None), Some(100 + LANE_STALL.as_millis() as u64));
}

/// Lane b alone, heard until 100 ms, is handed `burst` packets at 100 ms, which
/// leave at once; it is sampled and its timers run every millisecond, its probes
/// leave at once too, and its peer is heard again from `heard_again` (ms) on. Returns
/// when b sent probes, and when it was given up.
fn probed(burst: usize, heard_again: u64) -> (Vec<u64>, Option<u64>) {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    e.handle_lane_sample(b, drained(&e, b, 100), at(100));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for _ in 0..burst {
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
    }
    let mut probes = Vec::new();
    for t in 101..=600 {
        let rx = if t >= heard_again { t } else { 100 };
        e.handle_lane_sample(b, drained(&e, b, rx), at(t));
        e.handle_timeout(at(t));
        if e.lanes_up() == 0 {
            assert_eq!(
                e.lane(b).map(|l| l.counters.probes_sent),
                Some(probes.len() as u64)
            );
            return (probes, Some(t));
        }
        for x in transmits(&mut e) {
            assert_eq!((x.lane, &x.datagram[..]), (b, &PROBE[..]), "only probes");
        }
        // Keep-alives look the same on the wire; the lane counts its probes.
        let sent = e.lane(b).map_or(0, |l| l.counters.probes_sent) as usize;
        probes.resize(sent, t);
    }
    (probes, None)
}

#[test]
fn a_lane_whose_answer_is_overdue_probes_and_is_given_up_after_six_failed_exchanges() {
    let srtt = Duration::from_millis(20);
    let overdue = 100 + (srtt + PEER_ACK_DELAY).as_millis() as u64;
    let failed_after = exchange_timeout(srtt).as_millis() as u64;
    let every = PROBE_INTERVAL.as_millis() as u64;
    // One packet, seen on the wire at 101 ms, then probes from when its answer is
    // overdue: the fifth, seen at the sample after it, is the sixth exchange.
    let (probes, given_up) = probed(1, 1000);
    let decisive = overdue + 4 * every + 1;
    assert_eq!(given_up, Some(decisive + failed_after));
    let expected: Vec<u64> = (overdue..given_up.unwrap_or(0))
        .step_by(every as usize)
        .collect();
    assert_eq!(
        probes, expected,
        "every {every} ms from {overdue} ms until given up"
    );
    assert_eq!(given_up, Some(191), "on a dead path, within 5 round trips");
    // A burst that leaves at once is answered by one acknowledgement: its loss is
    // one failed exchange, not six, and the probes make up the rest.
    assert_eq!(probed(6, 1000), (expected, given_up));
    // Answered before the sixth exchange fails (five of them lost, each packet or
    // its acknowledgement, as on a lossy path): b stays up, and probing stops.
    let (probes, given_up) = probed(1, 190);
    assert_eq!(given_up, None);
    assert_eq!(probes.last(), Some(&185));
    // A lane that is heard sends no probe.
    assert_eq!(probed(1, 110), (vec![], None));
}

#[test]
fn a_probe_is_counted_and_dropped_by_the_receiving_gateway() {
    let mut e = engine(Role::Exit, Algorithm::RoundRobin);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    e.handle_lane_datagram(lane, Bytes::from_static(&PROBE), at(1));
    // Padded, as a lane opening its window sends it.
    e.handle_lane_datagram(lane, Bytes::from_static(&PROBE_PADDING[..1200]), at(1));
    let counters = e.lane(lane).map(|l| *l.counters);
    assert_eq!(
        counters.map(|c| (c.probes_received, c.rx_packets)),
        Some((2, 0))
    );
    assert_eq!(e.poll_tun_write(), None);
    assert!(
        DropReason::ALL.iter().all(|r| e.dropped(*r) == 0),
        "not a drop"
    );
}

#[test]
fn a_packet_quinn_holds_back_is_not_waiting_for_an_answer() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    // b's congestion window holds its packets from 100 ms to 300 ms (quinn waits
    // for a loss to be declared); its peer answers whatever b sends.
    let sends = |t| !(100..300).contains(&t);
    let b_last = run_two_lanes(&mut e, (a, b), 10..=1000, sends, sends, false);
    assert_eq!(b_last, Some(1000));
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
    // Packets that do leave and get no answer still count.
    let b_last = run_two_lanes(&mut e, (a, b), 1010..=1200, |t| t <= 1050, |_| true, false);
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(b_last, Some((1050 + timeout) / 10 * 10), "{b_last:?}");
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
}

#[test]
fn a_reconnected_lane_replaces_the_old_one_which_is_closed_and_never_revived() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let old = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let other = lane_up(&mut e, "a", "lte", 1400, at(0));
    assert_eq!(e.poll_lane_close(), None, "another uplink replaces nothing");
    let new = lane_up(&mut e, "a", "dsl", 1400, at(10));
    assert_eq!(e.poll_lane_close(), Some((old, LaneClose::Replaced)));
    assert_eq!(e.poll_lane_close(), None);
    // The old connection still reports life until it is closed: it stays out.
    e.handle_lane_sample(old, sample(1400, 99), at(20));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let mut used: Vec<_> = (0..4)
        .filter_map(|_| sent_on(&mut e, &pkt, at(20)))
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(used, [other, new]);
    e.handle_lane_closed(old);
    assert!(e.lane(old).is_none());
}

#[test]
fn lanes_silent_as_long_as_one_given_up_are_given_up_with_it() {
    // Round-robin over a, b and c; a and b fall silent at 100 ms (one cause: both
    // cut at once), c is heard throughout. quinn transmits a's packets at once and
    // holds b's (its window is full), so that b's own silence is judged later.
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl1", 1400, at(0));
    let b = lane_up(&mut e, "a", "dsl2", 1400, at(0));
    let c = lane_up(&mut e, "a", "lte", 1400, at(0));
    for t in [50, 100] {
        for lane in [a, b, c] {
            e.handle_lane_sample(lane, drained(&e, lane, t), at(t));
        }
    }
    // Packets from 110 ms: each lane waits for answers; only c gets them.
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let mut t = 110;
    let mut given_up_at = None;
    while t < 1000 {
        sent_on(&mut e, &pkt, at(t));
        let silent = LaneSample {
            rx_datagrams: 100,
            ..drained(&e, a, 100)
        };
        e.handle_lane_sample(a, silent, at(t));
        e.handle_lane_sample(b, sample(1400, 100), at(t));
        e.handle_lane_sample(c, drained(&e, c, t), at(t));
        e.handle_timeout(at(t));
        let down = |e: &DataPath, l| e.lane(l).is_some_and(|r| !r.state.healthy());
        if down(&e, a) || down(&e, b) {
            given_up_at = Some(t);
            assert!(
                down(&e, a) && down(&e, b),
                "at {t} ms one of a and b is still in service"
            );
            assert!(!down(&e, c), "c was heard throughout");
            break;
        }
        t += 5;
    }
    assert!(given_up_at.is_some(), "neither a nor b was given up");
    let services: Vec<_> = std::iter::from_fn(|| e.poll_lane_service()).collect();
    for lane in [a, b] {
        assert!(
            services
                .iter()
                .any(|(l, s)| *l == lane && matches!(s, LaneService::Stalled { .. })),
            "{services:?}"
        );
    }
    // From then on, everything goes over c.
    for _ in 0..6 {
        assert_eq!(sent_on(&mut e, &pkt, at(t)), Some(c));
    }
    // quinn lets b's packets go, and b's own wait is not yet judged: b is still not
    // heard from, so it stays out of service (it came back at once, and took
    // packets onto a dead path for a round of judgement).
    e.handle_lane_sample(b, drained(&e, b, 100), at(t + 1));
    assert!(!e.lane(b).expect("lane").state.healthy(), "b back unheard");
    assert_eq!(sent_on(&mut e, &pkt, at(t + 1)), Some(c));
    // Heard again: back.
    e.handle_lane_sample(b, drained(&e, b, t + 2), at(t + 2));
    assert!(
        e.lane(b).expect("lane").state.healthy(),
        "b heard, still out"
    );
}
