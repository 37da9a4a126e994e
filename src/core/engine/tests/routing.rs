//! Routing and forwarding: sites and their threads, admission, reordering counts,
//! MSS clamping and ICMP errors, colours, flow expiry and pacing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bytes::Bytes;

use crate::core::engine::timers::Timer;
use crate::core::engine::*;
use crate::core::lane::{Colour, LaneSample};
use crate::core::pacing_table::{AppIdx, PacingTable};
use crate::core::packet::tests::{tcp_syn_v4, tcp_v4, udp_v6};
use crate::core::sched::{Algorithm, DecisionKind};
use crate::core::stats::DropReason;
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, mark_copy, split_datagram};

use super::harness::*;

#[test]
fn exit_routes_by_destination_to_the_sites_own_lanes() {
    let mut e = exit_engine();
    let a = up(&mut e, "a", 1400);
    let b = up(&mut e, "b", 1400);
    assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), Some(a));
    let mut v6 = udp_v6(100);
    v6[24..40].copy_from_slice(&"fd00::9".parse::<Ipv6Addr>().expect("ip").octets());
    assert_eq!(sent_on(&mut e, &v6, Instant::ZERO), Some(b));
}

#[test]
fn an_exit_thread_hands_packets_for_another_threads_site_over_and_refuses_its_lanes() {
    let thread = |index| {
        DataPath::new(
            builder(Role::Exit, Algorithm::RoundRobin)
                .shard(Shard { index, count: 2 })
                .build(),
        )
    };
    // Site a (index 0) is thread 0's, site b (index 1) thread 1's.
    let (mut first, mut second) = (thread(0), thread(1));
    assert!(first.owns(SiteIdx(0)) && !first.owns(SiteIdx(1)));
    assert!(second.owns(SiteIdx(1)) && !second.owns(SiteIdx(0)));
    let a_on_second = LaneUp {
        site: "a",
        uplink: "up0",
        colour: Colour::Blue,
        rank: 0,
        policy: UplinkPolicy::default(),
        rate_kbps: None,
    };
    assert_eq!(second.handle_lane_up(a_on_second, Instant::ZERO), None);
    let a = up(&mut first, "a", 1400);
    up(&mut second, "b", 1400);

    // Read by the second thread: handed to the first as it was read, not dropped.
    send(&mut second, &to_site_a(), Instant::ZERO);
    assert!(transmits(&mut second).is_empty());
    let (to, datagram) = second.poll_handoff().expect("handed over");
    assert_eq!(to, 0);
    assert_eq!(&datagram[DATAGRAM_HEADER_LEN..], &to_site_a()[..]);
    assert_eq!(second.poll_handoff(), None);
    assert!(DropReason::ALL.iter().all(|&r| second.dropped(r) == 0));
    first.handle_tun_packet(datagram, Instant::ZERO);
    assert_eq!(first.poll_handoff(), None);
    assert_eq!(transmits(&mut first).first().map(|t| t.lane), Some(a));

    second.handle_handoff_refused(3);
    assert_eq!(second.dropped(DropReason::HandoffFull), 3);
    // Sites a reload adds are spread the same way: c (index 2) is the first's.
    let mut specs = config(Role::Exit, Algorithm::RoundRobin).sites;
    specs.push(SiteSpec {
        id: "c".into(),
        prefixes: vec!["198.18.9.0/24".parse().expect("net")],
    });
    for thread in [&mut first, &mut second] {
        thread.handle_sites(&specs, at(1));
    }
    assert!(first.owns(SiteIdx(2)) && !second.owns(SiteIdx(2)));
}

