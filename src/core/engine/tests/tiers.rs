//! Uplink policy in the data path: standby lanes carry nothing, the next tier takes
//! over when the active one is down and gives back after the hold, cold uplinks are
//! dialled and hung up, an overflow tier joins a full one, and lanes beyond their
//! quality limits are cut off.

use std::time::Duration;

use crate::core::cutoff::{CutOff, QualityLimits};
use crate::core::engine::*;
use crate::core::lane::{Colour, LaneId, LaneSample};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::tiers::TierSettings;
use crate::core::wire::split_datagram;

use super::harness::*;

const SETTINGS: TierSettings = TierSettings {
    hold: Duration::from_secs(5),
    overflow_after: Duration::from_secs(1),
};

fn tier(name: &str, priority: u32, overflow: bool, cold: bool) -> UplinkTier {
    UplinkTier {
        name: name.into(),
        priority,
        overflow,
        cold,
        off: false,
    }
}

/// An entry of site a whose uplinks are `tiers`, configured at time zero.
fn tiered(tiers: &[UplinkTier]) -> DataPath {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    e.handle_uplink_tiers(tiers, SETTINGS, at(0));
    e
}

/// Brings up the blue lane of `uplink` (of the tier `tiers` give it) at `now`.
fn tier_lane_up(e: &mut DataPath, tiers: &[UplinkTier], uplink: &str, now: Instant) -> LaneId {
    let t = tiers.iter().find(|t| t.name == uplink).expect("configured");
    let policy = UplinkPolicy {
        priority: t.priority,
        overflow: t.overflow,
        ..UplinkPolicy::default()
    };
    policy_lane_up(e, uplink, Colour::Blue, policy, now)
}

/// Brings up a lane of site a over `uplink` in `colour` with `policy` at `now`.
fn policy_lane_up(
    e: &mut DataPath,
    uplink: &str,
    colour: Colour,
    policy: UplinkPolicy,
    now: Instant,
) -> LaneId {
    let up = LaneUp {
        site: "a",
        uplink,
        colour,
        rank: 0,
        policy,
        rate_kbps: None,
    };
    let id = e.handle_lane_up(up, now).expect("site a");
    e.handle_lane_sample(id, sample(1400, 1), now);
    id
}

/// The lanes 40 packets of different flows went out on.
fn lanes_used(e: &mut DataPath, now: Instant) -> Vec<LaneId> {
    let mut used: Vec<LaneId> = (0..40u16)
        .filter_map(|port| {
            sent_on(
                e,
                &tcp_v4("198.18.0.2", 1000 + port, "203.0.113.1", 80),
                now,
            )
        })
        .collect();
    used.sort();
    used.dedup();
    used
}

fn state(e: &DataPath, lane: LaneId) -> LaneState {
    e.lane(lane).expect("lane").state
}

