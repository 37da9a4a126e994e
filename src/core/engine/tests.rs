//! The engine's tests, and the fixtures the whole-path simulator shares.

use super::liveness::{EXCHANGES_TO_STALL_WHEN_HELD, exchange_timeout};
use super::*;
use crate::core::lane_cc::MAX_START_WINDOW;
use crate::core::packet::tests::{tcp_syn_v4, tcp_v4, udp_v6};
use crate::core::sched::DecisionKind;
use crate::core::shaper::AbeScheduler;
use crate::core::wire::is_probe;
use crate::core::wire::{
    DatagramHeader, LossReport, PROBE, PROBE_PADDING, split_datagram, write_datagram_header,
};
use etherparse::PacketBuilder;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const MS: u64 = 1_000_000;

pub fn at(ms: u64) -> Instant {
    Instant::from_nanos(ms * MS)
}

pub fn config(role: Role, algorithm: Algorithm) -> EngineConfig {
    EngineConfig::builder()
        .role(role)
        .sites(vec![
            SiteSpec {
                id: "a".into(),
                prefixes: vec!["198.18.0.0/24".parse().expect("net")],
            },
            SiteSpec {
                id: "b".into(),
                prefixes: vec!["fd00::/64".parse().expect("net")],
            },
        ])
        .tun_mtu(1400)
        .algorithm(algorithm)
        .max_flows(100)
        .warm_up_lanes(false)
        .build()
}

fn engine(role: Role, algorithm: Algorithm) -> DataPath {
    DataPath::new(config(role, algorithm))
}

fn exit_engine() -> DataPath {
    engine(Role::Exit, Algorithm::RoundRobin)
}

fn sample(max_datagram: usize, rx_datagrams: u64) -> LaneSample {
    LaneSample {
        srtt: Duration::from_millis(20),
        cwnd: 100_000,
        max_datagram,
        rx_datagrams,
        ..LaneSample::default()
    }
}

/// A sample of a lane that has heard `rx_datagrams` and transmitted every packet
/// it was handed.
fn drained(e: &DataPath, lane: LaneId, rx_datagrams: u64) -> LaneSample {
    let l = e.lanes[lane.0 as usize].as_ref().expect("lane");
    LaneSample {
        transmitted_datagrams: l.handed_datagrams,
        dequeued_bytes: l.handed_bytes,
        ..sample(1400, rx_datagrams)
    }
}

/// Brings up a blue lane of `site` over `uplink` at `now`, sampled as live.
fn lane_up(
    e: &mut DataPath,
    site: &str,
    uplink: &str,
    max_datagram: usize,
    now: Instant,
) -> LaneId {
    coloured_lane_up(e, site, uplink, Colour::Blue, max_datagram, now)
}

/// Brings up a lane of `site` over `uplink` in `colour` at `now`, sampled as live.
fn coloured_lane_up(
    e: &mut DataPath,
    site: &str,
    uplink: &str,
    colour: Colour,
    max_datagram: usize,
    now: Instant,
) -> LaneId {
    let up = LaneUp {
        site,
        uplink,
        colour,
        rank: 0,
        rate_kbps: None,
    };
    let id = e.handle_lane_up(up, now).expect("known site");
    e.handle_lane_sample(id, sample(max_datagram, 1), now);
    id
}

/// A lane over a fresh uplink, at time zero.
fn up(e: &mut DataPath, site: &str, max_datagram: usize) -> LaneId {
    let uplink = format!("up{}", e.lanes.len());
    lane_up(e, site, &uplink, max_datagram, Instant::ZERO)
}

/// Hands `packet` in as read from the TUN device.
pub fn send(e: &mut DataPath, packet: &[u8], now: Instant) {
    let mut datagram = BytesMut::zeroed(DATAGRAM_HEADER_LEN);
    datagram.extend_from_slice(packet);
    e.handle_tun_packet(datagram, now);
}

fn transmits(e: &mut DataPath) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit()).collect()
}

/// Sends `packet` and returns the lane it went out on. Datagrams already waiting
/// to go (sent again from a lane given up) are let go first.
fn sent_on(e: &mut DataPath, packet: &[u8], now: Instant) -> Option<LaneId> {
    transmits(e);
    send(e, packet, now);
    let out = transmits(e);
    assert!(out.len() <= 1, "{out:?}");
    out.first().map(|t| t.lane)
}