#[test]
fn a_reload_adds_and_removes_sites_and_a_removed_site_keeps_its_index() {
    let mut e = exit_engine();
    let a = up(&mut e, "a", 1400);
    let b = up(&mut e, "b", 1400);
    let [a_spec, b_spec] =
        [0, 1].map(|i| config(Role::Exit, Algorithm::RoundRobin).sites[i].clone());
    // Site a moves to another prefix and c arrives with a's old one; b is gone.
    let a_moved = SiteSpec {
        id: "a".into(),
        prefixes: vec!["198.18.9.0/24".parse().expect("net")],
    };
    let c = SiteSpec {
        id: "c".into(),
        prefixes: a_spec.prefixes.clone(),
    };
    e.handle_sites(&[a_moved, c], at(1));
    assert_eq!(
        e.poll_lane_close(),
        Some((b, LaneClose::SiteRemoved)),
        "b's lane closes"
    );
    assert_eq!(e.poll_lane_close(), None, "a's lane stays");
    assert!(e.lane(a).expect("a").view.up);
    assert_eq!(e.site_index("b"), None);
    assert_eq!(e.site_index("c"), Some(SiteIdx(2)));
    let up_b = LaneUp {
        site: "b",
        uplink: "up9",
        colour: Colour::Blue,
        rank: 0,
        policy: UplinkPolicy::default(),
        rate_kbps: None,
    };
    assert_eq!(e.handle_lane_up(up_b.clone(), at(1)), None, "b is refused");
    // a's old prefix now belongs to c, which has no lane yet.
    assert_eq!(sent_on(&mut e, &to_site_a(), at(1)), None);
    assert_eq!(e.dropped(DropReason::NoLane), 1);
    let c_lane = lane_up(&mut e, "c", "up1", 1400, at(1));
    assert_eq!(sent_on(&mut e, &to_site_a(), at(1)), Some(c_lane));
    // The pacing and status views have the new site too.
    assert_eq!(e.pacing().apps(SiteIdx(2)), 1);
    assert!(!e.site_served(SiteIdx(1)) && e.site_served(SiteIdx(2)));
    // b comes back with its old index.
    e.handle_sites(&[a_spec, b_spec], at(2));
    assert_eq!(e.site_index("b"), Some(SiteIdx(1)));
    assert!(e.handle_lane_up(up_b, at(2)).is_some());
    assert_eq!(e.sites().count(), 3);
}

#[test]
fn each_site_numbers_its_packets_in_sending_order() {
    let mut e = exit_engine();
    up(&mut e, "a", 1400);
    for _ in 0..3 {
        send(&mut e, &to_site_a(), Instant::ZERO);
    }
    let seqs: Vec<u32> = transmits(&mut e)
        .iter()
        .map(|t| split_datagram(&t.datagram).expect("header").0.seq)
        .collect();
    assert_eq!(seqs, [0, 1, 2]);
}

#[test]
fn exit_drops_unknown_destinations_and_sites_without_lanes() {
    let mut e = exit_engine();
    assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), None);
    assert_eq!(e.dropped(DropReason::NoLane), 1);
    // Destined to 198.19.0.2: no site.
    assert_eq!(sent_on(&mut e, &tcp_syn_v4(1460), Instant::ZERO), None);
    assert_eq!(e.dropped(DropReason::NoSite), 1);
    send(&mut e, b"garbage", Instant::ZERO);
    assert_eq!(e.dropped(DropReason::Malformed), 1);
}

#[test]
fn packets_the_tun_device_refuses_are_counted_by_why() {
    let mut e = exit_engine();
    e.handle_tun_refused(9, true);
    e.handle_tun_refused(3, false);
    assert_eq!(e.dropped(DropReason::QueueFull), 9);
    assert_eq!(e.dropped(DropReason::TunRefused), 3);
}

#[test]
fn exit_refuses_a_sites_packets_with_another_sites_source() {
    let mut e = exit_engine();
    let a = up(&mut e, "a", 1400);
    let b = up(&mut e, "b", 1400);
    let from_a = tcp_syn_v4(1300); // source 198.18.0.2, site a
    e.handle_lane_datagram(a, datagram(0, &from_a), Instant::ZERO);
    assert_eq!(e.poll_tun_write().as_deref(), Some(&from_a[..]));
    e.handle_lane_datagram(b, datagram(1, &from_a), Instant::ZERO);
    assert_eq!(e.dropped(DropReason::Spoofed), 1);
    e.handle_lane_datagram(a, datagram(2, b"garbage"), Instant::ZERO);
    e.handle_lane_datagram(a, Bytes::from_static(b"abc"), Instant::ZERO);
    assert_eq!(e.dropped(DropReason::Malformed), 2);
    assert_eq!(e.poll_tun_write(), None);
    let counters = e.lane(a).expect("lane a").counters;
    assert_eq!(
        (counters.rx_packets, counters.rx_bytes),
        (3, 8 + 48 + 8 + 7 + 3)
    );
}