#[test]
fn the_backup_carries_nothing_while_a_primary_is_up_takes_over_at_once_and_gives_back_after_the_hold()
 {
    let tiers = [
        tier("dsl", 1, false, false),
        tier("cable", 1, false, false),
        tier("lte", 2, false, false),
    ];
    let mut e = tiered(&tiers);
    let [dsl, cable, lte] = ["dsl", "cable", "lte"].map(|u| tier_lane_up(&mut e, &tiers, u, at(0)));
    assert_eq!(lanes_used(&mut e, at(10)), [dsl, cable]);
    assert_eq!(state(&e, lte), LaneState::Standby);
    assert_eq!(e.lanes_up(), 3, "a standby lane is up, ready");

    // The DSL closes: the cable carries alone, the backup still nothing.
    let closed = LaneSample {
        closed: true,
        ..sample(1400, 1)
    };
    e.handle_lane_sample(dsl, closed, at(100));
    assert_eq!(lanes_used(&mut e, at(100)), [cable]);

    // The cable falls silent too: the backup takes over as the cable is given up.
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for t in [150, 200] {
        e.handle_lane_sample(cable, sample(1400, 1), at(t));
        e.handle_lane_sample(lte, sample(1400, t), at(t));
        sent_on(&mut e, &pkt, at(t));
    }
    e.handle_timeout(at(1000));
    e.handle_lane_sample(cable, sample(1400, 1), at(1000));
    e.handle_lane_sample(lte, sample(1400, 1000), at(1000));
    e.handle_timeout(at(1000));
    assert_eq!(state(&e, cable), LaneState::Down);
    assert_eq!(state(&e, lte), LaneState::Up);
    assert_eq!(lanes_used(&mut e, at(1000)), [lte]);

    // The cable is heard again at 1.1 s: traffic stays on the backup for the hold,
    // and returns at 6.1 s.
    e.handle_lane_sample(cable, drained(&e, cable, 2), at(1100));
    assert_eq!(state(&e, cable), LaneState::Standby);
    for t in (1200..6100).step_by(100) {
        e.handle_lane_sample(cable, drained(&e, cable, t), at(t));
        e.handle_lane_sample(lte, drained(&e, lte, t), at(t));
        assert_eq!(lanes_used(&mut e, at(t)), [lte], "at {t} ms");
    }
    e.handle_lane_sample(cable, drained(&e, cable, 6100), at(6100));
    assert_eq!(lanes_used(&mut e, at(6100)), [cable]);
    assert_eq!(state(&e, lte), LaneState::Standby);
}

#[test]
fn a_cold_uplink_is_dialled_when_the_primary_is_down_and_hung_up_once_it_is_back() {
    let tiers = [tier("dsl", 1, false, false), tier("lte", 2, false, true)];
    let mut e = tiered(&tiers);
    let dsl = tier_lane_up(&mut e, &tiers, "dsl", at(100));
    for t in (200..5000).step_by(100) {
        e.handle_lane_sample(dsl, sample(1400, t), at(t));
    }
    assert_eq!(e.poll_uplink_demand(), None, "the primary is up");
    let closed = LaneSample {
        closed: true,
        ..sample(1400, 5000)
    };
    e.handle_lane_sample(dsl, closed, at(5000));
    assert_eq!(
        e.poll_uplink_demand(),
        Some(UplinkDemand {
            uplink: "lte".into(),
            dial: true
        })
    );
    let lte = tier_lane_up(&mut e, &tiers, "lte", at(5200));
    assert_eq!(lanes_used(&mut e, at(5200)), [lte]);
    // The DSL's new lane: the LTE carries for the hold, stays connected a little
    // longer (what the exit still sends it arrives), then is hung up.
    e.handle_lane_closed(dsl);
    let dsl = tier_lane_up(&mut e, &tiers, "dsl", at(6000));
    for t in (6100..11_000).step_by(100) {
        e.handle_lane_sample(dsl, sample(1400, t), at(t));
        e.handle_lane_sample(lte, drained(&e, lte, t), at(t));
    }
    e.handle_lane_sample(dsl, sample(1400, 11_000), at(11_000));
    assert_eq!(lanes_used(&mut e, at(11_000)), [dsl]);
    for t in (11_100..13_000).step_by(100) {
        e.handle_lane_sample(dsl, sample(1400, t), at(t));
    }
    assert_eq!(e.poll_uplink_demand(), None);
    e.handle_lane_sample(dsl, sample(1400, 13_000), at(13_000));
    assert_eq!(
        e.poll_uplink_demand(),
        Some(UplinkDemand {
            uplink: "lte".into(),
            dial: false
        })
    );
}

