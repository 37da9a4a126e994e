//! A fixed per-packet workload for instruction counts, repeatable where timings on a
//! shared machine are not (`integration/bench_throughput.py --callgrind` runs it under
//! `valgrind --tool=callgrind`): N TCP segments of 1400 bytes in four flows through
//! an entry's data path onto three lanes, and every datagram it sends through an
//! exit's data path to its TUN queue. Both engines as the shell drives them, with
//! lane samples every millisecond; nothing but the pure core.
//!
//!     cargo run --release --example per_packet -- [N]
// A benchmark driver: a failed setup is a failed run.
#![allow(clippy::expect_used)]

use std::time::Duration;

use braid::core::engine::{DataPath, EngineConfig, LaneUp, Role, SiteIdx, SiteSpec, UplinkPolicy};
use braid::core::lane::{Colour, LaneId, LaneSample};
use braid::core::sched::Algorithm;
use braid::core::time::Instant;
use braid::core::wire::DATAGRAM_HEADER_LEN;
use bytes::BytesMut;

const UPLINKS: [&str; 3] = ["dsl", "cable", "lte"];

fn engine(role: Role) -> DataPath {
    let prefixes = match role {
        Role::Entry => Vec::new(),
        Role::Exit => vec!["198.18.1.0/24".parse().expect("prefix")],
    };
    DataPath::new(
        EngineConfig::builder()
            .role(role)
            .sites(vec![SiteSpec {
                id: "site1".into(),
                prefixes,
            }])
            .tun_mtu(1426)
            .algorithm(Algorithm::Afmt)
            .flow_idle_timeout(Duration::from_secs(30))
            .max_flows(4096)
            // Only the packets measured cross the lanes.
            .warm_up_lanes(false)
            .build(),
    )
}

/// The blue lanes of every uplink, up at time zero.
fn lanes(e: &mut DataPath) -> Vec<LaneId> {
    UPLINKS
        .iter()
        .enumerate()
        .map(|(rank, uplink)| {
            let up = LaneUp {
                site: "site1",
                uplink,
                colour: Colour::Blue,
                rank: rank as u32,
                policy: UplinkPolicy::default(),
                rate_kbps: None,
            };
            e.handle_lane_up(up, Instant::ZERO).expect("site1")
        })
        .collect()
}

/// A 1400-byte IPv4 TCP segment from the site's host, source port `port`.
fn segment(port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    etherparse::PacketBuilder::ipv4([198, 18, 1, 2], [198, 18, 100, 2], 64)
        .tcp(port, 5201, 1, 65535)
        .write(&mut out, &[0; 1360])
        .expect("segment");
    out
}

fn main() {
    let packets: u64 = std::env::args()
        .nth(1)
        .map_or(100_000, |n| n.parse().expect("a packet count"));
    let (mut entry, mut exit) = (engine(Role::Entry), engine(Role::Exit));
    let (entry_lanes, exit_lanes) = (lanes(&mut entry), lanes(&mut exit));
    let segments: Vec<Vec<u8>> = (0..4).map(|f| segment(40_000 + f)).collect();
    // What each entry lane was handed, to sample it as sent and answered.
    let mut handed = vec![(0u64, 0u64); entry_lanes.len()];
    // The lanes each engine wants sampled: every lane is then (they all carry).
    let mut due = Vec::new();
    let mut delivered = 0u64;
    for i in 0..packets {
        // 10 µs apart: about 1.1 Gbit/s.
        let now = Instant::from_nanos(i * 10_000);
        entry.lanes_to_sample(now, &mut due);
        if !due.is_empty() {
            for (k, &lane) in entry_lanes.iter().enumerate() {
                let sample = LaneSample {
                    srtt: Duration::from_millis(10 + 10 * k as u64),
                    cwnd: 1 << 20,
                    max_datagram: 1426,
                    rx_datagrams: i + 1,
                    dequeued_bytes: handed[k].1,
                    sent_packets: handed[k].0,
                    sent_bytes: handed[k].1,
                    transmitted_datagrams: handed[k].0,
                    ..LaneSample::default()
                };
                entry.handle_lane_sample(lane, sample, now);
            }
        }
        exit.lanes_to_sample(now, &mut due);
        if !due.is_empty() {
            for &lane in &exit_lanes {
                let sample = LaneSample {
                    srtt: Duration::from_millis(10),
                    cwnd: 1 << 20,
                    max_datagram: 1426,
                    rx_datagrams: i + 1,
                    ..LaneSample::default()
                };
                exit.handle_lane_sample(lane, sample, now);
            }
        }
        let mut datagram = BytesMut::with_capacity(DATAGRAM_HEADER_LEN + 1400);
        datagram.resize(DATAGRAM_HEADER_LEN, 0);
        datagram.extend_from_slice(&segments[(i % 4) as usize]);
        entry.handle_tun_packet(datagram, now);
        entry.handle_timeout(now);
        while let Some(t) = entry.poll_transmit() {
            let k = entry_lanes
                .iter()
                .position(|&l| l == t.lane)
                .expect("an entry lane");
            handed[k].0 += 1;
            handed[k].1 += t.datagram.len() as u64;
            exit.handle_lane_datagram(exit_lanes[k], t.datagram, now);
        }
        exit.handle_timeout(now);
        while exit.poll_tun_write().is_some() {
            delivered += 1;
        }
    }
    let dropped: u64 = braid::core::stats::DropReason::ALL
        .iter()
        .map(|&r| entry.dropped(r) + exit.dropped(r))
        .sum();
    println!(
        "{packets} packets, {delivered} delivered, {dropped} dropped, {} reordered",
        exit.reordered(SiteIdx(0))
    );
}
