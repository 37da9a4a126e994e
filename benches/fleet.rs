//! The controller against a fleet: 1,000 entry gateways of one site and 20 active
//! applications each (the five classes in turn, over two uplinks of 50 Mbit/s and
//! unequal delay), simulated by lightweight admin endpoints on loopback that answer
//! `GET /v1/status`, `GET /v1/sites/{site}/pacing` and `PUT` it as a gateway does
//! (409 unless the table replaces the version in force). `braid controller` (the
//! binary, the fast method) runs against them; measured: from its first read to the
//! last table taken, for a fresh controller each round. `cargo bench --bench fleet`
//! (`-- GATEWAYS ROUNDS` to change the defaults, 1000 and 5).
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

const APPS: usize = 20;
const CLASSES: [&str; 5] = ["web", "download", "terminal", "video", "voip"];

/// One simulated gateway.
struct Gateway {
    site: String,
    status: String,
    table: Mutex<Value>,
}

/// What every gateway saw, in nanoseconds since the round began.
#[derive(Default)]
struct Seen {
    first_read: AtomicU64,
    last_put: AtomicU64,
    puts: AtomicUsize,
    refused: AtomicUsize,
}

fn status(site: &str) -> String {
    let lane = |uplink: &str, srtt: f64| {
        json!({"uplink": uplink, "colour": "blue", "state": "up", "since_seconds": 60,
               "srtt_ms": srtt, "min_srtt_ms": srtt, "rate_kbps": 50000, "cwnd_bytes": 200000,
               "fill_bytes": 0, "rate_up_bps": 1000000, "rate_down_bps": 1000000,
               "lost_packets": 0})
    };
    let apps: Vec<Value> = (0..APPS)
        .map(|a| {
            json!({"name": format!("app{a}"), "flows": 1, "target_bps": 0, "rate_up_bps": 0,
                   "rate_down_bps": 0, "queue_bytes": 0, "drops": 0,
                   "utility": CLASSES[a % CLASSES.len()]})
        })
        .collect();
    json!({"version": "sim", "role": "entry", "uptime_seconds": 60, "flows": APPS,
           "drops": {}, "sites": [{"site": site, "lanes": [lane("dsl", 20.0), lane("lte", 80.0)],
           "apps": apps}]})
    .to_string()
}

fn first_table() -> Value {
    let apps: Vec<Value> = (0..APPS)
        .map(|a| {
            json!({"name": format!("app{a}"), "match": {"proto": "tcp", "remote_ports": format!("{}", 1000 + a)},
                   "utility": CLASSES[a % CLASSES.len()]})
        })
        .collect();
    json!({"version": 1, "apps": apps})
}

async fn answer(
    gateway: Arc<Gateway>,
    seen: Arc<Seen>,
    epoch: Arc<Mutex<Instant>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let since = || epoch.lock().unwrap().elapsed().as_nanos() as u64;
    let pacing = format!("/v1/sites/{}/pacing", gateway.site);
    let reply = |code: StatusCode, body: String| {
        Ok(Response::builder()
            .status(code)
            .body(Full::new(Bytes::from(body)))
            .unwrap())
    };
    match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/v1/status") => {
            seen.first_read.fetch_min(since(), Ordering::Relaxed);
            reply(StatusCode::OK, gateway.status.clone())
        }
        (Method::GET, p) if p == pacing => {
            reply(StatusCode::OK, gateway.table.lock().unwrap().to_string())
        }
        (Method::PUT, p) if p == pacing => {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let new: Value = serde_json::from_slice(&body).unwrap();
            let mut table = gateway.table.lock().unwrap();
            if new["replaces"] != table["version"] {
                seen.refused.fetch_add(1, Ordering::Relaxed);
                return reply(StatusCode::CONFLICT, "not the version in force".into());
            }
            *table = new;
            seen.last_put.fetch_max(since(), Ordering::Relaxed);
            seen.puts.fetch_add(1, Ordering::Relaxed);
            reply(StatusCode::OK, "{}".into())
        }
        _ => reply(StatusCode::NOT_FOUND, String::new()),
    }
}

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
    let epoch = Arc::new(Mutex::new(Instant::now()));
    let mut config = String::from(
        "listen = \"127.0.0.1:0\"\nperiod_ms = 30000\nsolver = \"fast\"\nname = \"bench\"\n",
    );
    let mut gateways = Vec::new();
    runtime.block_on(async {
        for g in 0..gateways_n {
            let site = format!("site{g}");
            let gateway = Arc::new(Gateway {
                status: status(&site),
                site,
                table: Mutex::new(first_table()),
            });
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            config.push_str(&format!(
                "[[gateways]]\nurl = \"http://127.0.0.1:{port}\"\ntoken_file = \"token\"\n"
            ));
            gateways.push(gateway.clone());
            let (seen, epoch) = (seen.clone(), epoch.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let (gateway, seen, epoch) = (gateway.clone(), seen.clone(), epoch.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            answer(gateway.clone(), seen.clone(), epoch.clone(), req)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        }
    });
    std::fs::write(dir.join("controller.toml"), &config).unwrap();
    let mut took = Vec::new();
    for round in 0..rounds {
        for g in &gateways {
            *g.table.lock().unwrap() = first_table();
        }
        seen.first_read.store(u64::MAX, Ordering::Relaxed);
        seen.last_put.store(0, Ordering::Relaxed);
        seen.puts.store(0, Ordering::Relaxed);
        *epoch.lock().unwrap() = Instant::now();
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