#[test]
fn a_cold_uplink_is_not_dialled_while_the_gateway_starts() {
    let tiers = [tier("dsl", 1, false, false), tier("lte", 2, false, true)];
    let mut e = tiered(&tiers);
    // No lane yet: the DSL is still connecting for the first three seconds.
    e.handle_uplink_tiers(&tiers, SETTINGS, at(2900));
    assert_eq!(e.poll_uplink_demand(), None);
    e.handle_uplink_tiers(&tiers, SETTINGS, at(3000));
    assert_eq!(
        e.poll_uplink_demand().map(|d| d.dial),
        Some(true),
        "no better uplink came up"
    );
}

#[test]
fn an_overflow_uplink_joins_while_the_primary_is_full_and_leaves_after_the_hold() {
    let tiers = [
        tier("dsl", 1, false, false),
        tier("lte", 2, true, false),
        tier("sat", 3, false, false),
    ];
    let mut e = tiered(&tiers);
    let [dsl, lte, sat] = ["dsl", "lte", "sat"].map(|u| tier_lane_up(&mut e, &tiers, u, at(0)));
    assert_eq!(lanes_used(&mut e, at(0)), [dsl]);
    let full = |e: &DataPath, lane, t| LaneSample {
        quinn_queued_bytes: 50_000,
        ..drained(e, lane, t)
    };
    let mut joined = None;
    for t in (100..3000).step_by(100) {
        e.handle_lane_sample(dsl, full(&e, dsl, t), at(t));
        e.handle_lane_sample(lte, drained(&e, lte, t), at(t));
        if state(&e, lte) == LaneState::Up {
            joined = Some(t);
            break;
        }
    }
    let joined = joined.expect("the overflow uplink never joined");
    assert!((1000..=2000).contains(&joined), "joined at {joined} ms");
    assert_eq!(state(&e, sat), LaneState::Standby, "not an overflow uplink");
    assert!(lanes_used(&mut e, at(joined)).contains(&lte));
    // The DSL's queue empties: the LTE stays for the hold, then stands by again.
    let mut left = None;
    for t in (joined + 100..joined + 10_000).step_by(100) {
        e.handle_lane_sample(dsl, drained(&e, dsl, t), at(t));
        e.handle_lane_sample(lte, drained(&e, lte, t), at(t));
        if state(&e, lte) == LaneState::Standby {
            left = Some(t - joined);
            break;
        }
    }
    let left = left.expect("the overflow never stopped");
    assert!(
        (5000..=7000).contains(&left),
        "left {left} ms after joining"
    );
    assert_eq!(lanes_used(&mut e, at(joined + 10_000)), [dsl]);
}

#[test]
fn the_exit_follows_the_tiers_its_lanes_hello_gave() {
    let mut e = exit_engine();
    let lane = |e: &mut DataPath, uplink, priority| {
        let up = LaneUp {
            site: "a",
            uplink,
            colour: Colour::Blue,
            rank: 0,
            policy: UplinkPolicy {
                priority,
                ..UplinkPolicy::default()
            },
            rate_kbps: None,
        };
        let id = e.handle_lane_up(up, at(0)).expect("site a");
        e.handle_lane_sample(id, sample(1400, 1), at(0));
        id
    };
    let dsl = lane(&mut e, "dsl", 1);
    let lte = lane(&mut e, "lte", 2);
    let pkt = to_site_a();
    for _ in 0..10 {
        assert_eq!(sent_on(&mut e, &pkt, at(1)), Some(dsl));
    }
    assert_eq!(state(&e, lte), LaneState::Standby);
}

/// A lane sampled at `t` ms with a round trip of `rtt_ms`, heard from.
fn rtt_sample(e: &DataPath, lane: LaneId, rtt_ms: u64, t: u64) -> LaneSample {
    LaneSample {
        srtt: Duration::from_millis(rtt_ms),
        ..drained(e, lane, t)
    }
}

