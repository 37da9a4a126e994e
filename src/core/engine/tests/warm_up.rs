//! Warm-up padding of lanes in their first slow start.

use std::time::Duration;

use crate::core::engine::*;
use crate::core::lane::{Colour, LaneSample};
use crate::core::lane_cc::MAX_START_WINDOW;
use crate::core::sched::Algorithm;
use crate::core::wire::{DATAGRAM_HEADER_LEN, is_probe};

use super::harness::*;

#[test]
fn a_lane_in_its_first_slow_start_is_padded_while_a_lane_with_a_larger_window_queues() {
    let mut e = engine(Role::Exit, Algorithm::Single);
    let short = up(&mut e, "a", 1400);
    let up = LaneUp {
        site: "a",
        uplink: "lte",
        colour: Colour::Blue,
        rank: 1,
        policy: UplinkPolicy::default(),
        rate_kbps: None,
    };
    let long = e.handle_lane_up(up, at(0)).expect("known site");
    // The long lane: 14 720 bytes per 120 ms, against the short one's 100 000 per
    // 20 ms.
    let small = |e: &DataPath, cwnd| LaneSample {
        srtt: Duration::from_millis(120),
        cwnd,
        ..drained(e, long, 1)
    };
    e.handle_lane_sample(long, small(&e, 14_720), at(1));
    let packet = to_site_a();
    let len = packet.len() + DATAGRAM_HEADER_LEN;
    let sent = |e: &mut DataPath, now| {
        send(e, &packet, now);
        transmits(e)
            .iter()
            .map(|t| (t.lane, t.datagram.len(), is_probe(&t.datagram)))
            .collect::<Vec<_>>()
    };
    // Nothing queued ahead of the first packet: nothing to open the lane for.
    assert_eq!(sent(&mut e, at(2)), [(short, len, false)]);
    // The second queues behind it: the long lane gets as many bytes of padding.
    assert_eq!(
        sent(&mut e, at(2)),
        [(short, len, false), (long, len, true)]
    );
    let opened = |e: &DataPath| e.lane(long).map(|l| l.counters.opening_bytes);
    assert_eq!(opened(&e), Some(len as u64));
    // Padding counts as queued: none goes on top of it.
    assert_eq!(sent(&mut e, at(2)), [(short, len, false)]);
    // Once the long lane's window carries as much per round trip, none either.
    e.handle_lane_sample(long, small(&e, 600_000), at(3));
    assert_eq!(sent(&mut e, at(3)), [(short, len, false)]);
    // Nor, for good, once its window was cut.
    let in_first_slow_start =
        |e: &mut DataPath| view_mut(&mut e.sites, SiteIdx(0), long).map(|v| v.first_slow_start);
    assert_eq!(in_first_slow_start(&mut e), Some(true));
    e.handle_lane_sample(long, small(&e, 14_720), at(4));
    assert_eq!(in_first_slow_start(&mut e), Some(false));
    e.handle_lane_sample(long, small(&e, 20_000), at(5));
    assert_eq!(sent(&mut e, at(5)), [(short, len, false)]);
    assert_eq!(opened(&e), Some(len as u64));
    assert_eq!(in_first_slow_start(&mut e), Some(false));
}

#[test]
fn a_blue_lane_of_unknown_rate_warms_up_with_padding_until_its_window_is_cut() {
    let mut e = DataPath::new(
        builder(Role::Entry, Algorithm::Afmt)
            .warm_up_lanes(true)
            .build(),
    );
    let mut up = |uplink, colour, rate_kbps| {
        let up = LaneUp {
            site: "a",
            uplink,
            colour,
            rank: 0,
            policy: UplinkPolicy::default(),
            rate_kbps,
        };
        e.handle_lane_up(up, at(0)).expect("known site")
    };
    let blue = up("lte", Colour::Blue, None);
    let green = up("lte", Colour::Green, None);
    let shaped = up("dsl", Colour::Blue, Some(10_000));
    // Over 120 ms, with everything handed so far sent.
    let sample = |e: &DataPath, lane, cwnd| LaneSample {
        srtt: Duration::from_millis(120),
        cwnd,
        ..drained(e, lane, 1)
    };
    let padded = |e: &mut DataPath| {
        let out = transmits(e);
        assert!(out.iter().all(|t| is_probe(&t.datagram)), "{out:?}");
        out.iter()
            .map(|t| (t.lane, t.datagram.len()))
            .collect::<Vec<_>>()
    };
    let len = 1400 + DATAGRAM_HEADER_LEN;
    for lane in [blue, green, shaped] {
        e.handle_lane_sample(lane, sample(&e, lane, 14_720), at(1));
    }
    // At quinn's first window, 2 ms at slow start's pace is less than two
    // datagrams: two go ahead, on the blue lane of unknown rate alone.
    assert_eq!(padded(&mut e), [(blue, len), (blue, len)]);
    // The lane wants its next sample within a millisecond, traffic or not.
    assert_eq!(e.poll_timeout(), Some(at(2)));
    // Not sent yet: nothing more goes on top.
    let unsent = LaneSample {
        dequeued_bytes: 0,
        transmitted_datagrams: 0,
        ..sample(&e, blue, 14_720)
    };
    e.handle_lane_sample(blue, unsent, at(2));
    assert_eq!(padded(&mut e), []);
    // Sent, and the window grew to 100 kB over a path shorter than 2 ms: no more
    // than a window goes ahead.
    let short = |e: &DataPath, cwnd| LaneSample {
        srtt: Duration::from_millis(1),
        ..sample(e, blue, cwnd)
    };
    e.handle_lane_sample(blue, short(&e, 100_000), at(3));
    assert_eq!(padded(&mut e), vec![(blue, len); 72]);
    // Over 120 ms at 600 kB, 2 ms at twice its rate is 20 kB.
    e.handle_lane_sample(blue, sample(&e, blue, 600_000), at(4));
    assert_eq!(padded(&mut e), vec![(blue, len); 15]);
    let opened = |e: &DataPath, lane| e.lane(lane).map(|l| l.counters.opening_bytes);
    assert_eq!(opened(&e, blue), Some((2 + 72 + 15) * len as u64));
    assert_eq!((opened(&e, green), opened(&e, shaped)), (Some(0), Some(0)));
    // Never more than half the lane's queue limit (512 KiB).
    e.handle_lane_sample(blue, short(&e, 1_000_000), at(5));
    assert_eq!(padded(&mut e).len(), 373);
    // At the most a lane starts at, it stops.
    e.handle_lane_sample(blue, sample(&e, blue, MAX_START_WINDOW), at(6));
    assert_eq!(padded(&mut e), []);
    // And for good once its delay cap or a loss cut it.
    e.handle_lane_sample(blue, sample(&e, blue, 500_000), at(7));
    e.handle_lane_sample(blue, sample(&e, blue, 700_000), at(8));
    assert_eq!(padded(&mut e), []);
    assert!(e.poll_timeout().is_some_and(|t| t > at(9)));
}
