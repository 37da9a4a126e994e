//! Uplinks of known rate: their shapers and DSD.

use std::time::Duration;

use etherparse::PacketBuilder;

use crate::core::engine::*;
use crate::core::lane::{Colour, LaneSample};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::shaper::{AbeScheduler, AbeSettings};
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::DATAGRAM_HEADER_LEN;

use super::harness::*;

/// One second over one uplink of known rate (10 Mbit/s): four blue flows offering
/// 11 Mbit/s as the uplink counts it, one packet a millisecond, and an EF packet
/// every 20 ms. Returns the green packets' waits and the blue bytes sent in the
/// last half second. The AQM of flat best effort's FIFO drops green as well as
/// blue (blue does not slow down), and DSD green that cannot leave in time.
fn shaped_uplink(scheduler: AbeScheduler) -> (Vec<Duration>, u64) {
    let abe = AbeSettings {
        scheduler,
        ..AbeSettings::default()
    };
    let mut e = DataPath::new(builder(Role::Entry, Algorithm::Afmt).abe(abe).build());
    let lanes = Colour::ALL.map(|colour| {
        let up = LaneUp {
            site: "a",
            uplink: "dsl",
            colour,
            rank: 0,
            policy: UplinkPolicy::default(),
            rate_kbps: Some(10_000),
        };
        e.handle_lane_up(up, at(0)).expect("site a")
    });
    let [green, blue] = lanes;
    let bulk = |flow: u16| {
        let builder =
            PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64).udp(5000 + flow, 9);
        let mut out = Vec::new();
        builder.write(&mut out, &[0; 1300]).expect("write to vec");
        out
    };
    // The n-th EF packet comes from port n.
    let ef = |n: u64| with_dscp(tcp_v4("198.18.0.2", n as u16, "203.0.113.1", 80), 46);
    let (mut green_waits, mut blue_bytes) = (Vec::new(), 0);
    let mut rx = 1;
    for step in 0..10_000u64 {
        let now = Instant::from_nanos(step * 100_000);
        if wants_samples(&mut e, now) {
            rx += 1;
            for lane in lanes {
                let sample = drained(&e, lane, rx);
                e.handle_lane_sample(lane, sample, now);
            }
        }
        if step % 10 == 0 {
            send(&mut e, &bulk((step / 10 % 4) as u16), now);
        }
        if step % 200 == 5 {
            send(&mut e, &ef(step / 200), now);
        }
        if e.poll_timeout().is_some_and(|at| at <= now) {
            e.handle_timeout(now);
        }
        for t in transmits(&mut e) {
            if t.lane == green {
                let port = &t.datagram[DATAGRAM_HEADER_LEN + 20..][..2];
                let sent = Instant::from_nanos(
                    (u64::from(u16::from_be_bytes([port[0], port[1]])) * 200 + 5) * 100_000,
                );
                green_waits.push(now.saturating_since(sent));
            } else if t.lane == blue && step >= 5_000 {
                blue_bytes += t.datagram.len() as u64;
            }
        }
    }
    (green_waits, blue_bytes)
}

#[test]
fn an_uplink_of_known_rate_is_shaped_and_dsd_sends_green_within_its_delay() {
    let (dsd_waits, dsd_blue) = shaped_uplink(AbeScheduler::Dsd);
    let (fifo_waits, fifo_blue) = shaped_uplink(AbeScheduler::Fifo);
    // Shaped to 95 % of 10 Mbit/s, counting 74 bytes of outer headers a datagram:
    // 1334-byte datagrams go at 843 a second, 562 kB in half a second.
    for blue in [dsd_blue, fifo_blue] {
        assert!(blue.abs_diff(562_000) < 8_000, "{blue}");
    }
    let max = |w: &[Duration]| w.iter().max().copied().unwrap_or_default();
    assert!(dsd_waits.len() >= 25, "{dsd_waits:?}");
    assert!(
        max(&dsd_waits) <= Duration::from_millis(11),
        "{dsd_waits:?}"
    );
    // FIFO: green waits behind the blue queue CoDel keeps standing near its bound
    // against blue that does not slow down.
    let late = fifo_waits
        .iter()
        .filter(|w| **w > Duration::from_millis(20))
        .count();
    assert!(late > fifo_waits.len() / 2, "{fifo_waits:?}");
}

/// Offers one blue lane of known rate (10 Mbit/s) over a path of round trip `srtt`
/// 11 Mbit/s as the uplink counts it, one packet a millisecond, for a second.
/// Answers the millisecond of the first packet the shaper's CoDel dropped.
fn first_standing_queue_drop(srtt: Duration) -> u64 {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let up = LaneUp {
        site: "a",
        uplink: "dsl",
        colour: Colour::Blue,
        rank: 0,
        policy: UplinkPolicy::default(),
        rate_kbps: Some(10_000),
    };
    let lane = e.handle_lane_up(up, at(0)).expect("site a");
    let mut packet = Vec::new();
    PacketBuilder::ipv4([198, 18, 0, 2], [203, 0, 113, 1], 64)
        .udp(5000, 9)
        .write(&mut packet, &[0; 1300])
        .expect("write to vec");
    let mut rx = 1;
    for t in 0..1000 {
        if wants_samples(&mut e, at(t)) {
            rx += 1;
            let sample = LaneSample {
                srtt,
                ..drained(&e, lane, rx)
            };
            e.handle_lane_sample(lane, sample, at(t));
        }
        send(&mut e, &packet, at(t));
        if e.dropped(DropReason::QueueDelay) > 0 {
            return t;
        }
        if e.poll_timeout().is_some_and(|due| due <= at(t)) {
            e.handle_timeout(at(t));
        }
        transmits(&mut e);
    }
    panic!("no packet dropped from the standing queue");
}

#[test]
fn a_shapers_queue_stands_longer_before_drops_when_the_sites_lane_is_far() {
    let near = first_standing_queue_drop(Duration::from_millis(20));
    let far = first_standing_queue_drop(Duration::from_millis(120));
    // CoDel's 100 ms interval for the near lane; 170 ms, and a target of 8.5 ms
    // instead of 5, for the lane 60 ms away.
    assert!(near >= 100, "{near}");
    assert!(far >= near + 70, "near {near}, far {far}");
}

#[test]
fn a_shaped_lane_returns_while_the_other_colour_keeps_its_uplink_shaper_busy() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let [green, blue] = Colour::ALL.map(|colour| {
        let up = LaneUp {
            site: "a",
            uplink: "dsl",
            colour,
            rank: 0,
            policy: UplinkPolicy::default(),
            rate_kbps: Some(1_000),
        };
        let id = e.handle_lane_up(up, at(0)).expect("site a");
        e.handle_lane_sample(id, sample(1400, 1), at(0));
        id
    });
    // The blue lane's peer falls silent for longer than an idle lane may: given up.
    e.handle_lane_sample(green, sample(1400, 2), at(500));
    e.handle_lane_sample(blue, sample(1400, 1), at(500));
    assert!(!e.lane(blue).expect("blue").view.up);
    // Green packets wait in the uplink's shaper...
    let ef = with_dscp(tcp_v4("198.18.0.2", 7, "203.0.113.1", 80), 46);
    for _ in 0..5 {
        send(&mut e, &ef, at(500));
    }
    assert!(e.shapers[0].shaper.queued_bytes() > 0);
    // ...when blue is heard again with nothing of its own left: it is back.
    let heard = drained(&e, blue, 2);
    e.handle_lane_sample(blue, heard, at(510));
    assert!(e.lane(blue).expect("blue").view.up);
}