#[test]
fn a_lane_beyond_its_round_trip_limit_stops_carrying_green_until_within_for_the_hold() {
    let mut e = tiered(&[]);
    let limited = UplinkPolicy {
        quality: QualityLimits {
            max_rtt: Some(Duration::from_millis(100)),
            ..QualityLimits::default()
        },
        ..UplinkPolicy::default()
    };
    let sat_green = policy_lane_up(&mut e, "sat", Colour::Green, limited, at(0));
    let sat_blue = policy_lane_up(&mut e, "sat", Colour::Blue, limited, at(0));
    let dsl_green = policy_lane_up(&mut e, "dsl", Colour::Green, UplinkPolicy::default(), at(0));
    let voice = with_dscp(tcp_v4("198.18.0.2", 5060, "203.0.113.1", 5060), 46);
    let green_lanes = |e: &mut DataPath, t| {
        let mut used: Vec<LaneId> = (0..20).filter_map(|_| sent_on(e, &voice, at(t))).collect();
        used.sort();
        used.dedup();
        used
    };
    // 250 ms: cut at once, green traffic on the DSL only; the blue lane carries on.
    let at_ms = 100;
    for lane in [sat_green, sat_blue] {
        e.handle_lane_sample(lane, rtt_sample(&e, lane, 250, at_ms), at(at_ms));
    }
    e.handle_lane_sample(dsl_green, drained(&e, dsl_green, at_ms), at(at_ms));
    assert_eq!(green_lanes(&mut e, at_ms), [dsl_green]);
    assert_eq!(e.lane(sat_green).expect("lane").counters.cutoffs, 1);
    assert_eq!(state(&e, sat_blue), LaneState::Up);
    let services: Vec<_> = std::iter::from_fn(|| e.poll_lane_service()).collect();
    assert!(
        services
            .iter()
            .any(|(l, s)| *l == sat_green && matches!(s, LaneService::Quality(_))),
        "{services:?}"
    );
    // Within from 1 s: carrying green again at 1 s + the hold (5 s), not before.
    for t in (1000..6000).step_by(100) {
        e.handle_lane_sample(sat_green, rtt_sample(&e, sat_green, 40, t), at(t));
        assert_eq!(state(&e, sat_green), LaneState::CutOff, "at {t} ms");
    }
    e.handle_lane_sample(sat_green, rtt_sample(&e, sat_green, 40, 6000), at(6000));
    assert_eq!(state(&e, sat_green), LaneState::Up);
}

#[test]
fn a_tier_cut_off_from_all_traffic_hands_it_to_the_next_tier() {
    let tiers = [tier("sat", 1, false, false), tier("lte", 2, false, false)];
    let mut e = tiered(&tiers);
    let cut_all = UplinkPolicy {
        quality: QualityLimits {
            max_rtt: Some(Duration::from_millis(100)),
            cut_off: CutOff::All,
            ..QualityLimits::default()
        },
        ..UplinkPolicy::default()
    };
    let sat = policy_lane_up(&mut e, "sat", Colour::Blue, cut_all, at(0));
    let lte = tier_lane_up(&mut e, &tiers, "lte", at(0));
    assert_eq!(lanes_used(&mut e, at(10)), [sat]);
    e.handle_lane_sample(sat, rtt_sample(&e, sat, 300, 100), at(100));
    assert_eq!(lanes_used(&mut e, at(100)), [lte]);
    assert_eq!(state(&e, sat), LaneState::CutOff);
}

