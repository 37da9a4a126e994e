//! Quiet sites: keep-alives, idle bounds and sampling follow whether a site's
//! packets cross (`quiet.rs`).

use crate::core::engine::timers::Timer;
use crate::core::engine::*;
use crate::core::lane::LaneId;
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::wire::PROBE;

use super::harness::*;

/// The keep-alives among the datagrams waiting to go, by lane.
fn keep_alives(e: &mut DataPath) -> Vec<LaneId> {
    transmits(e)
        .into_iter()
        .filter(|t| t.datagram[..] == PROBE[..])
        .map(|t| t.lane)
        .collect()
}

#[test]
fn an_active_sites_idle_lanes_send_keep_alives_and_a_quiet_sites_do_not() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    transmits(&mut e);
    // Every site starts active: both lanes sent nothing for 100 ms.
    e.handle_timeout(at(99));
    assert!(keep_alives(&mut e).is_empty());
    e.handle_timeout(at(100));
    assert_eq!(keep_alives(&mut e), vec![a, b]);
    // Nothing of the site crossed for 10 s: quiet, no more keep-alives.
    let quiet = QUIET_AFTER.as_millis() as u64;
    e.handle_timeout(at(quiet - 1));
    assert_eq!(keep_alives(&mut e).len(), 2);
    e.handle_timeout(at(quiet + 25));
    assert!(keep_alives(&mut e).is_empty());
    assert_eq!(e.timers.get(Timer::KeepAlive), None);
    // A packet makes it active: the lane that carried it sends a keep-alive once
    // it sent nothing for 100 ms, the other one (silent for 10 s) at once.
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let carrier = sent_on(&mut e, &pkt, at(20_000)).expect("a lane");
    for t in (20_025..=20_100).step_by(25) {
        e.handle_timeout(at(t));
    }
    let other = if carrier == a { b } else { a };
    let sent = keep_alives(&mut e);
    assert!(sent.iter().all(|&l| l == other), "{sent:?}");
    assert_eq!(sent.len(), 1);
}

#[test]
fn a_quiet_sites_silent_lane_is_given_up_after_the_quiet_stall() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    // Both heard until 11 s, then only a (b's entry keep-alives stopped).
    for t in (100..=11_000).step_by(100) {
        e.handle_lane_sample(a, sample(1400, t), at(t));
        e.handle_lane_sample(b, sample(1400, t), at(t));
    }
    let stall = QUIET_STALL.as_millis() as u64;
    for t in (11_100..11_000 + stall).step_by(100) {
        e.handle_lane_sample(a, sample(1400, t), at(t));
        e.handle_lane_sample(b, sample(1400, 11_000), at(t));
        e.handle_timeout(at(t));
    }
    assert_eq!(e.lanes_up(), 2, "silent for less than the quiet stall");
    e.handle_lane_sample(b, sample(1400, 11_000), at(11_000 + stall));
    e.handle_timeout(at(11_000 + stall));
    assert_eq!(e.lanes_up(), 1);
}

#[test]
fn a_site_that_becomes_active_gives_its_lanes_the_lane_stall_from_then() {
    let (mut e, a, b) = two_lanes(Algorithm::RoundRobin);
    for t in (100..=15_000).step_by(100) {
        e.handle_lane_sample(a, sample(1400, t), at(t));
        e.handle_lane_sample(b, sample(1400, t), at(t));
    }
    // Quiet: b last heard at 15 s. At 15.9 s a packet crosses; b is not given up
    // for the quiet keep-alive's pace (15.4 s has passed), but 400 ms later.
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    send(&mut e, &pkt, at(15_900));
    transmits(&mut e);
    let stall = LANE_STALL.as_millis() as u64;
    for t in (15_950..15_900 + stall).step_by(50) {
        e.handle_lane_sample(a, drained(&e, a, t), at(t));
        e.handle_lane_sample(b, drained(&e, b, 15_000), at(t));
        e.handle_timeout(at(t));
        transmits(&mut e);
    }
    assert_eq!(e.lanes_up(), 2);
    e.handle_lane_sample(b, drained(&e, b, 15_000), at(15_900 + stall));
    e.handle_timeout(at(15_900 + stall));
    assert_eq!(e.lanes_up(), 1);
}

#[test]
fn a_quiet_sites_idle_lanes_are_sampled_every_second_an_active_ones_every_tenth() {
    let (mut e, _, b) = two_lanes(Algorithm::RoundRobin);
    let mut due = Vec::new();
    let mut count = |e: &mut DataPath, from: u64, to: u64| {
        let mut n = [0u64; 2];
        for t in (from..to).step_by(10) {
            e.lanes_to_sample(at(t), &mut due);
            for &lane in &due {
                n[usize::from(lane == b)] += 1;
                e.handle_lane_sample(lane, drained(e, lane, t), at(t));
            }
            transmits(e);
        }
        n
    };
    count(&mut e, 0, 20_000);
    assert_eq!(count(&mut e, 20_000, 22_000), [2, 2], "quiet: every second");
    // Active again: idle lanes are sampled every 100 ms, and once more after each
    // keep-alive they send (it may wait for an answer).
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    send(&mut e, &pkt, at(22_000));
    let n = count(&mut e, 22_000, 24_000);
    assert!(n.iter().all(|n| (20..=42).contains(n)), "active: {n:?}");
}
