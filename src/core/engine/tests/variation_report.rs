//! Variation reports: what one end of a lane learned of its uplink's delay variation
//! reaches the other.

use std::time::Duration;

use bytes::Bytes;

use crate::core::engine::*;
use crate::core::sched::Algorithm;
use crate::core::wire::VariationReport;

use super::harness::*;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// The variation reports among what the engine sends, with their lanes.
fn reports(e: &mut DataPath) -> Vec<(LaneId, Duration)> {
    transmits(e)
        .into_iter()
        .filter_map(|t| VariationReport::decode(&t.datagram).map(|r| (t.lane, r.spread)))
        .collect()
}

#[test]
fn what_a_lane_learned_is_reported_when_new_when_it_moves_and_every_second() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let lane = lane_up(&mut e, "a", "lte", 1400, at(0));
    let learned = |e: &DataPath, v: u64, t: u64| LaneSample {
        learned_variation: ms(v),
        ..drained(e, lane, t)
    };
    // Nothing learned: nothing to say.
    e.handle_lane_sample(lane, learned(&e, 0, 1), at(10));
    assert_eq!(reports(&mut e), []);
    e.handle_lane_sample(lane, learned(&e, 24, 2), at(20));
    assert_eq!(reports(&mut e), [(lane, ms(24))]);
    // A millisecond either way changes nothing the peer's cap does.
    e.handle_lane_sample(lane, learned(&e, 25, 3), at(30));
    e.handle_lane_sample(lane, learned(&e, 23, 4), at(40));
    assert_eq!(reports(&mut e), []);
    e.handle_lane_sample(lane, learned(&e, 27, 5), at(50));
    assert_eq!(reports(&mut e), [(lane, ms(27))]);
    // Said again a second later, in case the datagram was lost.
    e.handle_lane_sample(lane, learned(&e, 27, 6), at(1049));
    assert_eq!(reports(&mut e), []);
    e.handle_lane_sample(lane, learned(&e, 27, 7), at(1050));
    assert_eq!(reports(&mut e), [(lane, ms(27))]);
    // Unlearned (the path steadied): said once, then nothing more.
    e.handle_lane_sample(lane, learned(&e, 0, 8), at(1060));
    assert_eq!(reports(&mut e), [(lane, Duration::ZERO)]);
    e.handle_lane_sample(lane, learned(&e, 0, 9), at(3000));
    assert_eq!(reports(&mut e), []);
}

#[test]
fn a_report_received_goes_to_the_lanes_controller_and_is_no_packet() {
    let mut e = exit_engine();
    let lane = lane_up(&mut e, "a", "lte", 1400, at(0));
    let report = VariationReport { spread: ms(31) };
    e.handle_lane_datagram(lane, Bytes::copy_from_slice(&report.encode()), at(5));
    assert_eq!(
        e.poll_lane_service(),
        Some((lane, LaneService::PeerVariation { spread: ms(31) }))
    );
    let l = e.lane(lane).expect("lane");
    assert_eq!(l.counters.rx_packets, 0);
    assert_eq!(e.dropped(DropReason::Malformed), 0);
    assert_eq!(e.poll_tun_write(), None);
    assert!(transmits(&mut e).is_empty(), "nothing for the peer");
}