/// A TCP SYN with DF set from the server side towards site a's host.
fn to_site_a() -> Vec<u8> {
    let mut pkt = tcp_syn_v4(1460);
    // swap source and destination: 198.19.0.2 -> 198.18.0.2
    let (s, d) = (pkt[12..16].to_vec(), pkt[16..20].to_vec());
    pkt[12..16].copy_from_slice(&d);
    pkt[16..20].copy_from_slice(&s);
    let mut header = etherparse::Ipv4Header::from_slice(&pkt).expect("v4").0;
    header.dont_fragment = true;
    header.header_checksum = header.calc_header_checksum();
    header.write(&mut &mut pkt[..20]).expect("write");
    pkt
}

/// `packet` behind a datagram header carrying `seq` and no flow gap.
fn datagram(seq: u32, packet: &[u8]) -> Bytes {
    striped_datagram(seq, 0, packet)
}

/// `packet` behind a datagram header carrying `seq` and `gap`.
fn striped_datagram(seq: u32, gap: u16, packet: &[u8]) -> Bytes {
    let mut d = vec![0; DATAGRAM_HEADER_LEN];
    write_datagram_header(
        &mut d,
        DatagramHeader {
            seq,
            gap,
            copy: false,
            lane_seq: 0,
        },
    );
    d.extend_from_slice(packet);
    Bytes::from(d)
}

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
        DataPath::new(EngineConfig {
            shard: Shard { index, count: 2 },
            ..config(Role::Exit, Algorithm::RoundRobin)
        })
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
    assert!(!got(11, &flow_y), "another flow's order is its own");
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
fn a_lane_that_falls_silent_is_not_scheduled_from_exactly_the_stall_time() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // b hears from its peer until 100 ms, a keeps hearing.
    for t in [50, 100] {
        e.handle_lane_sample(a, sample(1400, t), at(t));
        e.handle_lane_sample(b, sample(1400, t), at(t));
    }
    e.handle_lane_sample(a, sample(1400, 300), at(300));
    e.handle_lane_sample(b, sample(1400, 100), at(300));
    e.handle_timeout(at(450));
    assert_eq!(e.timers.get(Timer::StallCheck), Some(at(100) + LANE_STALL));
    e.handle_timeout(at(499));
    let lanes: Vec<_> = (0..2)
        .filter_map(|_| sent_on(&mut e, &pkt, at(499)))
        .collect();
    assert!(lanes.contains(&b), "one nanosecond early b is still up");
    // The deadline passes with the last sample 200 ms old: the engine asks for a
    // fresh one before it gives b up.
    e.handle_timeout(at(500));
    assert_eq!(e.lanes_up(), 2);
    assert!(e.wants_lane_samples(at(500)));
    assert!(e.poll_timeout().is_some_and(|due| due <= at(500)));
    e.handle_lane_sample(a, sample(1400, 500), at(500));
    e.handle_lane_sample(b, sample(1400, 100), at(500));
    e.handle_timeout(at(500));
    for _ in 0..4 {
        assert_eq!(sent_on(&mut e, &pkt, at(500)), Some(a));
    }
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(
        e.lane(b).map(|l| l.state_since),
        Some(at(500)),
        "down since"
    );
    // Its peer is heard again, and what was handed to b has left: b is back.
    e.handle_lane_sample(b, drained(&e, b, 101), at(520));
    assert_eq!(e.lane(b).map(|l| l.state_since), Some(at(520)), "up since");
    let lanes: Vec<_> = (0..2)
        .filter_map(|_| sent_on(&mut e, &pkt, at(520)))
        .collect();
    assert!(lanes.contains(&b));
}

/// Round-robin over lanes a and b over `span` (ms), a packet every 10 ms each,
/// sampled before every send; b's peer answers at the instants `b_heard` says,
/// quinn transmits b's packets once `b_sends` says so, and takes them out of
/// braid's queue at once if `b_drains`. Returns the last instant b was picked.
fn run_two_lanes(
    e: &mut DataPath,
    (a, b): (LaneId, LaneId),
    span: std::ops::RangeInclusive<u64>,
    b_heard: impl Fn(u64) -> bool,
    b_sends: impl Fn(u64) -> bool,
    b_drains: bool,
) -> Option<u64> {
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let (mut b_rx, mut b_last) = (*span.start(), None);
    let handed = |lane| drained(e, lane, 0).transmitted_datagrams;
    let (mut a_handed, mut b_handed) = (handed(a), handed(b));
    let mut b_transmitted = b_handed;
    for t in span.step_by(10) {
        b_rx += u64::from(b_heard(t));
        if b_sends(t) {
            b_transmitted = b_handed;
        }
        let a_sample = LaneSample {
            transmitted_datagrams: a_handed,
            ..sample(1400, t)
        };
        // What b was handed left braid's queue for quinn's, or stays in braid's.
        let b_dequeued = if b_drains {
            drained(e, b, 0).dequeued_bytes
        } else {
            0
        };
        let b_sample = LaneSample {
            transmitted_datagrams: b_transmitted,
            dequeued_bytes: b_dequeued,
            ..sample(1400, b_rx)
        };
        e.handle_lane_sample(a, a_sample, at(t));
        e.handle_lane_sample(b, b_sample, at(t));
        e.handle_timeout(at(t));
        for _ in 0..2 {
            match sent_on(e, &pkt, at(t)) {
                Some(lane) if lane == b => {
                    b_last = Some(t);
                    b_handed += 1;
                }
                Some(_) => a_handed += 1,
                None => {}
            }
        }
    }
    b_last
}

