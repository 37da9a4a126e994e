//! The whole path, entry and exit engines over simulated uplinks.

use std::time::Duration;

use crate::core::engine::{LANE_STALL, SAMPLE_INTERVAL};
use crate::core::sched::Algorithm;
use crate::core::stats::DELAY_BUCKETS;

use super::harness::*;

/// Three uplinks like the demo's (16, 32, 50 Mbit/s; 10, 20, 30 ms; 0.5 % loss
/// on the fastest), the slowest falling silent at 6 s.
fn lanes() -> Vec<LaneSpec> {
    vec![
        LaneSpec {
            rate_bps: 16_000_000,
            one_way_ms: 10,
            jitter_ms: 0,
            loss_per_mille: 0,
            silent_from: Some(at(6_000)),
        },
        LaneSpec {
            rate_bps: 32_000_000,
            one_way_ms: 20,
            jitter_ms: 0,
            loss_per_mille: 0,
            silent_from: None,
        },
        LaneSpec {
            rate_bps: 50_000_000,
            one_way_ms: 30,
            jitter_ms: 0,
            loss_per_mille: 5,
            silent_from: None,
        },
    ]
}

/// A lane that never falls silent: Mbit/s, one-way delay and its variation (ms),
/// loss (per mille).
fn lane(mbit: u64, one_way_ms: u64, jitter_ms: u64, loss_per_mille: u64) -> LaneSpec {
    LaneSpec {
        rate_bps: mbit * 1_000_000,
        one_way_ms,
        jitter_ms,
        loss_per_mille,
        silent_from: None,
    }
}

/// One flow sending evenly at `bps`.
fn one_even_flow(bps: u64) -> Bulk {
    Bulk {
        flows: 1,
        flow_bps: bps,
        bursty: false,
    }
}

/// Packets the exit's resequencer held longer than `bound` seconds, one of
/// [`DELAY_BUCKETS`]' bounds.
fn holds_beyond(out: &Outcome, bound: f64) -> u64 {
    let first = DELAY_BUCKETS
        .iter()
        .position(|&b| b > bound)
        .expect("a bucket beyond the bound");
    out.reseq.hold.buckets[first..].iter().sum()
}

#[test]
fn the_whole_path_keeps_flows_in_order_paces_applications_and_drops_silent_lanes() {
    let seconds = 10;
    // 24 bulk flows of 2 Mbit/s (bursty, so their average is lower) and two paced
    // applications offered 125 % of their rates: about half of the 98 Mbit/s.
    let bulk = Bulk {
        flows: 24,
        flow_bps: 2_000_000,
        bursty: true,
    };
    let out = run(&lanes(), bulk, seconds, 7);
    // AFMT reordered no flow; only the packets the silent lane's dead path lost,
    // sent again when it was given up, came after packets sent later.
    assert!(out.resent > 0, "{out:?}");
    assert!(out.reordered <= out.resent, "{out:?}");
    for (sent, rate) in out.paced_bytes.iter().zip(PACED_BPS) {
        let measured = *sent as f64 * 8.0 / seconds as f64;
        let error = (measured - rate as f64).abs() / rate as f64;
        assert!(
            error < 0.01,
            "paced at {measured} bit/s for {rate}: {out:?}"
        );
    }
    // Every lane carried traffic; the silent one none from its stall time on.
    assert!(out.lanes.iter().all(|l| l.0 > 1000), "{out:?}");
    let silent_from = at(6_000);
    assert!(
        out.last_sent[0] >= silent_from - Duration::from_millis(100),
        "{out:?}"
    );
    // Silence is noticed at the first sample after the last keep-alive (samples
    // come at most every millisecond while packets flow).
    let stalled_by = silent_from + LANE_STALL + SAMPLE_INTERVAL * 2;
    assert!(out.last_sent[0] < stalled_by, "{out:?}");
    assert!(out.last_sent[1] > at(9_900) && out.last_sent[2] > at(9_900));
    assert!(out.delivered > 50_000, "{out:?}");
    // What was dropped is what the paced applications offered above their rates,
    // less what their queues (100 ms at the rate, at least 16 KiB: 55 packets)
    // still hold at the end.
    let offered_above: u64 = PACED_BPS
        .iter()
        .map(|bps| bps / 4 * seconds / 8 / (PAYLOAD as u64 + 28))
        .sum();
    assert!(out.dropped.abs_diff(offered_above - 55) < 10, "{out:?}");
}