#[test]
fn an_exit_forwards_between_its_sites_only_where_allowed() {
    // Sites a (198.18.0.0/24) and c (198.18.3.0/24).
    let sites = vec![
        SiteSpec {
            id: "a".into(),
            prefixes: vec!["198.18.0.0/24".parse().expect("net")],
        },
        SiteSpec {
            id: "c".into(),
            prefixes: vec!["198.18.3.0/24".parse().expect("net")],
        },
    ];
    let a_to_c = tcp_v4("198.18.0.2", 1, "198.18.3.2", 80);
    let a_to_server = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for allowed in [false, true] {
        let mut e = DataPath::new(
            builder(Role::Exit, Algorithm::RoundRobin)
                .sites(sites.clone())
                .site_to_site(allowed)
                .build(),
        );
        let a = up(&mut e, "a", 1400);
        e.handle_lane_datagram(a, datagram(0, &a_to_c), Instant::ZERO);
        e.handle_lane_datagram(a, datagram(1, &a_to_server), Instant::ZERO);
        let written: Vec<Bytes> = std::iter::from_fn(|| e.poll_tun_write()).collect();
        if allowed {
            // Written to the TUN device: the kernel routes it back to site c.
            assert_eq!(written, [&a_to_c[..], &a_to_server[..]]);
            assert_eq!(e.dropped(DropReason::SiteToSite), 0);
        } else {
            assert_eq!(written, [&a_to_server[..]]);
            assert_eq!(e.dropped(DropReason::SiteToSite), 1);
        }
        // Anti-spoofing holds either way: site a cannot claim site c's addresses.
        let spoofed = tcp_v4("198.18.3.9", 1, "198.18.3.2", 80);
        e.handle_lane_datagram(a, datagram(2, &spoofed), Instant::ZERO);
        assert_eq!(e.dropped(DropReason::Spoofed), 1);
        // Allowed or not, a reload changes it.
        e.handle_site_to_site(!allowed);
        e.handle_lane_datagram(a, datagram(3, &a_to_c), Instant::ZERO);
        assert_eq!(e.poll_tun_write().is_some(), !allowed);
    }
}

#[test]
fn a_million_flows_each_with_a_gap_keep_the_receiving_side_within_its_bounds() {
    // Site a's hosts (198.18.0.0/24) send, all at once, a million flows whose every
    // packet claims an earlier one of its flow is still on its way: each would be
    // held for a deadline, which the shared budget cuts short.
    let mut e = exit_engine();
    let lane = up(&mut e, "a", 1400);
    let mut packet = tcp_v4("198.18.0.2", 1, "203.0.113.1", 443);
    let mut max_held = 0;
    for i in 0..1_000_000u32 {
        // A flow of its own: source host and port.
        packet[15] = (i % 250 + 2) as u8;
        packet[20..22].copy_from_slice(&((i / 250) as u16 + 1).to_be_bytes());
        e.handle_lane_datagram(lane, striped_datagram(i * 2 + 1, 1, &packet), at(1));
        max_held = max_held.max(e.held_budget.bytes());
        while e.poll_tun_write().is_some() {}
    }
    assert!(max_held <= crate::core::reseq::MAX_HELD_BYTES, "{max_held}");
    assert!(
        max_held > crate::core::reseq::MAX_HELD_BYTES * 9 / 10,
        "{max_held}"
    );
    let site = &e.sites[0];
    assert!(site.reseq.flows() <= 100, "{} flows", site.reseq.flows());
    // Nothing was dropped: held packets went early, or go at their deadline.
    let c = *e.reseq_counters(SiteIdx(0));
    assert_eq!((c.held, c.dropped), (1_000_000, 0));
    e.handle_timeout(at(2_000));
    assert_eq!(e.held_budget.bytes(), 0);
    assert_eq!(e.reseq_counters(SiteIdx(0)).released_at_deadline, 1_000_000);
}