#[test]
fn a_busy_lane_whose_packets_go_unanswered_is_given_up_within_one_timeout() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    // b's path dies after 100 ms; its packet of 100 ms is the first unanswered,
    // seen on the wire at the sample of 110 ms, its successors every 10 ms. Its
    // samples report its packets still queued (it holds more than it sent): it
    // cannot probe, and one answer timeout of silence suffices, before four
    // failed exchanges would.
    let failed_after = exchange_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(
        failed_after, 45,
        "a 20 ms round trip, the peer's ACK delay, slack"
    );
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let decisive = 100 + 10 * EXCHANGES_TO_STALL_WHEN_HELD + failed_after;
    let b_last = run_two_lanes(&mut e, (a, b), 10..=400, |t| t <= 100, |_| true, false);
    assert_eq!(
        b_last,
        Some((100 + timeout) / 10 * 10),
        "b is given up at the first sample {timeout} ms after its wait began (100 ms), \
         before four failed exchanges ({decisive} ms), long before the idle bound of \
         {LANE_STALL:?}"
    );
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
    let stalled = e.poll_lane_service();
    assert_eq!(
        stalled,
        Some((
            b,
            LaneService::Stalled {
                silent_for: Duration::from_millis(70),
                unanswered: 7,
                pings: 0,
                // None: its queue is never empty, and what leaves it counts.
                probes: 0,
                // Every packet b was handed (its samples report none dequeued).
                queued: 2368,
                resent: 9,
                srtt: Duration::from_millis(20),
            }
        )),
        "why, for the log: heard last at 100 ms, given up at the sample of 170 ms, \
         its packets of 100 to 160 ms unanswered"
    );
    assert_eq!(e.poll_lane_service(), None, "once");
    // Its peer is heard again, but packets handed to b before the outage are still
    // inside quinn: they would arrive late, so b waits until they have left.
    let stuck = LaneSample {
        quinn_queued_bytes: 200,
        ..drained(&e, b, 1000)
    };
    e.handle_lane_sample(b, stuck, at(410));
    assert_eq!(e.lanes_up(), 1);
    assert_eq!(e.poll_lane_service(), None, "not back yet");
    e.handle_lane_sample(b, drained(&e, b, 1001), at(420));
    assert_eq!(e.lanes_up(), 2);
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1), "one stall");
    assert_eq!(
        e.poll_lane_service(),
        Some((
            b,
            LaneService::Back {
                out_for: Duration::from_millis(250)
            }
        ))
    );
}

#[test]
fn a_lane_answered_within_its_timeout_stays_up_however_sparse_the_answers() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    // An answer every 60 ms: a packet waits at most 60 ms for one (timeout: 65).
    // quinn takes what b is handed, so that braid's queue for it stays empty.
    let b_last = run_two_lanes(&mut e, (a, b), 10..=2000, |t| t % 60 == 0, |_| true, true);
    assert_eq!(b_last, Some(2000));
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
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
fn one_unanswered_packet_is_a_loss_until_two_timeouts_pass_in_silence() {
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // One packet, sent at 100 ms: it or its acknowledgement is lost. The peer's
    // next keep-alive, at 200 ms, is heard (within two timeouts): a loss.
    // With `probes_leave` false, braid's probes stay in the lane's queue (quinn
    // holds them): a lane holding only probes is not full of the flows' packets,
    // and still gets two timeouts.
    let lone_packet = |heard_again: u64, probes_leave: bool| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        e.handle_lane_sample(b, sample(1400, 100), at(100));
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
        let packet_left = drained(&e, b, 100);
        let mut up = Vec::new();
        for t in (110..=400).step_by(10) {
            let rx = if t >= heard_again { t } else { 100 };
            let sent = if probes_leave {
                drained(&e, b, rx)
            } else {
                LaneSample {
                    rx_datagrams: rx,
                    ..packet_left
                }
            };
            e.handle_lane_sample(b, sent, at(t));
            e.handle_timeout(at(t));
            up.push(e.lanes_up());
        }
        up
    };
    assert!(
        lone_packet(200, true).iter().all(|&n| n == 1),
        "{:?}",
        lone_packet(200, true)
    );
    // Silent past two timeouts: given up at the first sample after 100 + 2 × 65 ms.
    for probes_leave in [true, false] {
        let up = lone_packet(1000, probes_leave);
        let given_up_at = 110 + 10 * up.iter().position(|&n| n == 0).expect("given up") as u64;
        assert_eq!(
            given_up_at,
            (100 + 2 * timeout).div_ceil(10) * 10,
            "probes leave: {probes_leave}, {up:?}"
        );
    }
}

