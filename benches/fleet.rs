//! The controller against a fleet: 1,000 entry gateways of one site and 20 active
//! applications each (the five classes in turn, over two uplinks of 50 Mbit/s and
//! unequal delay), simulated by lightweight admin endpoints on loopback that answer
//! `GET /v1/status`, `GET /v1/sites/{site}/pacing` and `PUT` it as a gateway does
//! (409 unless the table replaces the version in force). `braid controller` (the
//! binary, the fast method) runs against them; measured: from its first read to the
//! last table taken, for a fresh controller each round. `cargo bench --bench fleet`
//! (`-- GATEWAYS ROUNDS` to change the defaults, 1000 and 5).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[path = "../integration/sim_gateway.rs"]
mod sim_gateway;

use sim_gateway::{APPS, Seen, SimGateway};

fn raise_open_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let gateways_n = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(5);
    raise_open_files();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("braid-fleet-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "bench\n").unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = String::from(
        "listen = \"127.0.0.1:0\"\nperiod_ms = 30000\nsolver = \"fast\"\nname = \"bench\"\n",
    );
    let mut gateways = Vec::new();
    runtime.block_on(async {
        for g in 0..gateways_n {
            let gateway = Arc::new(SimGateway::new(&format!("site{g}"), 0));
            let port = gateway.clone().serve(seen.clone()).await;
            config.push_str(&format!(
                "[[gateways]]\nurl = \"http://127.0.0.1:{port}\"\ntoken_file = \"token\"\n"
            ));
            gateways.push(gateway);
        }
    });
    std::fs::write(dir.join("controller.toml"), &config).unwrap();
    let mut took = Vec::new();
    for round in 0..rounds {
        for g in &gateways {
            g.reset();
        }
        seen.restart();
        let mut controller = std::process::Command::new(env!("CARGO_BIN_EXE_braid"))
            .args(["controller", "--config"])
            .arg(dir.join("controller.toml"))
            .env("RUST_LOG", "warn")
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.puts.load(Ordering::Relaxed) < gateways_n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        controller.kill().unwrap();
        controller.wait().unwrap();
        let puts = seen.puts.load(Ordering::Relaxed);
        assert_eq!(
            puts, gateways_n,
            "round {round}: only {puts} tables taken in 30 s"
        );
        let ms = (seen.last_put.load(Ordering::Relaxed) - seen.first_read.load(Ordering::Relaxed))
            as f64
            / 1e6;
        println!("round {round}: {gateways_n} gateways read, allocated and put in {ms:.0} ms");
        took.push(ms);
        // Every table took a rate for each application, within the uplinks.
        let t = gateways[0].table.lock().unwrap().clone();
        let total: u64 = t["apps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["rate_up_kbps"].as_u64().unwrap())
            .sum();
        assert!(total <= 100_000, "{t}");
    }
    took.sort_by(f64::total_cmp);
    println!(
        "fleet: {gateways_n} gateways x {APPS} applications: median {:.0} ms, worst {:.0} ms over {rounds} rounds (refused puts: {})",
        took[took.len() / 2],
        took[took.len() - 1],
        seen.refused.load(Ordering::Relaxed)
    );
    std::fs::remove_dir_all(dir).unwrap();
}
