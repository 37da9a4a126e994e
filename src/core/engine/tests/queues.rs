//! A lane's queue inside braid: its limit and CoDel.

use std::time::Duration;

use crate::core::engine::*;
use crate::core::lane::{Colour, LaneId, LaneSample};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::{Algorithm, DecisionKind};
use crate::core::stats::DropReason;
use crate::core::wire::DATAGRAM_HEADER_LEN;

use super::harness::*;

#[test]
fn a_lane_queue_holds_at_most_its_limit_until_the_lane_sends() {
    let cfg = builder(Role::Entry, Algorithm::RoundRobin)
        .lane_queue_limit(3 * (DATAGRAM_HEADER_LEN as u64 + 140))
        .build();
    let mut e = DataPath::new(cfg);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80); // 140 bytes
    for _ in 0..4 {
        send(&mut e, &pkt, at(1));
    }
    assert_eq!(transmits(&mut e).len(), 3);
    assert_eq!(e.dropped(DropReason::QueueFull), 1);
    // The send task took two datagrams off the queue: room for two more.
    let taken = 2 * (DATAGRAM_HEADER_LEN as u64 + 140);
    e.handle_lane_sample(
        lane,
        LaneSample {
            dequeued_bytes: taken,
            ..sample(1400, 2)
        },
        at(2),
    );
    for _ in 0..3 {
        send(&mut e, &pkt, at(2));
    }
    assert_eq!(transmits(&mut e).len(), 2);
    assert_eq!(e.dropped(DropReason::QueueFull), 2);
    // Between samples the shell passes the dequeued count alone: room for one
    // more at once, and a stale count never shrinks the room again.
    e.handle_lane_dequeued(lane, taken + (DATAGRAM_HEADER_LEN as u64 + 140));
    e.handle_lane_dequeued(lane, taken);
    for _ in 0..2 {
        send(&mut e, &pkt, at(2));
    }
    assert_eq!(transmits(&mut e).len(), 1);
    assert_eq!(e.dropped(DropReason::QueueFull), 3);
}

/// Runs a lane of 5 MB/s (a window of 100 000 bytes per 20 ms) for `ms`
/// milliseconds: `arriving(t)` packets of 146 bytes arrive at millisecond `t`,
/// and the shell sends up to 5 000 bytes a millisecond of what the engine handed
/// it. Answers the milliseconds in which CoDel dropped, and the bytes sent.
fn run_lane(ms: u64, arriving: impl Fn(u64) -> u64) -> (DataPath, Vec<u64>, u64) {
    let (e, drops, sent) = run_lanes(Algorithm::RoundRobin, 1, 1, None, ms, arriving);
    (e, drops.into_iter().map(|(t, _)| t).collect(), sent)
}

/// [`run_lane`] over `count` such lanes of one site, scheduled by `algorithm`,
/// with the packets of `flows` flows in turn, and with `sparse_every` Some(n) a
/// packet of one more flow (index `flows`) every n milliseconds. Answers each of
/// CoDel's drops as the millisecond and the flow's index.
fn run_lanes(
    algorithm: Algorithm,
    count: usize,
    flows: u16,
    sparse_every: Option<u64>,
    ms: u64,
    arriving: impl Fn(u64) -> u64,
) -> (DataPath, Vec<(u64, u16)>, u64) {
    let mut e = engine(Role::Entry, algorithm);
    let lanes: Vec<LaneId> = (0..count)
        .map(|i| lane_up(&mut e, "a", &format!("up{i}"), 1400, at(0)))
        .collect();
    let (drops, sent) = drive_lanes(&mut e, &lanes, flows, sparse_every, ms, arriving);
    (e, drops, sent)
}