#[test]
fn a_lane_whose_window_is_full_when_its_path_dies_is_given_up_after_one_timeout() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // b's path dies at 100 ms with its congestion window full of packets it lost:
    // quinn sends nothing more but one probe, at 160 ms.
    let (mut b_last, mut b_on_the_wire) = (None, 0);
    for t in (10..=400).step_by(10) {
        let b_handed = drained(&e, b, 0).transmitted_datagrams;
        if t <= 100 {
            b_on_the_wire = b_handed;
        } else if t == 160 {
            b_on_the_wire += 1;
        }
        let b_sample = LaneSample {
            transmitted_datagrams: b_on_the_wire,
            ..sample(1400, t.min(100))
        };
        e.handle_lane_sample(a, drained(&e, a, t), at(t));
        e.handle_lane_sample(b, b_sample, at(t));
        e.handle_timeout(at(t));
        for _ in 0..2 {
            if sent_on(&mut e, &pkt, at(t)) == Some(b) {
                b_last = Some(t);
            }
        }
    }
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(
        b_last,
        Some(160),
        "its first unanswered packet left just after 100 ms (behind the packet queued \
         before it); quinn holds its packets, so at the first timeout ({timeout} ms) one \
         unanswered packet, the probe, is enough: given up at the sample of 170 ms, \
         long before the idle bound"
    );
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
}

#[test]
fn a_lane_whose_queue_is_stuck_when_its_path_dies_waits_for_quinns_probe_not_the_idle_bound() {
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Ten packets handed by 100 ms, five of them on the wire when the peer is last
    // heard; nothing is handed after that (the scheduler avoids the full lane).
    // quinn sends a probe (a PING) at `probe_at`, or none.
    let given_up_at = |probe_at: Option<u64>| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        for _ in 0..10 {
            assert_eq!(sent_on(&mut e, &pkt, at(90)), Some(b));
        }
        for t in (100..=600).step_by(10) {
            let stuck = LaneSample {
                transmitted_datagrams: 5,
                sent_pings: u64::from(probe_at.is_some_and(|p| t >= p)),
                ..sample(1400, t.min(100))
            };
            e.handle_lane_sample(b, stuck, at(t));
            e.handle_timeout(at(t));
            if e.lanes_up() == 0 {
                return Some(t);
            }
        }
        None
    };
    assert_eq!(
        given_up_at(Some(150)),
        Some((100 + timeout).div_ceil(10) * 10),
        "the wait for the stuck packets begins when the peer is last heard, and the \
         probe goes unanswered for a timeout (quinn holds the packets)"
    );
    assert_eq!(given_up_at(None), Some(100 + LANE_STALL.as_millis() as u64));
}