#[test]
fn one_flow_larger_than_any_lane_is_striped_over_all_and_arrives_in_order() {
    // 16, 32 and 50 Mbit/s with one-way delays of 10, 30 and 60 ms, 0.5 % loss on
    // the fastest; one even 80 Mbit/s flow.
    let lanes = [lane(16, 10, 0, 0), lane(32, 30, 0, 0), lane(50, 60, 0, 5)];
    let seconds = 10;
    let out = run(&lanes, one_even_flow(80_000_000), seconds, 4);
    // Every lane carries its part: the flow is striped, not confined to a lane.
    let bytes: Vec<u64> = out.lanes.iter().map(|l| l.1).collect();
    let total: u64 = bytes.iter().sum();
    for (b, mbit) in bytes.iter().zip([16, 32, 50]) {
        let share = *b as f64 / total as f64;
        assert!(share > mbit as f64 / 98.0 / 2.0, "{bytes:?}: {out:?}");
    }
    let striped: u64 = out.lanes.iter().map(|l| l.2[3]).sum();
    assert!(striped > out.delivered / 2, "{out:?}");
    // In order as the inner flow sees it, whatever the delays.
    assert!(out.reseq.held > 1000, "{out:?}");
    assert!(
        (out.reordered as f64) < out.delivered as f64 * 0.001,
        "{out:?}"
    );
    // braid dropped nothing of the flow: its only drops are what the paced
    // applications offered above their rates (as in the test above).
    let offered_above: u64 = PACED_BPS
        .iter()
        .map(|bps| bps / 4 * seconds / 8 / (PAYLOAD as u64 + 28))
        .sum();
    assert!(out.dropped.abs_diff(offered_above - 55) < 10, "{out:?}");
    // A lost datagram costs one deadline at most, never a stall: no hold comes
    // near a second, and few packets waited for a loss at all.
    assert_eq!(holds_beyond(&out, 0.2), 0, "{out:?}");
    assert!(out.lost > 100, "{out:?}");
    // The exit reports what the lossy lane lost, and the entry sends it again
    // over the lane where it arrives first, mostly before the exit stops waiting
    // for it: without that, each loss gave up about two gaps (420 packets
    // released at the deadline for 214 lost); now under half a gap does (98 for
    // 220).
    assert!(out.repaired > out.lost * 3 / 4, "{out:?}");
    assert!(
        out.reseq.released_at_deadline * 2 < out.lost,
        "lost packets were sent again in time: {out:?}"
    );
}

#[test]
fn a_striped_flow_over_a_lane_whose_delay_varies_arrives_in_order_without_stalls() {
    // The testbed's `vary10` uplinks: 16, 32 and 50 Mbit/s, 10, 20 and 30 ms one
    // way, the fastest one's delay varying by +-10 ms per datagram (order kept);
    // one even 80 Mbit/s flow.
    let lanes = [lane(16, 10, 0, 0), lane(32, 20, 0, 0), lane(50, 20, 20, 0)];
    let out = run(&lanes, one_even_flow(80_000_000), 10, 5);
    // The varying lane carries its part.
    let bytes: Vec<u64> = out.lanes.iter().map(|l| l.1).collect();
    let total: u64 = bytes.iter().sum();
    assert!(bytes[2] * 4 > total, "{bytes:?}: {out:?}");
    // The resequencer waits for the varying lane's late packets rather than
    // giving their gaps up: the flow arrives in order, and nothing being lost,
    // fewer than one packet in 10,000 was released at a deadline.
    assert!(out.reseq.held > 1000, "{out:?}");
    assert!(
        (out.reordered as f64) < out.delivered as f64 * 0.001,
        "{out:?}"
    );
    assert!(
        out.reseq.released_at_deadline * 10_000 < out.delivered,
        "{out:?}"
    );
    // Nor does it hold beyond what the variation needs: no hold is longer than
    // 100 ms (the lanes' one-way delays differ by at most 30 ms).
    assert_eq!(holds_beyond(&out, 0.1), 0, "{out:?}");
}

#[test]
fn a_path_losing_five_percent_each_way_is_never_given_up_and_a_dead_one_soon() {
    // Three uplinks of 20 Mbit/s with one-way delays of 5, 10 and 15 ms, losing 5 %
    // of datagrams and of acknowledgements and keep-alives; a 50 packets/s flow
    // beside the paced applications, so that some lanes carry little: each of
    // their exchanges fails one time in ten.
    let lossy = |ms, silent_from| LaneSpec {
        rate_bps: 20_000_000,
        one_way_ms: ms,
        jitter_ms: 0,
        loss_per_mille: 50,
        silent_from,
    };
    let sparse = || Bulk {
        flows: 1,
        flow_bps: 480_000,
        bursty: false,
    };
    let lanes = [lossy(5, None), lossy(10, None), lossy(15, None)];
    let (mut probes, mut seconds) = (0, 0);
    for seed in (1..12).step_by(2) {
        let out = run_with(Algorithm::RoundRobin, false, &lanes, sparse(), 30, seed);
        assert_eq!(out.stalls, 0, "seed {seed}: {out:?}");
        probes += out.probes;
        seconds += 30;
    }
    // What a lossy path costs: a few probes a second per lane (each 6 bytes and
    // QUIC's overhead), as one exchange in ten needs them.
    assert!(
        probes > 0 && probes < seconds * 30,
        "{probes} in {seconds} s"
    );
    // The same with the 15 ms uplink's path dying at 10 s: its next packet leaves
    // within 60 ms (a packet in three), and six failed exchanges later, probes
    // filling in, it is given up, long before the idle bound.
    let lanes = [lossy(5, None), lossy(10, None), lossy(15, Some(at(10_000)))];
    let out = run_with(Algorithm::RoundRobin, false, &lanes, sparse(), 12, 5);
    assert_eq!(out.stalls, 1, "{out:?}");
    let given_up = out.out_since[2].expect("out of service");
    let after = given_up.saturating_since(at(10_000));
    assert!(
        after < Duration::from_millis(60 + 130),
        "{after:?}: {out:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let bulk = || Bulk {
        flows: 8,
        flow_bps: 2_000_000,
        bursty: true,
    };
    let short = |seed| run(&lanes()[1..], bulk(), 2, seed);
    let first = short(11);
    assert_eq!(first, short(11));
    assert_ne!(first.lanes, short(12).lanes, "the seed matters");
    // The snapshot: per lane (datagrams, bytes, decisions new/same/switch/stripe/stateless).
    assert_eq!(first.lanes, SNAPSHOT, "{first:?}");
}

const SNAPSHOT: [(u64, u64, [u64; 5]); 2] = [
    (1613, 1_948_504, [3, 1611, 0, 0, 0]),
    (2643, 3_191_544, [7, 2638, 0, 0, 0]),
];
