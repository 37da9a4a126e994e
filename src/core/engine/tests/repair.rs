//! Loss repair: loss reports, and what a lane given up or a lossy lane carried sent
//! again over the others.

use bytes::Bytes;

use crate::core::engine::*;
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::wire::{LossReport, PROBE, split_datagram};

use super::harness::*;

#[test]
fn a_lane_given_up_has_what_its_path_may_have_lost_sent_again_over_the_others() {
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Lanes a and (when `with_a`) b, a packet each every 10 ms; b's path dies at
    // 100 ms. Returns what b was handed and what went out at b's stall.
    let run = |with_a: bool| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = with_a.then(|| lane_up(&mut e, "a", "dsl", 1400, at(0)));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let (mut on_b, mut at_stall) = (Vec::new(), None);
        for t in (10..=300).step_by(10) {
            if let Some(a) = a {
                e.handle_lane_sample(a, drained(&e, a, t), at(t));
            }
            e.handle_lane_sample(b, drained(&e, b, t.min(100)), at(t));
            e.handle_timeout(at(t));
            if e.lane(b).is_some_and(|l| l.counters.stalls == 1) && at_stall.is_none() {
                at_stall = Some((t, transmits(&mut e)));
            }
            for _ in 0..2 {
                send(&mut e, &pkt, at(t));
                on_b.extend(
                    transmits(&mut e)
                        .into_iter()
                        .filter(|x| x.lane == b && x.datagram[..] != PROBE)
                        .map(|x| (t, x.datagram)),
                );
            }
        }
        let resent = e.lane(b).map(|l| l.counters.resent);
        (a, on_b, at_stall, resent)
    };
    let (a, on_b, at_stall, resent) = run(true);
    let (t, again) = at_stall.expect("b given up");
    assert_eq!(
        t, 210,
        "45 ms after its sixth unanswered transmission (160 ms), at the next sample"
    );
    // Heard last at 100 ms with a 20 ms SRTT: what b was handed from 80 ms on may
    // be lost; it goes to a, in order, with the same sequence numbers for the
    // site and the next ones of a's own.
    let expected: Vec<_> = on_b
        .iter()
        .filter(|(t, _)| *t >= 80)
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(expected.len(), 13);
    assert!(again.iter().all(|x| Some(x.lane) == a), "{again:?}");
    let a_next = split_datagram(&again[0].datagram)
        .expect("header")
        .0
        .lane_seq;
    for (i, (x, d)) in again.iter().zip(&expected).enumerate() {
        let (header, packet) = split_datagram(&x.datagram).expect("header");
        let (original, original_packet) = split_datagram(d).expect("header");
        assert_eq!((header.seq, header.gap), (original.seq, original.gap));
        assert!(header.copy && !original.copy);
        assert_eq!(header.lane_seq, a_next.wrapping_add(i as u16));
        assert_eq!(packet, original_packet);
    }
    assert_eq!(again.len(), expected.len());
    assert_eq!(resent, Some(13));
    // With no other lane there is nowhere to send them.
    let (_, _, at_stall, resent) = run(false);
    assert!(at_stall.expect("b given up").1.is_empty());
    assert_eq!(resent, Some(0));
}

#[test]
fn a_run_of_packets_missing_on_a_lane_is_reported_back_on_it_once() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    let pkt = tcp_v4("203.0.113.1", 80, "198.18.0.2", 1);
    let mut receive = |lane, seq, lane_seq| {
        e.handle_lane_datagram(lane, laned_datagram(seq, lane_seq, &pkt), at(1));
        transmits(&mut e)
            .into_iter()
            .map(|t| (t.lane, LossReport::decode(&t.datagram)))
            .collect::<Vec<_>>()
    };
    let report = |first, count| Some(LossReport { first, count });
    assert!(
        receive(a, 0, 7).is_empty(),
        "the first sets where the lane is"
    );
    assert!(receive(a, 1, 8).is_empty());
    assert_eq!(receive(a, 2, 11), [(a, report(9, 2))]);
    // What comes late, a copy, or the next in line is no loss.
    assert!(receive(a, 3, 9).is_empty());
    assert!(receive(a, 4, 11).is_empty());
    assert!(receive(a, 5, 12).is_empty());
    // Each lane counts for itself, across the wrap.
    assert!(receive(b, 6, 65_534).is_empty());
    assert_eq!(receive(b, 7, 1), [(b, report(65_535, 2))]);
    // The longest run reported; a longer one is an outage, not reported.
    assert_eq!(receive(a, 8, 13 + 64), [(a, report(13, 64))]);
    assert!(receive(a, 9, 78 + 65).is_empty());
    assert!(receive(a, 10, 144).is_empty());
    let reported = |l| e.lane(l).map(|l| l.counters.loss_reported);
    assert_eq!((reported(a), reported(b)), (Some(66), Some(2)));
    // Every packet was passed on, reported or not.
    assert_eq!(std::iter::from_fn(|| e.poll_tun_write()).count(), 11);
}