#[test]
fn a_lane_given_up_has_what_its_path_may_have_lost_sent_again_over_the_others() {
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Lanes a and (when `with_a`) b, a packet each every 10 ms; b's path dies at
    // 100 ms. Returns what b was handed and what went out at b's stall.
    let run = |with_a: bool| {
        let mut e = engine(Role::Entry, Algorithm::RoundRobin);
        let a = with_a.then(|| lane_up(&mut e, "a", "dsl", 1400, at(0)));
        let b = lane_up(&mut e, "a", "lte", 1400, at(0));
        let (mut on_b, mut at_stall) = (Vec::new(), None);
        for t in (10..=300).step_by(10) {
            if let Some(a) = a {
                e.handle_lane_sample(a, drained(&e, a, t), at(t));
            }
            e.handle_lane_sample(b, drained(&e, b, t.min(100)), at(t));
            e.handle_timeout(at(t));
            if e.lane(b).is_some_and(|l| l.counters.stalls == 1) && at_stall.is_none() {
                at_stall = Some((t, transmits(&mut e)));
            }
            for _ in 0..2 {
                send(&mut e, &pkt, at(t));
                on_b.extend(
                    transmits(&mut e)
                        .into_iter()
                        .filter(|x| x.lane == b && x.datagram[..] != PROBE)
                        .map(|x| (t, x.datagram)),
                );
            }
        }
        let resent = e.lane(b).map(|l| l.counters.resent);
        (a, on_b, at_stall, resent)
    };
    let (a, on_b, at_stall, resent) = run(true);
    let (t, again) = at_stall.expect("b given up");
    assert_eq!(
        t, 210,
        "45 ms after its sixth unanswered transmission (160 ms), at the next sample"
    );
    // Heard last at 100 ms with a 20 ms SRTT: what b was handed from 80 ms on may
    // be lost; it goes to a, in order, with the same sequence numbers for the
    // site and the next ones of a's own.
    let expected: Vec<_> = on_b
        .iter()
        .filter(|(t, _)| *t >= 80)
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(expected.len(), 13);
    assert!(again.iter().all(|x| Some(x.lane) == a), "{again:?}");
    let a_next = split_datagram(&again[0].datagram)
        .expect("header")
        .0
        .lane_seq;
    for (i, (x, d)) in again.iter().zip(&expected).enumerate() {
        let (header, packet) = split_datagram(&x.datagram).expect("header");
        let (original, original_packet) = split_datagram(d).expect("header");
        assert_eq!((header.seq, header.gap), (original.seq, original.gap));
        assert!(header.copy && !original.copy);
        assert_eq!(header.lane_seq, a_next.wrapping_add(i as u16));
        assert_eq!(packet, original_packet);
    }
    assert_eq!(again.len(), expected.len());
    assert_eq!(resent, Some(13));
    // With no other lane there is nowhere to send them.
    let (_, _, at_stall, resent) = run(false);
    assert!(at_stall.expect("b given up").1.is_empty());
    assert_eq!(resent, Some(0));
}

/// `packet` behind a datagram header carrying `seq`, no flow gap and `lane_seq`.
fn laned_datagram(seq: u32, lane_seq: u16, packet: &[u8]) -> Bytes {
    let mut d = vec![0; DATAGRAM_HEADER_LEN];
    let header = DatagramHeader {
        seq,
        gap: 0,
        copy: false,
        lane_seq,
    };
    write_datagram_header(&mut d, header);
    d.extend_from_slice(packet);
    Bytes::from(d)
}

#[test]
fn a_run_of_packets_missing_on_a_lane_is_reported_back_on_it_once() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("203.0.113.1", 80, "198.18.0.2", 1);
    let mut receive = |lane, seq, lane_seq| {
        e.handle_lane_datagram(lane, laned_datagram(seq, lane_seq, &pkt), at(1));
        transmits(&mut e)
            .into_iter()
            .map(|t| (t.lane, LossReport::decode(&t.datagram)))
            .collect::<Vec<_>>()
    };
    let report = |first, count| Some(LossReport { first, count });
    assert!(
        receive(a, 0, 7).is_empty(),
        "the first sets where the lane is"
    );
    assert!(receive(a, 1, 8).is_empty());
    assert_eq!(receive(a, 2, 11), [(a, report(9, 2))]);
    // What comes late, a copy, or the next in line is no loss.
    assert!(receive(a, 3, 9).is_empty());
    assert!(receive(a, 4, 11).is_empty());
    assert!(receive(a, 5, 12).is_empty());
    // Each lane counts for itself, across the wrap.
    assert!(receive(b, 6, 65_534).is_empty());
    assert_eq!(receive(b, 7, 1), [(b, report(65_535, 2))]);
    // The longest run reported; a longer one is an outage, not reported.
    assert_eq!(receive(a, 8, 13 + 64), [(a, report(13, 64))]);
    assert!(receive(a, 9, 78 + 65).is_empty());
    assert!(receive(a, 10, 144).is_empty());
    let reported = |l| e.lane(l).map(|l| l.counters.loss_reported);
    assert_eq!((reported(a), reported(b)), (Some(66), Some(2)));
    // Every packet was passed on, reported or not.
    assert_eq!(std::iter::from_fn(|| e.poll_tun_write()).count(), 11);
}