#[test]
fn a_packet_overtaken_by_a_later_one_of_its_flow_is_counted_as_reordered() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let lane = up(&mut e, "a", 1400);
    let site = SiteIdx(0);
    let flow_x = tcp_syn_v4(1460);
    let flow_y = udp_v6(10);
    let mut got = |seq, pkt: &[u8]| {
        let before = e.reordered(site);
        e.handle_lane_datagram(lane, datagram(seq, pkt), Instant::ZERO);
        assert!(e.poll_tun_write().is_some(), "delivered either way");
        e.reordered(site) > before
    };
    assert!(!got(10, &flow_x));
    assert!(!got(12, &flow_x));
    assert!(!got(9, &flow_y), "another flow's order is its own");
    assert!(got(11, &flow_x), "11 arrived after 12 of the same flow");
    assert!(!got(13, &flow_x));
    // Sequence numbers wrap around.
    let mut flow_z = udp_v6(10);
    flow_z[40..42].copy_from_slice(&7777u16.to_be_bytes());
    assert!(!got(u32::MAX, &flow_z));
    assert!(!got(0, &flow_z));
    assert!(got(u32::MAX - 1, &flow_z));
}

#[test]
fn a_repaired_packet_whose_original_arrived_too_is_delivered_once() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let (a, b) = (up(&mut e, "a", 1400), up(&mut e, "a", 1400));
    let probe = udp_v6(100);
    let mut delivered = |lane, seq, copy| {
        let mut d = datagram(seq, &probe).to_vec();
        if copy {
            mark_copy(&mut d);
        }
        e.handle_lane_datagram(lane, Bytes::from(d), Instant::ZERO);
        let mut n = 0;
        while e.poll_tun_write().is_some() {
            n += 1;
        }
        n
    };
    // 7's lane reported it lost, and its copy came over b; the original arrived too.
    assert_eq!(delivered(b, 7, true), 1);
    assert_eq!(delivered(a, 7, false), 0, "the original behind its copy");
    assert_eq!(delivered(a, 8, false), 1);
    assert_eq!(delivered(b, 8, true), 0, "a copy behind its original");
    assert_eq!(delivered(a, 9, false), 1);
    assert_eq!(
        delivered(a, 8, false),
        1,
        "an original again: the sender restarted"
    );
    assert_eq!(e.reseq_counters(SiteIdx(0)).dropped, 2);
}

#[test]
fn too_big_packets_get_an_icmp_reply_with_the_lane_mtu() {
    let mut e = exit_engine();
    up(&mut e, "a", 40); // the SYN is 48 bytes
    let pkt = to_site_a();
    assert_eq!(sent_on(&mut e, &pkt, Instant::ZERO), None);
    assert_eq!(e.dropped(DropReason::TooBig), 1);
    let reply = e.poll_tun_write().expect("an ICMP error");
    let reply = PacketInfo::parse(&reply).expect("valid reply");
    assert_eq!(reply.dst, PacketInfo::parse(&pkt).expect("valid").src);
    assert_eq!(reply.src, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)));
}

#[test]
fn syn_mss_is_clamped_to_the_tun_mtu_or_the_smallest_lane() {
    let mss_sent = |e: &mut DataPath| {
        send(e, &to_site_a(), Instant::ZERO);
        let t = transmits(e).pop().expect("sent");
        let pkt = &t.datagram[DATAGRAM_HEADER_LEN..];
        u16::from_be_bytes([pkt[42], pkt[43]])
    };
    let mut e = exit_engine(); // TUN MTU 1400
    let big = up(&mut e, "a", 1500);
    assert_eq!(mss_sent(&mut e), 1360);
    e.handle_lane_closed(big);
    up(&mut e, "a", 1300);
    assert_eq!(mss_sent(&mut e), 1260);
}