#[test]
fn packets_a_lane_lost_are_sent_again_over_the_lane_where_they_arrive_first() {
    let (mut e, a, b) = two_lanes(Algorithm::Afmt);
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Far more than a lane's window at once: the flow is striped.
    let (mut on_a, mut on_b) = (Vec::new(), 0u16);
    for _ in 0..1000 {
        send(&mut e, &pkt, at(1));
        for t in transmits(&mut e) {
            if t.lane == a {
                on_a.push(t.datagram);
            } else {
                on_b += 1;
            }
        }
    }
    let header = |d: &Bytes| split_datagram(d).expect("header").0;
    assert!(
        on_a.iter()
            .enumerate()
            .all(|(i, d)| usize::from(header(d).lane_seq) == i),
        "a numbers what it carries"
    );
    // The flow's first packets went before it was striped, without a gap.
    let striped = on_a
        .iter()
        .position(|d| header(d).gap != 0)
        .expect("striped");
    assert!(striped > 0 && header(&on_a[striped + 1]).gap != 0);
    let mut report = |first: usize, count| {
        let first = u16::try_from(first).expect("few");
        let datagram = Bytes::copy_from_slice(&LossReport { first, count }.encode());
        e.handle_lane_datagram(a, datagram, at(15));
        transmits(&mut e)
    };
    // Of a run from the last packet without a gap, the two the receiver holds
    // the flow for go again: oldest first, over b, in b's numbering.
    let again = report(striped - 1, 3);
    assert_eq!(again.len(), 2, "{again:?}");
    for (i, t) in again.iter().enumerate() {
        assert_eq!(t.lane, b);
        let (resent, packet) = split_datagram(&t.datagram).expect("header");
        let (original, original_packet) = split_datagram(&on_a[striped + i]).expect("header");
        assert_eq!((resent.seq, resent.gap), (original.seq, original.gap));
        assert!(resent.copy && !original.copy);
        assert_eq!(resent.lane_seq, on_b + i as u16, "b's next");
        assert_eq!(packet, original_packet);
    }
    // Packets a did not carry are not sent.
    assert!(report(on_a.len(), 5).is_empty());
    let repaired = |l| e.lane(l).map(|l| l.counters.loss_repaired);
    assert_eq!((repaired(a), repaired(b)), (Some(2), Some(0)));
}

#[test]
fn a_lane_whose_traffic_stops_lets_go_of_the_datagrams_it_kept() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for _ in 0..5 {
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
    }
    let kept = |e: &DataPath, t: u64| {
        let l = e.lanes[b.0 as usize].as_ref().expect("lane");
        (t, l.recent.len(), l.recent_bytes)
    };
    // Heard all along; samples only, every 100 ms, no more traffic.
    let mut seen = Vec::new();
    for t in (200..=700).step_by(100) {
        e.handle_lane_sample(b, drained(&e, b, t), at(t));
        seen.push(kept(&e, t));
    }
    let window = 100 + RESEND_WINDOW.as_millis() as u64;
    for (t, n, bytes) in seen {
        let expected = if t <= window { 5 } else { 0 };
        assert_eq!(n, expected, "at {t} ms");
        assert_eq!(bytes == 0, expected == 0, "at {t} ms");
    }
}
