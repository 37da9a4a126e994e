//! The controller's own HTTP endpoint on `listen`: `GET /metrics` (Prometheus text
//! format) and `GET /healthz`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{
    Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use crate::control::admin::{HEADER_TIMEOUT, MAX_CONNECTIONS};
use crate::core::allocation::Allocation;

/// The controller's metrics (docs/controller.md).
pub struct Metrics {
    registry: Registry,
    cycles: IntCounter,
    gateway_up: IntGaugeVec,
    pushes: IntCounterVec,
    push_failures: IntCounterVec,
    solve_seconds: GaugeVec,
    min_utility: GaugeVec,
    total_utility: GaugeVec,
    fast_gap: GaugeVec,
    sites: IntGaugeVec,
    cycle_seconds: Gauge,
    /// Gateways that answered in the last cycle, and how many there are.
    answered: AtomicUsize,
    fleet: AtomicUsize,
}

impl Metrics {
    pub fn new() -> anyhow::Result<Metrics> {
        let registry = Registry::new_custom(Some("braid_controller".into()), None)?;
        let site_direction = &["site", "direction"];
        let m = Metrics {
            cycles: IntCounter::new("cycles_total", "Recompute periods run")?,
            gateway_up: IntGaugeVec::new(
                Opts::new(
                    "gateway_up",
                    "Whether the gateway answered in the last cycle",
                ),
                &["gateway"],
            )?,
            pushes: IntCounterVec::new(
                Opts::new("pushes_total", "Tables the gateway took"),
                &["gateway"],
            )?,
            push_failures: IntCounterVec::new(
                Opts::new(
                    "push_failures_total",
                    "Cycles a gateway could not be read (unreachable) or a table was not taken (refused: another came first; error)",
                ),
                &["gateway", "reason"],
            )?,
            solve_seconds: GaugeVec::new(
                Opts::new(
                    "solve_seconds",
                    "How long the last allocation of the site took, by the method used",
                ),
                &["site", "direction", "method"],
            )?,
            min_utility: GaugeVec::new(
                Opts::new(
                    "min_utility",
                    "The least utility of the site's applications in the last allocation",
                ),
                site_direction,
            )?,
            total_utility: GaugeVec::new(
                Opts::new(
                    "total_utility",
                    "The sum of the site's applications' utilities in the last allocation",
                ),
                site_direction,
            )?,
            fast_gap: GaugeVec::new(
                Opts::new(
                    "fast_gap",
                    "How far the fast method's total utility fell below the exact one's, as a fraction, where both ran",
                ),
                site_direction,
            )?,
            sites: IntGaugeVec::new(
                Opts::new(
                    "sites",
                    "Sites in the last cycle: allocated by this controller (own) or left to another that keeps renewing its table (held)",
                ),
                &["state"],
            )?,
            cycle_seconds: Gauge::new(
                "cycle_seconds",
                "How long the last cycle took: reading every gateway, allocating every site, putting the tables",
            )?,
            registry,
            answered: AtomicUsize::new(0),
            fleet: AtomicUsize::new(0),
        };
        m.registry.register(Box::new(m.cycles.clone()))?;
        m.registry.register(Box::new(m.gateway_up.clone()))?;
        m.registry.register(Box::new(m.pushes.clone()))?;
        m.registry.register(Box::new(m.push_failures.clone()))?;
        m.registry.register(Box::new(m.solve_seconds.clone()))?;
        m.registry.register(Box::new(m.min_utility.clone()))?;
        m.registry.register(Box::new(m.total_utility.clone()))?;
        m.registry.register(Box::new(m.fast_gap.clone()))?;
        m.registry.register(Box::new(m.sites.clone()))?;
        m.registry.register(Box::new(m.cycle_seconds.clone()))?;
        Ok(m)
    }

    pub fn cycle(&self, answered: usize, fleet: usize) {
        self.cycles.inc();
        self.answered.store(answered, Ordering::Relaxed);
        self.fleet.store(fleet, Ordering::Relaxed);
    }

    pub fn cycle_took(&self, took: Duration) {
        self.cycle_seconds.set(took.as_secs_f64());
    }

    /// The sites of the last cycle this controller allocated and left to another.
    pub fn sites(&self, own: usize, held: usize) {
        self.sites.with_label_values(&["own"]).set(own as i64);
        self.sites.with_label_values(&["held"]).set(held as i64);
    }

    pub fn gateway_up(&self, gateway: &str, up: bool) {
        self.gateway_up
            .with_label_values(&[gateway])
            .set(i64::from(up));
    }

    pub fn pushed(&self, gateway: &str) {
        self.pushes.with_label_values(&[gateway]).inc();
    }

    pub fn push_failed(&self, gateway: &str, reason: &str) {
        self.push_failures
            .with_label_values(&[gateway, reason])
            .inc();
    }

    pub fn allocated(
        &self,
        site: &str,
        direction: &str,
        method: &str,
        took: Duration,
        a: &Allocation,
    ) {
        self.solve_seconds
            .with_label_values(&[site, direction, method])
            .set(took.as_secs_f64());
        self.min_utility
            .with_label_values(&[site, direction])
            .set(a.min_utility);
        self.total_utility
            .with_label_values(&[site, direction])
            .set(a.total_utility);
    }

    pub fn gap(&self, site: &str, direction: &str, gap: f64) {
        self.fast_gap.with_label_values(&[site, direction]).set(gap);
    }

    fn text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a vector does not fail.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// Serves `/metrics` and `/healthz` until the process ends, with the admin API's
/// limits: at most [`MAX_CONNECTIONS`] at once (more are closed at once), and
/// [`HEADER_TIMEOUT`] for a request's headers.
pub async fn serve(listener: tokio::net::TcpListener, metrics: Arc<Metrics>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        if connections.len() >= MAX_CONNECTIONS {
            continue; // dropping the stream closes it
        }
        let metrics = metrics.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(answer(&req, &metrics)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer(req: &Request<hyper::body::Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, metrics.text()),
        (&Method::GET, "/healthz") => {
            let answered = metrics.answered.load(Ordering::Relaxed);
            let fleet = metrics.fleet.load(Ordering::Relaxed);
            if answered > 0 || fleet == 0 {
                (
                    StatusCode::OK,
                    format!("ok: {answered} of {fleet} gateways answered\n").into_bytes(),
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("no gateway answered (of {fleet})\n").into_bytes(),
                )
            }
        }
        (_, "/metrics" | "/healthz") => (StatusCode::METHOD_NOT_ALLOWED, b"only GET\n".to_vec()),
        _ => (StatusCode::NOT_FOUND, b"no such resource\n".to_vec()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