#[test]
fn an_uplink_demoted_off_stands_by_is_hung_up_and_comes_back_when_given_back() {
    let tiers = [tier("dsl", 1, false, false), tier("lte", 1, false, false)];
    let mut e = tiered(&tiers);
    let [dsl, lte] = ["dsl", "lte"].map(|u| tier_lane_up(&mut e, &tiers, u, at(0)));
    assert_eq!(
        e.poll_uplink_demand(),
        None,
        "warm uplinks are dialled from the start"
    );
    assert_eq!(lanes_used(&mut e, at(10)), [dsl, lte]);
    // At its cap, off: no traffic, hung up.
    let off = [
        tiers[0].clone(),
        UplinkTier {
            off: true,
            ..tiers[1].clone()
        },
    ];
    e.handle_uplink_tiers(&off, SETTINGS, at(100));
    assert_eq!(
        e.poll_uplink_demand(),
        Some(UplinkDemand {
            uplink: "lte".into(),
            dial: false
        })
    );
    assert_eq!(lanes_used(&mut e, at(100)), [dsl]);
    // Off stays off even with the DSL down.
    let closed = LaneSample {
        closed: true,
        ..sample(1400, 1)
    };
    e.handle_lane_sample(dsl, closed, at(5000));
    assert_eq!(e.poll_uplink_demand(), None);
    // The period resets: dialled again.
    e.handle_uplink_tiers(&tiers, SETTINGS, at(6000));
    assert_eq!(e.poll_uplink_demand().map(|d| d.dial), Some(true));
    // Demoted cold to the last tier instead: with the DSL down it stays dialled and
    // carries.
    let cold = [
        tiers[0].clone(),
        UplinkTier {
            priority: u32::MAX,
            cold: true,
            ..tiers[1].clone()
        },
    ];
    e.handle_uplink_tiers(&cold, SETTINGS, at(7000));
    assert_eq!(e.poll_uplink_demand(), None);
    e.handle_lane_sample(lte, drained(&e, lte, 7000), at(7000));
    assert_eq!(lanes_used(&mut e, at(7000)), [lte]);
    // A DSL lane again: the LTE is hung up once the hold and the linger have passed.
    e.handle_lane_closed(dsl);
    let dsl = tier_lane_up(&mut e, &tiers, "dsl", at(8000));
    for t in (8100..16_000).step_by(100) {
        e.handle_lane_sample(dsl, sample(1400, t), at(t));
    }
    assert_eq!(e.poll_uplink_demand().map(|d| d.dial), Some(false));
    assert_eq!(lanes_used(&mut e, at(16_000)), [dsl]);
}

/// What left the entry in a cut of the primaries: each datagram's time and lane,
/// whether it was a copy, and whether it was the call's packet.
struct CutRun {
    sent: Vec<(u64, LaneId, bool, bool)>,
    /// When a primary's lane was first given up, and when the backup first carried.
    given_up_at: u64,
    backup_up_at: Option<u64>,
    backup: LaneId,
    copies_counted: u64,
}

impl CutRun {
    /// The copies that went over the backup from `from` up to `to` ms.
    fn backup_copies(&self, from: u64, to: u64) -> Vec<(u64, bool)> {
        self.sent
            .iter()
            .filter(|(t, lane, copy, _)| *lane == self.backup && *copy && (from..to).contains(t))
            .map(|(t, .., call)| (*t, *call))
            .collect()
    }
}

/// Two primaries and a warm backup under AFMT, and a call (a packet every 20 ms,
/// which AFMT keeps on one primary); at 100 ms the DSL's path dies, and the
/// cable's with it when `both`; the backup is heard throughout. Once a lane was
/// given up, a download (a packet every millisecond) starts.
fn cut_primaries(both: bool) -> CutRun {
    let tiers = [
        tier("dsl", 1, false, false),
        tier("cable", 1, false, false),
        tier("lte", 2, false, false),
    ];
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    e.handle_uplink_tiers(&tiers, SETTINGS, at(0));
    let [dsl, cable, lte] = ["dsl", "cable", "lte"].map(|u| tier_lane_up(&mut e, &tiers, u, at(0)));
    let call = tcp_v4("198.18.0.2", 5060, "203.0.113.1", 5060);
    let download = tcp_v4("198.18.0.2", 40000, "203.0.113.1", 443);
    let (mut sent, mut given_up_at, mut backup_up_at) = (Vec::new(), None, None);
    for t in 1..1000 {
        if t % 5 == 0 {
            for lane in [dsl, cable, lte] {
                let dead = t > 100 && (lane == dsl || (both && lane == cable));
                let heard = if dead { 100 } else { t };
                e.handle_lane_sample(lane, drained(&e, lane, heard), at(t));
            }
        }
        e.handle_timeout(at(t));
        if given_up_at.is_some() {
            send(&mut e, &download, at(t));
        }
        if t % 20 == 0 {
            send(&mut e, &call, at(t));
        }
        for out in transmits(&mut e) {
            let (header, packet) = split_datagram(&out.datagram).expect("a datagram");
            sent.push((t, out.lane, header.copy, packet == call.as_slice()));
        }
        let down = |l| !state(&e, l).healthy();
        if given_up_at.is_none() && (down(dsl) || down(cable)) {
            given_up_at = Some(t);
        }
        if backup_up_at.is_none() && state(&e, lte) == LaneState::Up {
            backup_up_at = Some(t);
        }
    }
    CutRun {
        sent,
        given_up_at: given_up_at.expect("no primary's lane was given up"),
        backup_up_at,
        backup: lte,
        copies_counted: e.lane(lte).expect("lane").counters.standby_copies,
    }
}