#[test]
fn a_syn_from_a_lane_is_clamped_to_this_gateways_path_mtu_too() {
    // The entry clamped to its own, larger MTU; this exit's TUN MTU is 1400.
    let mut e = exit_engine();
    let a = up(&mut e, "a", 1500);
    let mss_written = |e: &mut DataPath, seq, syn: &[u8]| {
        e.handle_lane_datagram(a, datagram(seq, syn), Instant::ZERO);
        let pkt = e.poll_tun_write().expect("written");
        let info = PacketInfo::parse(&pkt).expect("still a valid packet");
        let tcp = etherparse::TcpHeaderSlice::from_slice(&pkt[20..]).expect("tcp");
        let sum = tcp
            .to_header()
            .calc_checksum_ipv4_raw([198, 18, 0, 2], [198, 19, 0, 2], &[]);
        assert_eq!(tcp.checksum(), sum.expect("checksum"), "checksum fixed");
        assert_eq!(info.len, syn.len());
        u16::from_be_bytes([pkt[42], pkt[43]])
    };
    assert_eq!(mss_written(&mut e, 0, &tcp_syn_v4(1460)), 1360);
    assert_eq!(
        mss_written(&mut e, 1, &tcp_syn_v4(1200)),
        1200,
        "small enough"
    );
}

#[test]
fn lane_ids_are_reused_and_removed_lanes_are_not_picked() {
    let mut e = exit_engine();
    let a1 = up(&mut e, "a", 1400);
    let a2 = up(&mut e, "a", 1400);
    e.handle_lane_closed(a1);
    assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), Some(a2));
    let again = up(&mut e, "a", 1400);
    assert_eq!(again, a1);
    e.handle_lane_closed(a2);
    e.handle_lane_closed(again);
    assert_eq!(sent_on(&mut e, &to_site_a(), Instant::ZERO), None);
    assert_eq!(e.dropped(DropReason::NoLane), 1);
}

#[test]
fn afmt_spreads_new_flows_within_one_batch_by_counting_what_it_queued() {
    // Between two samples, the engine adds each packet to its lane's fill;
    // otherwise every new flow of a batch would pick the same lane.
    let mut e = engine(Role::Exit, Algorithm::Afmt);
    let a = up(&mut e, "a", 1400);
    let b = up(&mut e, "a", 1400);
    let mut lanes = Vec::new();
    for port in 0..4u16 {
        let mut pkt = to_site_a();
        pkt[20..22].copy_from_slice(&(1000 + port).to_be_bytes()); // another flow
        lanes.push(sent_on(&mut e, &pkt, Instant::ZERO).expect("sent"));
    }
    assert_eq!(lanes, [a, b, a, b]);
    assert_eq!(e.flows_active(), 4);
    let decided = |l| e.lane(l).expect("lane").counters.decisions[DecisionKind::NewFlow as usize];
    assert_eq!((decided(a), decided(b)), (2, 2));
}

#[test]
fn packets_to_link_local_and_link_scope_multicast_destinations_are_dropped_and_counted() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    lane_up(&mut e, "a", "dsl", 1400, at(0));
    for dst in ["169.254.1.1", "224.0.0.251", "224.0.0.22"] {
        assert_eq!(
            sent_on(&mut e, &tcp_v4("198.18.0.2", 1, dst, 80), at(1)),
            None
        );
    }
    assert_eq!(e.dropped(DropReason::LinkLocal), 3);
    // A routable destination beside them is carried.
    assert!(sent_on(&mut e, &tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), at(1)).is_some());
}

#[test]
fn new_scheduler_settings_take_over_from_the_next_packet() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    send(&mut e, &pkt, at(1));
    send(&mut e, &pkt, at(2));
    assert_eq!(e.flows_active(), 1);
    e.handle_scheduler_config(Algorithm::RoundRobin, Duration::from_secs(10), 100);
    assert_eq!(e.flows_active(), 0, "a new scheduler has seen no flow yet");
    send(&mut e, &pkt, at(3));
    assert_eq!(e.flows_active(), 1, "round-robin's flows are counted too");
    assert_eq!(transmits(&mut e).len(), 3);
    let decisions = e.lane(lane).expect("lane").counters.decisions;
    assert_eq!(decisions[DecisionKind::NewFlow as usize], 1);
    assert_eq!(decisions[DecisionKind::SameLane as usize], 1);
    assert_eq!(decisions[DecisionKind::Stateless as usize], 1);
}

