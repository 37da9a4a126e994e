//! Steering: an application kept to some uplinks, their fall-back and `strict`.

use crate::core::engine::*;
use crate::core::lane::LaneSample;
use crate::core::pacing_table::{AppIdx, PacingTable};
use crate::core::packet::tests::tcp_v4;
use crate::core::sched::Algorithm;

use super::harness::*;

fn table(version: u64, strict: bool) -> PacingTable {
    PacingTable::parse(
        format!(
            r#"{{"version": {version}, "apps": [
                {{"name": "pinned", "match": {{"remote_ports": "873"}}, "uplinks": ["lte"], "strict": {strict}}},
                {{"name": "off", "match": {{"remote_ports": "22"}}, "avoid": ["lte"]}}]}}"#
        )
        .as_bytes(),
    )
    .expect("valid")
}

#[test]
fn an_application_takes_only_its_uplinks_while_one_is_up_else_the_others_or_none_if_strict() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    e.handle_pacing_table(SiteIdx(0), table(1, false), at(0));
    let dsl = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let lte = lane_up(&mut e, "a", "lte", 1400, at(0));
    let (pinned, off) = (AppIdx(1), AppIdx(2));
    let to = |sport, dport| tcp_v4("198.18.0.2", sport, "203.0.113.1", dport);
    // Many flows each, which AFMT would spread over both lanes unsteered.
    for sport in 1000..1040 {
        assert_eq!(sent_on(&mut e, &to(sport, 873), at(1)), Some(lte));
        assert_eq!(sent_on(&mut e, &to(sport, 22), at(1)), Some(dsl));
        e.handle_lane_sample(dsl, drained(&e, dsl, 1), at(1));
        e.handle_lane_sample(lte, drained(&e, lte, 1), at(1));
    }
    let others: Vec<_> = (2000..2040)
        .filter_map(|p| sent_on(&mut e, &to(p, 80), at(1)))
        .collect();
    assert!(
        others.contains(&dsl) && others.contains(&lte),
        "unsteered: both"
    );
    assert_eq!(e.app_counters(SiteIdx(0), pinned).steered_off, 0);

    // LTE's lane goes down: the pinned flows take DSL, counted; `off` is unchanged.
    e.handle_lane_sample(
        lte,
        LaneSample {
            max_datagram: 0,
            ..drained(&e, lte, 2)
        },
        at(2),
    );
    assert_eq!(sent_on(&mut e, &to(1000, 873), at(3)), Some(dsl));
    assert_eq!(sent_on(&mut e, &to(1001, 873), at(3)), Some(dsl));
    assert_eq!(sent_on(&mut e, &to(1000, 22), at(3)), Some(dsl));
    assert_eq!(e.app_counters(SiteIdx(0), pinned).steered_off, 2);
    assert_eq!(e.app_counters(SiteIdx(0), off).steered_off, 0);

    // Strict: dropped while none of its uplinks is up, and counted as steered.
    e.handle_pacing_table(SiteIdx(0), table(2, true), at(3));
    assert_eq!(sent_on(&mut e, &to(1000, 873), at(4)), None);
    assert_eq!(e.dropped(DropReason::Steered), 1);
    assert_eq!(e.app_counters(SiteIdx(0), pinned).steered_off, 2);

    // LTE is back: the pinned flows return to it.
    e.handle_lane_sample(lte, drained(&e, lte, 5), at(5));
    assert_eq!(sent_on(&mut e, &to(1000, 873), at(6)), Some(lte));
    assert_eq!(e.dropped(DropReason::Steered), 1);
}