#[test]
fn while_the_primaries_are_in_doubt_a_call_is_copied_over_the_warm_backup_and_a_download_is_not() {
    let run = cut_primaries(true);
    let backup_up_at = run.backup_up_at.expect("the backup never took over");
    // The call's lane is given up first; the idle one is judged once the call (and
    // the download) moved onto it.
    assert!(
        run.given_up_at < backup_up_at,
        "{} {backup_up_at}",
        run.given_up_at
    );
    assert_eq!(run.backup_copies(0, run.given_up_at), [], "nothing before");
    // In between, every call packet is copied over the backup, and of the download
    // only its first packet (a flow's first may be a query's), not the hundred after.
    let calls = (run.given_up_at..backup_up_at).filter(|t| t % 20 == 0);
    let expected: Vec<_> = std::iter::once((run.given_up_at + 1, false))
        .chain(calls.map(|t| (t, true)))
        .collect();
    assert!(
        backup_up_at - run.given_up_at > 20,
        "the doubt lasted {} ms",
        backup_up_at - run.given_up_at
    );
    assert_eq!(run.backup_copies(run.given_up_at, backup_up_at), expected);
    assert_eq!(run.copies_counted, expected.len() as u64);
}

#[test]
fn when_one_primary_dies_the_call_is_copied_over_the_backup_for_the_idle_bound_only() {
    let run = cut_primaries(false);
    assert_eq!(run.backup_up_at, None, "the cable carries on");
    // From the DSL's lane given up, for the idle bound (400 ms): the call's packets
    // (every 20 ms) and the download's first. None after.
    let calls = (run.given_up_at..run.given_up_at + 400).filter(|t| t % 20 == 0);
    let expected: Vec<_> = std::iter::once((run.given_up_at + 1, false))
        .chain(calls.map(|t| (t, true)))
        .collect();
    assert_eq!(run.backup_copies(0, 1000), expected);
}

#[test]
fn a_site_with_no_lane_standing_by_is_never_in_doubt() {
    // Two equal uplinks, no tiers: the DSL's lane is given up, and with nothing to
    // copy over no packet is copied for nothing (the doubt is not even entered).
    let (mut e, dsl, lte) = two_lanes(Algorithm::Afmt);
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let mut t = 5;
    while state(&e, dsl).healthy() && t < 1000 {
        sent_on(&mut e, &pkt, at(t));
        e.handle_lane_sample(dsl, drained(&e, dsl, 1), at(t));
        e.handle_lane_sample(lte, drained(&e, lte, t), at(t));
        e.handle_timeout(at(t));
        t += 5;
    }
    assert!(
        !state(&e, dsl).healthy(),
        "the DSL's lane was never given up"
    );
    assert_eq!(e.sites[0].tier_doubted_at, None);
}