#[test]
fn datagrams_a_lane_refused_or_lost_count_as_drops_once() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    assert!(!e.ready(), "an entry without a lane cannot carry traffic");
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    assert!(e.ready());
    let lost = |refused, abandoned| LaneSample {
        refused_datagrams: refused,
        abandoned_datagrams: abandoned,
        ..sample(1400, 1)
    };
    e.handle_lane_sample(lane, lost(2, 3), at(1));
    e.handle_lane_sample(lane, lost(2, 3), at(2));
    assert_eq!(e.dropped(DropReason::TooBig), 2);
    assert_eq!(e.dropped(DropReason::NoLane), 3);
    e.handle_lane_sample(lane, lost(5, 3), at(3));
    assert_eq!(e.dropped(DropReason::TooBig), 5);
    assert!(DataPath::new(config(Role::Exit, Algorithm::Afmt)).ready());
}

#[test]
fn idle_flows_expire_at_the_flow_timeout_without_traffic() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    send(&mut e, &tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), at(5));
    send(&mut e, &tcp_v4("198.18.0.2", 2, "203.0.113.1", 80), at(7));
    e.handle_lane_datagram(
        lane,
        datagram(0, &tcp_v4("203.0.113.1", 80, "198.18.0.2", 1)),
        at(8),
    );
    assert_eq!(e.flows_active(), 2);
    assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 2);
    // Without lanes, nothing but the flow timeout (10 s) is ahead.
    e.handle_lane_closed(lane);
    e.handle_timeout(at(9_000));
    assert_eq!(e.poll_timeout(), Some(at(5) + Duration::from_secs(10)));
    e.handle_timeout(at(10_005) - Duration::from_nanos(1));
    assert_eq!(e.flows_active(), 2, "one nanosecond before the timeout");
    e.handle_timeout(at(10_005));
    assert_eq!(e.flows_active(), 1);
    assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 1);
    assert_eq!(e.poll_timeout(), Some(at(10_007)));
    e.handle_timeout(at(10_008));
    assert_eq!(e.flows_active(), 0);
    assert_eq!(e.pacing.flows(SiteIdx(0), AppIdx::DEFAULT), 0);
    assert_eq!(e.sites[0].reseq.flows(), 0, "the reordering table too");
    assert_eq!(
        e.timers.get(Timer::FlowExpiry),
        None,
        "nothing left to expire"
    );
}

#[test]
fn paced_packets_leave_at_their_departure_time_and_count_only_when_sent() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    // 1120 kbit/s: a 140-byte packet every millisecond.
    let table = PacingTable::parse(
        br#"{"version": 1, "apps": [{"name": "web", "match": {"remote_ports": "80"}, "rate_up_kbps": 1120}]}"#,
    )
    .expect("valid");
    e.handle_pacing_table(SiteIdx(0), table, at(0));
    let web = AppIdx(1);
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // No lane yet: the first packet leaves the pacer at once and is dropped.
    send(&mut e, &pkt, at(0));
    assert_eq!(e.dropped(DropReason::NoLane), 1);
    assert_eq!(
        e.app_counters(SiteIdx(0), web).paced_bytes,
        0,
        "not carried"
    );
    lane_up(&mut e, "a", "dsl", 1400, at(0));
    for _ in 0..3 {
        send(&mut e, &pkt, at(0));
    }
    assert!(transmits(&mut e).is_empty(), "all wait for their departure");
    assert_eq!(e.poll_timeout(), Some(at(1)));
    e.handle_timeout(at(1));
    assert_eq!(transmits(&mut e).len(), 1);
    e.handle_timeout(at(3));
    assert_eq!(transmits(&mut e).len(), 2);
    assert_eq!(e.app_counters(SiteIdx(0), web).paced_bytes, 3 * 140);
    // A new table without the application sends what is queued, unpaced.
    send(&mut e, &pkt, at(3));
    send(&mut e, &pkt, at(3));
    let empty = PacingTable::parse(br#"{"version": 2, "apps": []}"#).expect("valid");
    e.handle_pacing_table(SiteIdx(0), empty, at(3));
    assert_eq!(transmits(&mut e).len(), 2);
}