/// The traffic of [`run_lanes`] through `lanes`, already up.
fn drive_lanes(
    e: &mut DataPath,
    lanes: &[LaneId],
    flows: u16,
    sparse_every: Option<u64>,
    ms: u64,
    arriving: impl Fn(u64) -> u64,
) -> (Vec<(u64, u16)>, u64) {
    let count = lanes.len();
    let packets: Vec<Vec<u8>> = (1..=flows + 1)
        .map(|port| tcp_v4("198.18.0.2", port, "203.0.113.1", 80))
        .collect();
    let datagram = DATAGRAM_HEADER_LEN as u64 + packets[0].len() as u64;
    let (mut handed, mut dequeued) = (vec![0; count], vec![0; count]);
    let mut drops = Vec::new();
    let mut next_flow = 0;
    for t in 1..ms {
        if sparse_every.is_some_and(|n| t % n == 0) {
            let before = e.dropped(DropReason::QueueDelay);
            send(e, &packets[usize::from(flows)], at(t));
            if e.dropped(DropReason::QueueDelay) > before {
                drops.push((t, flows));
            }
        }
        for _ in 0..arriving(t) {
            let before = e.dropped(DropReason::QueueDelay);
            send(e, &packets[usize::from(next_flow)], at(t));
            if e.dropped(DropReason::QueueDelay) > before {
                drops.push((t, next_flow));
            }
            next_flow = (next_flow + 1) % flows;
        }
        for sent in transmits(e) {
            let i = lanes.iter().position(|&l| l == sent.lane).expect("a lane");
            handed[i] += datagram;
        }
        for (i, &lane) in lanes.iter().enumerate() {
            dequeued[i] = handed[i].min(dequeued[i] + 5_000);
            e.handle_lane_dequeued(lane, dequeued[i]);
        }
    }
    (drops, dequeued.iter().sum())
}

/// The datagram of [`run_lane`]'s packets.
const RUN_LANE_DATAGRAM: u64 = DATAGRAM_HEADER_LEN as u64 + 140;

#[test]
fn a_lane_queue_that_stands_above_codels_target_is_dropped_from_after_an_interval() {
    // 50 000 bytes at once, then as much as the lane sends: a standing queue of
    // 10 ms.
    let d = RUN_LANE_DATAGRAM;
    let (e, drops_at, _) = run_lane(400, |t| {
        if t == 1 {
            50_000 / d
        } else {
            t * 5_000 / d - (t - 1) * 5_000 / d
        }
    });
    // Nothing before the queue stood for the lane's CoDel interval, then drops
    // ever closer.
    assert!(drops_at.len() >= 4, "{drops_at:?}");
    assert!(
        (50..=53).contains(&drops_at[0]),
        "first drop at {drops_at:?}"
    );
    assert_eq!(e.dropped(DropReason::QueueFull), 0);
    // Each packet's expected wait is counted for its colour: about 10 ms.
    let delays = e.queue_delay(Colour::Blue);
    assert!(delays.count() > 10_000, "{delays:?}");
    let mean = delays.sum / delays.count() as u32;
    assert!(
        mean > Duration::from_millis(8) && mean < Duration::from_millis(11),
        "{mean:?}"
    );
    assert_eq!(e.queue_delay(Colour::Green).count(), 0);
}

#[test]
fn a_flow_striped_over_lanes_meets_one_drop_per_two_of_its_round_trips() {
    // Flows over lanes of 5 MB/s, one more lane than flows, so that each flow
    // spreads from its own: 50 000 bytes a lane at once, then as much as the
    // lanes send, a standing queue of 10 ms on each. A lane alone drops from it
    // ever faster (the test above); a striped flow, resequenced at the receiver,
    // meets one drop per 200 ms (two round trips of a site whose longest lane is
    // 10 ms away: CoDel's 100 ms), on whichever lane; and once a flow met one,
    // the others are spared for a round trip of theirs (70 ms).
    let d = RUN_LANE_DATAGRAM;
    for flows in [1, 2] {
        let lanes = usize::from(flows) + 1;
        let rate = lanes as u64 * 5_000;
        let standing = |t| {
            if t == 1 {
                10 * rate / d
            } else {
                t * rate / d - (t - 1) * rate / d
            }
        };
        let (e, drops, _) = run_lanes(Algorithm::Afmt, lanes, flows, None, 1_000, standing);
        let striped: u64 = (0..lanes)
            .map(|i| {
                let lane = e.lanes[i].as_ref().expect("lane");
                lane.counters.decisions[DecisionKind::Stripe as usize]
            })
            .sum();
        assert!(striped > 1_000, "{striped} packets striped");
        assert!((50..=60).contains(&drops[0].0), "{drops:?}");
        for flow in 0..flows {
            let at: Vec<u64> = drops.iter().filter(|d| d.1 == flow).map(|d| d.0).collect();
            assert!(at.len() >= 3, "{flows} flows: {drops:?}");
            assert!(at.windows(2).all(|p| p[1] - p[0] >= 200), "{drops:?}");
        }
        if flows > 1 {
            assert!(drops[1].1 != drops[0].1, "{drops:?}");
            assert!(drops[1].0 - drops[0].0 >= 70, "{drops:?}");
        }
        // Yet another flow is not spared for two round trips: drops come closer
        // than 200 ms apart.
        let closer = drops.windows(2).any(|p| p[1].0 - p[0].0 < 200);
        assert_eq!(closer, flows > 1, "{flows} flows: {drops:?}");
        assert_eq!(e.dropped(DropReason::QueueFull), 0);
    }
}