#[test]
fn packets_a_lane_lost_are_sent_again_over_the_lane_where_they_arrive_first() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    // Far more than a lane's window at once: the flow is striped.
    let (mut on_a, mut on_b) = (Vec::new(), 0u16);
    for _ in 0..1000 {
        send(&mut e, &pkt, at(1));
        for t in transmits(&mut e) {
            if t.lane == a {
                on_a.push(t.datagram);
            } else {
                on_b += 1;
            }
        }
    }
    let header = |d: &Bytes| split_datagram(d).expect("header").0;
    assert!(
        on_a.iter()
            .enumerate()
            .all(|(i, d)| usize::from(header(d).lane_seq) == i),
        "a numbers what it carries"
    );
    // The flow's first packets went before it was striped, without a gap.
    let striped = on_a
        .iter()
        .position(|d| header(d).gap != 0)
        .expect("striped");
    assert!(striped > 0 && header(&on_a[striped + 1]).gap != 0);
    let mut report = |first: usize, count| {
        let first = u16::try_from(first).expect("few");
        let datagram = Bytes::copy_from_slice(&LossReport { first, count }.encode());
        e.handle_lane_datagram(a, datagram, at(15));
        transmits(&mut e)
    };
    // Of a run from the last packet without a gap, the two the receiver holds
    // the flow for go again: oldest first, over b, in b's numbering.
    let again = report(striped - 1, 3);
    assert_eq!(again.len(), 2, "{again:?}");
    for (i, t) in again.iter().enumerate() {
        assert_eq!(t.lane, b);
        let (resent, packet) = split_datagram(&t.datagram).expect("header");
        let (original, original_packet) = split_datagram(&on_a[striped + i]).expect("header");
        assert_eq!((resent.seq, resent.gap), (original.seq, original.gap));
        assert!(resent.copy && !original.copy);
        assert_eq!(resent.lane_seq, on_b + i as u16, "b's next");
        assert_eq!(packet, original_packet);
    }
    // Packets a did not carry are not sent.
    assert!(report(on_a.len(), 5).is_empty());
    let repaired = |l| e.lane(l).map(|l| l.counters.loss_repaired);
    assert_eq!((repaired(a), repaired(b)), (Some(2), Some(0)));
}

#[test]
fn a_lane_whose_traffic_stops_lets_go_of_the_datagrams_it_kept() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for _ in 0..5 {
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
    }
    let kept = |e: &DataPath, t: u64| {
        let l = e.lanes[b.0 as usize].as_ref().expect("lane");
        (t, l.recent.len(), l.recent_bytes)
    };
    // Heard all along; samples only, every 100 ms, no more traffic.
    let mut seen = Vec::new();
    for t in (200..=700).step_by(100) {
        e.handle_lane_sample(b, drained(&e, b, t), at(t));
        seen.push(kept(&e, t));
    }
    let window = 100 + RESEND_WINDOW.as_millis() as u64;
    for (t, n, bytes) in seen {
        let expected = if t <= window { 5 } else { 0 };
        assert_eq!(n, expected, "at {t} ms");
        assert_eq!(bytes == 0, expected == 0, "at {t} ms");
    }
}

/// Lane b alone, heard until 100 ms, is handed `burst` packets at 100 ms, which
/// leave at once; it is sampled and its timers run every millisecond, its probes
/// leave at once too, and its peer is heard again from `heard_again` (ms) on. Returns
/// when b sent probes, and when it was given up.
fn probed(burst: usize, heard_again: u64) -> (Vec<u64>, Option<u64>) {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    e.handle_lane_sample(b, drained(&e, b, 100), at(100));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    for _ in 0..burst {
        assert_eq!(sent_on(&mut e, &pkt, at(100)), Some(b));
    }
    let mut probes = Vec::new();
    for t in 101..=600 {
        let rx = if t >= heard_again { t } else { 100 };
        e.handle_lane_sample(b, drained(&e, b, rx), at(t));
        e.handle_timeout(at(t));
        if e.lanes_up() == 0 {
            assert_eq!(
                e.lane(b).map(|l| l.counters.probes_sent),
                Some(probes.len() as u64)
            );
            return (probes, Some(t));
        }
        for x in transmits(&mut e) {
            assert_eq!((x.lane, &x.datagram[..]), (b, &PROBE[..]), "only probes");
            probes.push(t);
        }
    }
    (probes, None)
}