#[test]
fn a_packet_takes_a_lane_of_its_applications_colour_else_of_its_inner_dscp() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let table = PacingTable::parse(
        br#"{"version": 1, "apps": [
            {"name": "voice", "match": {"remote_ports": "5060"}, "colour": "green"},
            {"name": "backup", "match": {"remote_ports": "873"}, "colour": "blue"}]}"#,
    )
    .expect("valid");
    e.handle_pacing_table(SiteIdx(0), table, at(0));
    let blue = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let green = coloured_lane_up(&mut e, "a", "dsl", Colour::Green, 1400, at(0));
    let to = |port, dscp| with_dscp(tcp_v4("198.18.0.2", 1000 + port, "203.0.113.1", port), dscp);
    for (port, dscp, lane, why) in [
        (5060, 0, green, "green application"),
        (873, 46, blue, "the application's colour first"),
        (80, 46, green, "inner DSCP 46 (EF)"),
        (81, 10, blue, "other DSCPs are blue"),
    ] {
        assert_eq!(sent_on(&mut e, &to(port, dscp), at(1)), Some(lane), "{why}");
    }
    assert_eq!(e.colour_packets(Colour::Green), (2, 0));
    assert_eq!(e.colour_packets(Colour::Blue), (2, 0));
    // A second blue lane comes up after the green one: the colours stay apart.
    let blue2 = lane_up(&mut e, "a", "lte", 1400, at(1));
    for port in 2000..2010 {
        let lane = sent_on(&mut e, &to(port, 0), at(2));
        assert!(lane == Some(blue) || lane == Some(blue2), "{lane:?}");
        assert_eq!(sent_on(&mut e, &to(port, 46), at(2)), Some(green));
    }
}

#[test]
fn a_flow_its_lane_cannot_carry_is_striped_when_blue_and_never_when_green() {
    for (dscp, colour, stripes) in [(0, Colour::Blue, true), (46, Colour::Green, false)] {
        let mut e = engine(Role::Entry, Algorithm::Afmt);
        let lanes =
            ["dsl", "lte"].map(|uplink| coloured_lane_up(&mut e, "a", uplink, colour, 1400, at(0)));
        let packet = with_dscp(tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), dscp);
        // A thousand packets at once: far more than one lane's window.
        let mut gaps = 0;
        for _ in 0..1000 {
            send(&mut e, &packet, at(1));
            for t in transmits(&mut e) {
                let (header, _) = split_datagram(&t.datagram).expect("a datagram");
                gaps += u64::from(header.gap != 0);
            }
        }
        let striped: u64 = lanes
            .iter()
            .map(|&l| e.lane(l).expect("lane").counters.decisions[DecisionKind::Stripe as usize])
            .sum();
        assert_eq!(striped > 0, stripes, "{colour:?}: {striped} striped");
        assert_eq!(gaps > 0, stripes, "{colour:?}: {gaps} packets carry a gap");
    }
}

#[test]
fn a_colour_without_live_lanes_borrows_the_others_until_one_returns() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let blue = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let green_pkt = with_dscp(tcp_v4("198.18.0.2", 1, "203.0.113.1", 80), 46);
    let blue_pkt = tcp_v4("198.18.0.2", 2, "203.0.113.1", 80);
    assert_eq!(sent_on(&mut e, &green_pkt, at(1)), Some(blue));
    assert_eq!(
        e.colour_packets(Colour::Green),
        (1, 1),
        "counted as borrowed"
    );
    let green = coloured_lane_up(&mut e, "a", "dsl", Colour::Green, 1400, at(2));
    assert_eq!(
        sent_on(&mut e, &green_pkt, at(3)),
        Some(green),
        "back on its colour"
    );
    assert_eq!(e.colour_packets(Colour::Green), (2, 1));
    // And the other way round: the blue lane goes, blue borrows the green one.
    e.handle_lane_closed(blue);
    assert_eq!(sent_on(&mut e, &blue_pkt, at(4)), Some(green));
    assert_eq!(e.colour_packets(Colour::Blue), (1, 1));
    e.handle_lane_closed(green);
    assert_eq!(sent_on(&mut e, &blue_pkt, at(5)), None);
    assert_eq!(e.dropped(DropReason::NoLane), 1);
}
