//! Cost of the controller's allocation: the exact two-step solve (HiGHS) of one site
//! with 20, 60 and 120 applications of the five classes, over one 100 Mbit/s uplink
//! and over two of unequal delay; and the fast method over 1,000 sites of 20
//! applications each. `cargo bench --bench allocation`.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use braid::core::allocation::utility::DelayFunction;
use braid::core::allocation::{Problem, Uplink, catalogue, exact, fast};
use criterion::{Criterion, criterion_group, criterion_main};

fn uplink(name: &str, mbps: f64, base_ms: f64) -> Uplink {
    Uplink {
        name: name.to_string(),
        capacity_kbps: mbps * 1000.0,
        delay: DelayFunction::queue_from(base_ms, 0.5, 20.0),
    }
}

fn site<'a>(classes: &'a [catalogue::Class], uplinks: Vec<Uplink>, apps: usize) -> Problem<'a> {
    Problem {
        classes,
        uplinks,
        apps: (0..apps).map(|i| i % classes.len()).collect(),
        epsilon: 0.3,
    }
}

/// The fast method's least and total utility against the exact one's, on the sites
/// the exact solve is timed on.
fn gaps(classes: &[catalogue::Class]) {
    for apps in [20, 60, 120] {
        for uplinks in [
            vec![uplink("wan", 100.0, 2.0)],
            vec![uplink("dsl", 50.0, 10.0), uplink("lte", 50.0, 40.0)],
        ] {
            let n = uplinks.len();
            let p = site(classes, uplinks, apps);
            let e = exact::solve(&p, Duration::from_secs(60)).unwrap();
            let f = fast::solve(&p).unwrap();
            println!(
                "{apps} apps, {n} uplink(s): least utility exact {:.2} fast {:.2} (first step {:.2} / {:.2}), total exact {:.1} fast {:.1} ({:+.1} %)",
                e.min_utility,
                f.min_utility,
                e.first_min_utility,
                f.first_min_utility,
                e.total_utility,
                f.total_utility,
                100.0 * (f.total_utility - e.total_utility) / e.total_utility
            );
        }
    }
}

fn allocation(c: &mut Criterion) {
    let classes = catalogue::defaults().unwrap();
    gaps(&classes);
    let mut g = c.benchmark_group("exact");
    g.sample_size(10);
    for apps in [20, 60, 120] {
        let one = site(&classes, vec![uplink("wan", 100.0, 2.0)], apps);
        g.bench_function(format!("{apps} apps, one uplink"), |b| {
            b.iter(|| black_box(exact::solve(&one, Duration::from_secs(60)).unwrap()))
        });
        let two = site(
            &classes,
            vec![uplink("dsl", 50.0, 10.0), uplink("lte", 50.0, 40.0)],
            apps,
        );
        g.bench_function(format!("{apps} apps, two uplinks"), |b| {
            b.iter(|| black_box(exact::solve(&two, Duration::from_secs(60)).unwrap()))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("fast");
    g.sample_size(10);
    let fleet: Vec<Problem> = (0..1000)
        .map(|s| {
            let dsl = 20.0 + (s % 7) as f64 * 10.0;
            site(
                &classes,
                vec![uplink("dsl", dsl, 10.0), uplink("lte", 30.0, 40.0)],
                20,
            )
        })
        .collect();
    g.bench_function("1000 sites of 20 apps", |b| {
        b.iter(|| {
            for p in &fleet {
                black_box(fast::solve(p).unwrap());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, allocation);
criterion_main!(benches);