#[test]
fn a_lane_whose_answer_is_overdue_probes_and_is_given_up_after_six_failed_exchanges() {
    let srtt = Duration::from_millis(20);
    let overdue = 100 + (srtt + PEER_ACK_DELAY).as_millis() as u64;
    let failed_after = exchange_timeout(srtt).as_millis() as u64;
    let every = PROBE_INTERVAL.as_millis() as u64;
    // One packet, seen on the wire at 101 ms, then probes from when its answer is
    // overdue: the fifth, seen at the sample after it, is the sixth exchange.
    let (probes, given_up) = probed(1, 1000);
    let decisive = overdue + 4 * every + 1;
    assert_eq!(given_up, Some(decisive + failed_after));
    let expected: Vec<u64> = (overdue..given_up.unwrap_or(0))
        .step_by(every as usize)
        .collect();
    assert_eq!(
        probes, expected,
        "every {every} ms from {overdue} ms until given up"
    );
    assert_eq!(given_up, Some(191), "on a dead path, within 5 round trips");
    // A burst that leaves at once is answered by one acknowledgement: its loss is
    // one failed exchange, not six, and the probes make up the rest.
    assert_eq!(probed(6, 1000), (expected, given_up));
    // Answered before the sixth exchange fails (five of them lost, each packet or
    // its acknowledgement, as on a lossy path): b stays up, and probing stops.
    let (probes, given_up) = probed(1, 190);
    assert_eq!(given_up, None);
    assert_eq!(probes.last(), Some(&185));
    // A lane that is heard sends no probe.
    assert_eq!(probed(1, 110), (vec![], None));
}

#[test]
fn a_probe_is_counted_and_dropped_by_the_receiving_gateway() {
    let mut e = engine(Role::Exit, Algorithm::RoundRobin);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    e.handle_lane_datagram(lane, Bytes::from_static(&PROBE), at(1));
    // Padded, as a lane opening its window sends it.
    e.handle_lane_datagram(lane, Bytes::from_static(&PROBE_PADDING[..1200]), at(1));
    let counters = e.lane(lane).map(|l| *l.counters);
    assert_eq!(
        counters.map(|c| (c.probes_received, c.rx_packets)),
        Some((2, 0))
    );
    assert_eq!(e.poll_tun_write(), None);
    assert!(
        DropReason::ALL.iter().all(|r| e.dropped(*r) == 0),
        "not a drop"
    );
}