#[test]
fn a_sparse_flow_beside_a_striped_one_is_not_dropped_for_the_queue_it_does_not_keep() {
    // One flow striped over two lanes of 5 MB/s, a queue of 10 ms standing on
    // each, and beside it a packet of another flow every 50 ms (a probe, a VoIP
    // call's control): the striped flow meets its drop per two round trips, and
    // CoDel's drops due in between wait for it rather than fall on the sparse
    // flow, which has nothing queued (its previous packet left long ago).
    let d = RUN_LANE_DATAGRAM;
    let rate = 2 * 5_000;
    let standing = |t| {
        if t == 1 {
            10 * rate / d
        } else {
            t * rate / d - (t - 1) * rate / d
        }
    };
    let (e, drops, _) = run_lanes(Algorithm::Afmt, 2, 1, Some(50), 2_000, standing);
    let striped: Vec<u64> = drops.iter().filter(|d| d.1 == 0).map(|d| d.0).collect();
    assert!(striped.len() >= 6, "{drops:?}");
    assert!(drops.iter().all(|d| d.1 == 0), "{drops:?}");
    assert_eq!(e.dropped(DropReason::QueueFull), 0);
}

/// [`run_lane`]'s traffic over a lane 10 ms away that carries every packet
/// (active/backup), beside an idle lane of round trip `far`, its queue standing
/// `standing` bytes deep for a second. Answers the milliseconds of CoDel's drops.
fn drops_beside_a_far_lane(far: Duration, standing: u64) -> Vec<u64> {
    let mut e = engine(Role::Entry, Algorithm::Single);
    // Ranked, as active/backup takes the lowest rank; the far lane reports its
    // round trip from the start.
    let mut up = |uplink, rank, srtt| {
        let up = LaneUp {
            site: "a",
            uplink,
            colour: Colour::Blue,
            rank,
            policy: UplinkPolicy::default(),
            rate_kbps: None,
        };
        let id = e.handle_lane_up(up, at(0)).expect("site a");
        let live = LaneSample {
            srtt,
            ..sample(1400, 1)
        };
        e.handle_lane_sample(id, live, at(0));
        id
    };
    let lanes = [up("near", 0, Duration::from_millis(20)), up("far", 1, far)];
    let d = RUN_LANE_DATAGRAM;
    let arriving = |t| {
        if t == 1 {
            standing / d
        } else {
            t * 5_000 / d - (t - 1) * 5_000 / d
        }
    };
    let (drops, _) = drive_lanes(&mut e, &lanes, 1, None, 1_000, arriving);
    assert_eq!(e.dropped(DropReason::QueueFull), 0);
    drops.into_iter().map(|(t, _)| t).collect()
}

#[test]
fn a_lane_queue_stands_longer_at_a_site_whose_longest_lane_is_far() {
    // A queue that stands 7 ms beyond the site's longest lane: above CoDel's 5 ms
    // where that lane is 25 ms away (22 ms queued on the lane 10 ms away),
    // within the 8.5 ms of a site whose longest lane is 60 ms away (57 ms queued).
    let ms = Duration::from_millis;
    let dropped = drops_beside_a_far_lane(ms(50), 110_000);
    assert!((50..=53).contains(&dropped[0]), "{dropped:?}");
    assert_eq!(drops_beside_a_far_lane(ms(120), 285_000), Vec::<u64>::new());
}

#[test]
fn a_burst_that_drains_within_codels_interval_loses_nothing() {
    // A packet every millisecond, and every 200 ms a burst of 25 ms of queue
    // (within the 30 ms bound of a lane 10 ms away), which the lane drains at
    // its 5 MB/s: above the target for 20 ms at a time, within the 50 ms interval.
    let d = RUN_LANE_DATAGRAM;
    let (e, drops_at, sent) = run_lane(2_000, |t| if t % 200 == 1 { 125_000 / d } else { 1 });
    assert_eq!(drops_at, Vec::<u64>::new());
    assert_eq!(e.dropped(DropReason::QueueFull), 0);
    assert!(sent > 9 * 125_000, "{sent}");
}
