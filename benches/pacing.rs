//! Cost of per-application pacing with 10,000 applications (issue 4, benchmark 3):
//! classifying a packet (cached flow; a new flow with the rules indexed by remote
//! port, and with port ranges, which are tested one by one), a
//! packet through a paced queue (enqueue plus release by the calendar), and parsing
//! plus applying a 10,000-application table. `cargo bench --bench pacing`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use braid::core::app_pacing::AppPacing;
use braid::core::classify::Classifier;
use braid::core::engine::SiteIdx;
use braid::core::pacer::Enqueued;
use braid::core::pacing_table::{AppIdx, Direction, PacingTable};
use braid::core::packet::PacketInfo;
use braid::core::time::Instant;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use etherparse::PacketBuilder;

const APPS: usize = 10_000;

/// A table of `APPS` applications, one UDP remote port each (or, with `ranges`, a
/// range of two ports each), 0.5 Mbit/s up.
fn table_json(ranges: bool) -> Vec<u8> {
    let apps: Vec<String> = (0..APPS)
        .map(|i| {
            let port = if ranges {
                format!("{}-{}", 10_000 + 2 * i, 10_001 + 2 * i)
            } else {
                (10_000 + i).to_string()
            };
            format!(
                r#"{{"name": "app{i}", "match": {{"proto": "udp", "remote_ports": "{port}"}}, "rate_up_kbps": 500}}"#
            )
        })
        .collect();
    format!(r#"{{"version": 1, "apps": [{}]}}"#, apps.join(",")).into_bytes()
}

/// A 1000-byte UDP packet from the site to remote port `port`.
fn packet(port: u16) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4([198, 18, 1, 2], [198, 18, 100, 2], 64)
        .udp(40_000, port)
        .write(&mut out, &[0; 972])
        .unwrap();
    out
}

fn benches(c: &mut Criterion) {
    let json = table_json(false);
    let table = PacingTable::parse(&json).unwrap();
    let infos: Vec<PacketInfo> = (0..APPS)
        .map(|i| PacketInfo::parse(&packet(10_000 + i as u16)).unwrap())
        .collect();
    let site = SiteIdx(0);
    let new_pacing = || {
        let mut p = AppPacing::<u32>::new(1, Direction::Up, None, Duration::from_secs(60), 100_000);
        p.apply(site, table.clone(), Instant::ZERO, |_| {});
        p
    };

    let classifier = Classifier::new(&table);
    let last = &infos[APPS - 1];
    c.bench_function(
        "classify a new flow, 10k single-port rules, match at the last",
        |b| b.iter(|| black_box(classifier.classify(black_box(last), Direction::Up))),
    );
    let ranges = Classifier::new(&PacingTable::parse(&table_json(true)).unwrap());
    let last = PacketInfo::parse(&packet(10_000 + 2 * (APPS as u16 - 1))).unwrap();
    c.bench_function(
        "classify a new flow, 10k port-range rules, match at the last",
        |b| b.iter(|| black_box(ranges.classify(black_box(&last), Direction::Up))),
    );

    let mut pacing = new_pacing();
    for info in &infos {
        pacing.classify(site, info, Direction::Up, Instant::ZERO);
    }
    let mut i = 0;
    c.bench_function("classify a known flow (cache hit), 10k apps", |b| {
        b.iter(|| {
            i = (i + 1) % APPS;
            black_box(pacing.classify(site, &infos[i], Direction::Up, Instant::ZERO))
        })
    });

    // Two packets for each of the 10,000 queues (0.5 Mbit/s: the second waits 16 ms
    // behind the first), then everything released through the calendar.
    let mut group = c.benchmark_group("paced packets");
    group.throughput(Throughput::Elements(2 * APPS as u64));
    group.bench_function("enqueue + release, 2 per queue, 10k queues", |b| {
        b.iter_batched(
            new_pacing,
            |mut pacing| {
                for round in 0..2 {
                    for n in 0..APPS {
                        let t = Instant::from_nanos((round * APPS + n) as u64);
                        match pacing.enqueue(site, AppIdx(n as u32 + 1), false, 1, 1000, t) {
                            Enqueued::Dropped(_) | Enqueued::Standing(_) => {
                                panic!("the queues hold 16 KiB")
                            }
                            Enqueued::Now(_) | Enqueued::Queued => {}
                        }
                    }
                }
                let mut released = 0u32;
                pacing.release(Instant::from_nanos(1_000_000_000), |_, _, _| released += 1);
                assert_eq!(released, APPS as u32);
                pacing
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();

    c.bench_function("parse + apply a 10k-application table", |b| {
        let mut pacing = new_pacing();
        let mut version = 1;
        b.iter(|| {
            version += 1;
            let mut t = PacingTable::parse(&json).unwrap();
            t.version = version;
            pacing.apply(site, t, Instant::ZERO, |_| {});
        })
    });
}

criterion_group! {
    name = pacing;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(pacing);
