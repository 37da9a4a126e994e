//! A simulated gateway for the controller's tests and benchmarks: a lightweight admin
//! endpoint on loopback that answers `GET /v1/status`, `GET /v1/sites/{site}/pacing`
//! and `PUT` it as a gateway does (409 unless the table replaces the version in force).
//! One site, two uplinks of 50 Mbit/s and unequal delay, `APPS` active applications of
//! the five classes in turn.

#![allow(dead_code)] // the fleet bench and the controller test each use their own part

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub const APPS: usize = 20;
const CLASSES: [&str; 5] = ["web", "download", "terminal", "video", "voip"];

pub struct SimGateway {
    site: String,
    status: String,
    pub table: Mutex<Value>,
    /// The first `held_reads` reads of the table are answered together, once all have
    /// come: controllers started together then all see the same version.
    held_reads: usize,
    reads: AtomicUsize,
    together: tokio::sync::Barrier,
}

/// What a gateway (or a fleet of them) saw, in nanoseconds since `epoch`.
pub struct Seen {
    pub epoch: Mutex<Instant>,
    pub first_read: AtomicU64,
    pub last_put: AtomicU64,
    pub puts: AtomicUsize,
    pub refused: AtomicUsize,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            epoch: Mutex::new(Instant::now()),
            first_read: AtomicU64::new(u64::MAX),
            last_put: AtomicU64::new(0),
            puts: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }
}

impl Seen {
    /// Starts a new round: nothing seen, time from now.
    pub fn restart(&self) {
        self.first_read.store(u64::MAX, Ordering::Relaxed);
        self.last_put.store(0, Ordering::Relaxed);
        self.puts.store(0, Ordering::Relaxed);
        *self.epoch.lock().unwrap() = Instant::now();
    }

    fn since(&self) -> u64 {
        self.epoch.lock().unwrap().elapsed().as_nanos() as u64
    }
}

impl SimGateway {
    pub fn new(site: &str, held_reads: usize) -> SimGateway {
        SimGateway {
            site: site.to_string(),
            status: status(site),
            table: Mutex::new(first_table()),
            held_reads,
            reads: AtomicUsize::new(0),
            together: tokio::sync::Barrier::new(held_reads.max(1)),
        }
    }

    /// Back to the hand-written table, without a rate or a controller.
    pub fn reset(&self) {
        *self.table.lock().unwrap() = first_table();
    }

    /// Serves on a free loopback port (on the current tokio runtime); its port.
    pub async fn serve(self: Arc<SimGateway>, seen: Arc<Seen>) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (gateway, seen) = (self.clone(), seen.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        gateway.clone().answer(seen.clone(), req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        port
    }

    async fn answer(
        self: Arc<SimGateway>,
        seen: Arc<Seen>,
        req: Request<hyper::body::Incoming>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let pacing = format!("/v1/sites/{}/pacing", self.site);
        let reply = |code: StatusCode, body: String| {
            Ok(Response::builder()
                .status(code)
                .body(Full::new(Bytes::from(body)))
                .unwrap())
        };
        match (req.method().clone(), req.uri().path()) {
            (Method::GET, "/v1/status") => {
                seen.first_read.fetch_min(seen.since(), Ordering::Relaxed);
                reply(StatusCode::OK, self.status.clone())
            }
            (Method::GET, p) if p == pacing => {
                let table = self.table.lock().unwrap().to_string();
                if self.reads.fetch_add(1, Ordering::Relaxed) < self.held_reads {
                    self.together.wait().await;
                }
                reply(StatusCode::OK, table)
            }
            (Method::PUT, p) if p == pacing => {
                let body = req.into_body().collect().await.unwrap().to_bytes();
                let new: Value = serde_json::from_slice(&body).unwrap();
                let mut table = self.table.lock().unwrap();
                if new["replaces"] != table["version"] {
                    seen.refused.fetch_add(1, Ordering::Relaxed);
                    return reply(StatusCode::CONFLICT, "not the version in force".into());
                }
                *table = new;
                seen.last_put.fetch_max(seen.since(), Ordering::Relaxed);
                seen.puts.fetch_add(1, Ordering::Relaxed);
                reply(StatusCode::OK, "{}".into())
            }
            _ => reply(StatusCode::NOT_FOUND, String::new()),
        }
    }
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