#[test]
fn a_lane_in_its_first_slow_start_is_padded_while_a_lane_with_a_larger_window_queues() {
    let mut e = engine(Role::Exit, Algorithm::Single);
    let short = up(&mut e, "a", 1400);
    let up = LaneUp {
        site: "a",
        uplink: "lte",
        colour: Colour::Blue,
        rank: 1,
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
    let mut e = DataPath::new(EngineConfig {
        warm_up_lanes: true,
        ..config(Role::Exit, Algorithm::Afmt)
    });
    let mut up = |uplink, colour, rate_kbps| {
        let up = LaneUp {
            site: "a",
            uplink,
            colour,
            rank: 0,
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

#[test]
fn a_packet_quinn_holds_back_is_not_waiting_for_an_answer() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let a = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let b = lane_up(&mut e, "a", "lte", 1400, at(0));
    // b's congestion window holds its packets from 100 ms to 300 ms (quinn waits
    // for a loss to be declared); its peer answers whatever b sends.
    let sends = |t| !(100..300).contains(&t);
    let b_last = run_two_lanes(&mut e, (a, b), 10..=1000, sends, sends, false);
    assert_eq!(b_last, Some(1000));
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(0));
    // Packets that do leave and get no answer still count.
    let b_last = run_two_lanes(&mut e, (a, b), 1010..=1200, |t| t <= 1050, |_| true, false);
    let timeout = answer_timeout(Duration::from_millis(20)).as_millis() as u64;
    assert_eq!(b_last, Some((1050 + timeout) / 10 * 10), "{b_last:?}");
    assert_eq!(e.lane(b).map(|l| l.counters.stalls), Some(1));
}

#[test]
fn a_reconnected_lane_replaces_the_old_one_which_is_closed_and_never_revived() {
    let mut e = engine(Role::Entry, Algorithm::RoundRobin);
    let old = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let other = lane_up(&mut e, "a", "lte", 1400, at(0));
    assert_eq!(e.poll_lane_close(), None, "another uplink replaces nothing");
    let new = lane_up(&mut e, "a", "dsl", 1400, at(10));
    assert_eq!(e.poll_lane_close(), Some((old, LaneClose::Replaced)));
    assert_eq!(e.poll_lane_close(), None);
    // The old connection still reports life until it is closed: it stays out.
    e.handle_lane_sample(old, sample(1400, 99), at(20));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    let mut used: Vec<_> = (0..4)
        .filter_map(|_| sent_on(&mut e, &pkt, at(20)))
        .collect();
    used.sort();
    used.dedup();
    assert_eq!(used, [other, new]);
    e.handle_lane_closed(old);
    assert!(e.lane(old).is_none());
}

#[test]
fn a_lane_queue_holds_at_most_its_limit_until_the_lane_sends() {
    let mut cfg = config(Role::Entry, Algorithm::RoundRobin);
    cfg.lane_queue_limit = 3 * (DATAGRAM_HEADER_LEN as u64 + 140);
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
    let (e, drops, sent) = run_lanes(Algorithm::RoundRobin, 1, 1, ms, arriving);
    (e, drops.into_iter().map(|(t, _)| t).collect(), sent)
}

/// [`run_lane`] over `count` such lanes of one site, scheduled by `algorithm`,
/// with the packets of `flows` flows in turn. Answers each of CoDel's drops as
/// the millisecond and the flow's index.
fn run_lanes(
    algorithm: Algorithm,
    count: usize,
    flows: u16,
    ms: u64,
    arriving: impl Fn(u64) -> u64,
) -> (DataPath, Vec<(u64, u16)>, u64) {
    let mut e = engine(Role::Entry, algorithm);
    let lanes: Vec<LaneId> = (0..count)
        .map(|i| lane_up(&mut e, "a", &format!("up{i}"), 1400, at(0)))
        .collect();
    let (drops, sent) = drive_lanes(&mut e, &lanes, flows, ms, arriving);
    (e, drops, sent)
}

/// The traffic of [`run_lanes`] through `lanes`, already up.
fn drive_lanes(
    e: &mut DataPath,
    lanes: &[LaneId],
    flows: u16,
    ms: u64,
    arriving: impl Fn(u64) -> u64,
) -> (Vec<(u64, u16)>, u64) {
    let count = lanes.len();
    let packets: Vec<Vec<u8>> = (1..=flows)
        .map(|port| tcp_v4("198.18.0.2", port, "203.0.113.1", 80))
        .collect();
    let datagram = DATAGRAM_HEADER_LEN as u64 + packets[0].len() as u64;
    let (mut handed, mut dequeued) = (vec![0; count], vec![0; count]);
    let mut drops = Vec::new();
    let mut next_flow = 0;
    for t in 1..ms {
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
        let (e, drops, _) = run_lanes(Algorithm::Afmt, lanes, flows, 1_000, standing);
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
    let (drops, _) = drive_lanes(&mut e, &lanes, 1, 1_000, arriving);
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

#[test]
fn new_scheduler_settings_take_over_from_the_next_packet() {
    let mut e = engine(Role::Entry, Algorithm::Afmt);
    let lane = lane_up(&mut e, "a", "dsl", 1400, at(0));
    let pkt = tcp_v4("198.18.0.2", 1, "203.0.113.1", 80);
    send(&mut e, &pkt, at(1));
    send(&mut e, &pkt, at(2));
    assert_eq!(e.flows_active(), 1);
    e.handle_scheduler_config(Algorithm::RoundRobin, Duration::from_secs(10), 100);
    assert_eq!(e.flows_active(), 0, "round-robin keeps no flows");
    send(&mut e, &pkt, at(3));
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

/// An IPv4 `packet` with its DSCP set to `dscp`.
fn with_dscp(mut packet: Vec<u8>, dscp: u8) -> Vec<u8> {
    let mut header = etherparse::Ipv4Header::from_slice(&packet).expect("v4").0;
    header.dscp = etherparse::IpDscp::try_new(dscp).expect("a DSCP");
    header.header_checksum = header.calc_header_checksum();
    header.write(&mut &mut packet[..20]).expect("write");
    packet
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

/// One second over one uplink of known rate (10 Mbit/s): four blue flows offering
/// 11 Mbit/s as the uplink counts it, one packet a millisecond, and an EF packet
/// every 20 ms. Returns the green packets' waits and the blue bytes sent in the
/// last half second. The AQM of flat best effort's FIFO drops green as well as
/// blue (blue does not slow down), and DSD green that cannot leave in time.
fn shaped_uplink(scheduler: AbeScheduler) -> (Vec<Duration>, u64) {
    let mut cfg = config(Role::Entry, Algorithm::Afmt);
    cfg.abe.scheduler = scheduler;
    let mut e = DataPath::new(cfg);
    let lanes = Colour::ALL.map(|colour| {
        let up = LaneUp {
            site: "a",
            uplink: "dsl",
            colour,
            rank: 0,
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
        if e.wants_lane_samples(now) {
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
        if e.wants_lane_samples(at(t)) {
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
