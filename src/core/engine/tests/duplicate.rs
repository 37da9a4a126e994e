//! Duplication: a `duplicate` application's packets go over two uplinks, within the
//! site's budget, and the receiving gateway passes each once.

use crate::core::engine::*;
use crate::core::lane::LaneSample;
use crate::core::pacing_table::{AppIdx, PacingTable};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;
use crate::core::wire::split_datagram;

use super::harness::*;

fn table(duplicate_kbps: u64) -> PacingTable {
    PacingTable::parse(
        format!(
            r#"{{"version": 1, "duplicate_kbps": {duplicate_kbps}, "apps": [
                {{"name": "call", "match": {{"remote_ports": "5060"}}, "duplicate": true}}]}}"#
        )
        .as_bytes(),
    )
    .expect("valid")
}

#[test]
fn each_packet_goes_over_two_uplinks_within_the_budget_and_arrives_once() {
    let mut entry = engine(Role::Entry, Algorithm::Afmt);
    entry.handle_pacing_table(SiteIdx(0), table(1000), at(0));
    let dsl = lane_up(&mut entry, "a", "dsl", 1400, at(0));
    let lte = lane_up(&mut entry, "a", "lte", 1400, at(0));
    let call = tcp_v4("198.18.0.2", 1000, "203.0.113.1", 5060);
    let mut exit = exit_engine();
    let (exit_dsl, exit_lte) = (
        lane_up(&mut exit, "a", "dsl", 1400, at(0)),
        lane_up(&mut exit, "a", "lte", 1400, at(0)),
    );
    let mut delivered = 0;
    for i in 0..20u64 {
        send(&mut entry, &call, at(i));
        let sent = transmits(&mut entry);
        assert_eq!(sent.len(), 2, "the packet and its copy");
        assert_ne!(sent[0].lane, sent[1].lane, "over two uplinks");
        let (original, copy) = (
            split_datagram(&sent[0].datagram).expect("header").0,
            split_datagram(&sent[1].datagram).expect("header").0,
        );
        assert_eq!(original.seq, copy.seq);
        assert!(!original.copy && copy.copy);
        // Whichever arrives first is passed, the other dropped: alternately.
        let mut arrivals = sent;
        if i % 2 == 1 {
            arrivals.reverse();
        }
        for t in arrivals {
            let lane = if t.lane == dsl { exit_dsl } else { exit_lte };
            exit.handle_lane_datagram(lane, t.datagram, at(i));
        }
        delivered += std::iter::from_fn(|| exit.poll_tun_write()).count();
        entry.handle_lane_sample(dsl, drained(&entry, dsl, i), at(i));
        entry.handle_lane_sample(lte, drained(&entry, lte, i), at(i));
    }
    assert_eq!(delivered, 20, "each packet once");
    let received = exit.app_counters(SiteIdx(0), AppIdx::DEFAULT);
    assert_eq!(received.duplicates_dropped, 20, "the second of each");
    assert_eq!(received.other_bytes, 20 * call.len() as u64, "counted once");
    let counts = entry.app_counters(SiteIdx(0), AppIdx(1));
    assert_eq!((counts.duplicates, counts.over_budget), (20, 0));
    assert_eq!(counts.duplicate_bytes, 20 * (call.len() as u64 + 8));
    // Other traffic is not copied.
    send(
        &mut entry,
        &tcp_v4("198.18.0.2", 1000, "203.0.113.1", 80),
        at(30),
    );
    assert_eq!(transmits(&mut entry).len(), 1);

    // LTE's lane goes down: no second uplink, no copy, nothing counted.
    entry.handle_lane_sample(
        lte,
        LaneSample {
            max_datagram: 0,
            ..drained(&entry, lte, 31)
        },
        at(31),
    );
    send(&mut entry, &call, at(32));
    assert_eq!(transmits(&mut entry).len(), 1);
    let counts = entry.app_counters(SiteIdx(0), AppIdx(1));
    assert_eq!((counts.duplicates, counts.over_budget), (20, 0));
}

#[test]
fn copies_beyond_the_sites_budget_are_not_sent_and_are_counted() {
    // 8 kbit/s: the bucket holds 3,000 bytes, a second earns 1,000.
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    e.handle_pacing_table(SiteIdx(0), table(8), at(0));
    lane_up(&mut e, "a", "dsl", 1400, at(0));
    lane_up(&mut e, "a", "lte", 1400, at(0));
    let call = tcp_v4("198.18.0.2", 1000, "203.0.113.1", 5060);
    let len = call.len() as u64 + 8;
    let mut copies = 0;
    for _ in 0..200 {
        send(&mut e, &call, at(0));
        copies += transmits(&mut e).len() - 1;
    }
    assert_eq!(copies as u64, 3000 / len);
    let counts = e.app_counters(SiteIdx(0), AppIdx(1));
    assert_eq!(counts.duplicates, copies as u64);
    assert_eq!(counts.over_budget, 200 - copies as u64);
    // A budget of 0 copies nothing.
    let mut none = engine(Role::Entry, Algorithm::Afmt);
    none.handle_pacing_table(SiteIdx(0), table(0), at(0));
    lane_up(&mut none, "a", "dsl", 1400, at(0));
    lane_up(&mut none, "a", "lte", 1400, at(0));
    send(&mut none, &call, at(0));
    assert_eq!(transmits(&mut none).len(), 1);
}
