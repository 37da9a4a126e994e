//! Prometheus metrics of SPEC §10 (prefix `braid_`). Children are created once per
//! lane or reason and kept, so the per-packet cost is one atomic add.

use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus::{
    Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::core::lane::Colour;
use crate::core::sched::DecisionKind;
use crate::core::stats::DropReason;

/// Labels of every lane metric.
const LANE_LABELS: [&str; 3] = ["site", "uplink", "colour"];
/// Labels of every application metric.
const APP_LABELS: [&str; 3] = ["site", "app", "direction"];

pub struct Metrics {
    registry: Registry,
    dropped: Vec<IntCounter>,
    uplink_up: IntGaugeVec,
    lane_srtt: GaugeVec,
    lane_cwnd: IntGaugeVec,
    lane_fill: IntGaugeVec,
    lane_tx_bytes: IntCounterVec,
    lane_rx_bytes: IntCounterVec,
    lane_tx_packets: IntCounterVec,
    lane_rx_packets: IntCounterVec,
    lane_lost: IntCounterVec,
    decisions: IntCounterVec,
    reordered: IntCounterVec,
    pub flows_active: IntGauge,
    app_target: IntGaugeVec,
    app_tx_bytes: IntCounterVec,
    app_queue: IntGaugeVec,
    app_drops: IntCounterVec,
    lanes_up: AtomicUsize,
}

/// The metric children of one application of a site in one direction.
#[derive(Clone)]
pub struct AppMetrics {
    pub target_bps: IntGauge,
    pub tx_bytes: IntCounter,
    pub queue_bytes: IntGauge,
    pub drops: IntCounter,
}

/// The metric children of one lane (site, uplink, colour). A lane that reconnects
/// gets the same children, so its counters keep counting.
#[derive(Clone)]
pub struct LaneMetrics {
    pub up: IntGauge,
    pub srtt: Gauge,
    pub cwnd: IntGauge,
    pub fill: IntGauge,
    pub tx_bytes: IntCounter,
    pub rx_bytes: IntCounter,
    pub tx_packets: IntCounter,
    pub rx_packets: IntCounter,
    pub lost: IntCounter,
    /// Scheduler decisions for this lane, indexed like `DecisionKind::ALL`.
    pub decisions: Vec<IntCounter>,
}

impl Metrics {
    pub fn new() -> anyhow::Result<Metrics> {
        let registry = Registry::new_custom(Some("braid".into()), None)?;
        let dropped_vec = IntCounterVec::new(
            Opts::new("packets_dropped_total", "Packets dropped, by reason"),
            &["reason"],
        )?;
        registry.register(Box::new(dropped_vec.clone()))?;
        let dropped = DropReason::ALL
            .iter()
            .map(|r| dropped_vec.with_label_values(&[r.as_str()]))
            .collect();
        let build = IntGaugeVec::new(
            Opts::new("build_info", "Build of this gateway"),
            &["version"],
        )?;
        registry.register(Box::new(build.clone()))?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        let gauge = |name: &str, help: &str, labels: &[&str]| -> anyhow::Result<IntGaugeVec> {
            let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let counter = |name: &str, help: &str| -> anyhow::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), &LANE_LABELS)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let lane_srtt = GaugeVec::new(
            Opts::new(
                "lane_srtt_seconds",
                "Smoothed RTT of the lane's QUIC connection",
            ),
            &LANE_LABELS,
        )?;
        registry.register(Box::new(lane_srtt.clone()))?;
        Ok(Metrics {
            dropped,
            uplink_up: gauge(
                "uplink_up",
                "1 while the uplink has a lane up",
                &["site", "uplink"],
            )?,
            lane_srtt,
            lane_cwnd: gauge(
                "lane_cwnd_bytes",
                "Congestion window of the lane's QUIC connection",
                &LANE_LABELS,
            )?,
            lane_fill: gauge(
                "lane_fill_bytes",
                "Bytes queued for the lane inside braid and quinn",
                &LANE_LABELS,
            )?,
            lane_tx_bytes: counter("lane_tx_bytes_total", "Inner packet bytes sent on the lane")?,
            lane_rx_bytes: counter(
                "lane_rx_bytes_total",
                "Inner packet bytes received on the lane",
            )?,
            lane_tx_packets: counter("lane_tx_packets_total", "Inner packets sent on the lane")?,
            lane_rx_packets: counter(
                "lane_rx_packets_total",
                "Inner packets received on the lane",
            )?,
            lane_lost: counter(
                "lane_lost_packets_total",
                "QUIC packets the lane's connection declared lost",
            )?,
            decisions: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "sched_decisions_total",
                        "Scheduler decisions, by lane and kind",
                    ),
                    &["site", "uplink", "colour", "kind"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            reordered: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "reordered_packets_total",
                        "Packets received after a later-sent packet of the same flow",
                    ),
                    &["site"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            flows_active: {
                let g = IntGauge::new("flows_active", "Flows the scheduler tracks")?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            app_target: gauge(
                "app_rate_target_bps",
                "The application's paced rate (0: unpaced)",
                &APP_LABELS,
            )?,
            app_tx_bytes: {
                let c = IntCounterVec::new(
                    Opts::new("app_tx_bytes_total", "Bytes of the application carried"),
                    &APP_LABELS,
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            app_queue: gauge(
                "app_queue_bytes",
                "Bytes waiting in the application's pacing queue",
                &APP_LABELS,
            )?,
            app_drops: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "app_drops_total",
                        "Packets dropped because the application's queue was full",
                    ),
                    &APP_LABELS,
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            lanes_up: AtomicUsize::new(0),
            registry,
        })
    }

    /// The counter of drops for `reason`.
    pub fn dropped(&self, reason: DropReason) -> &IntCounter {
        &self.dropped[reason as usize]
    }

    pub fn lane(&self, site: &str, uplink: &str, colour: Colour) -> LaneMetrics {
        let l = [site, uplink, colour.as_str()];
        LaneMetrics {
            up: self.uplink_up.with_label_values(&[site, uplink]),
            srtt: self.lane_srtt.with_label_values(&l),
            cwnd: self.lane_cwnd.with_label_values(&l),
            fill: self.lane_fill.with_label_values(&l),
            tx_bytes: self.lane_tx_bytes.with_label_values(&l),
            rx_bytes: self.lane_rx_bytes.with_label_values(&l),
            tx_packets: self.lane_tx_packets.with_label_values(&l),
            rx_packets: self.lane_rx_packets.with_label_values(&l),
            lost: self.lane_lost.with_label_values(&l),
            decisions: DecisionKind::ALL
                .iter()
                .map(|k| {
                    self.decisions
                        .with_label_values(&[site, uplink, colour.as_str(), k.as_str()])
                })
                .collect(),
        }
    }

    /// The metrics of an application of a site in one direction.
    pub fn app(&self, site: &str, app: &str, direction: &str) -> AppMetrics {
        let l = [site, app, direction];
        AppMetrics {
            target_bps: self.app_target.with_label_values(&l),
            tx_bytes: self.app_tx_bytes.with_label_values(&l),
            queue_bytes: self.app_queue.with_label_values(&l),
            drops: self.app_drops.with_label_values(&l),
        }
    }

    /// Forgets the metrics of an application that is no longer in its site's table.
    pub fn remove_app(&self, site: &str, app: &str, direction: &str) {
        let l = [site, app, direction];
        // Absent children are fine: a direction may never have been created.
        let _ = self.app_target.remove_label_values(&l);
        let _ = self.app_tx_bytes.remove_label_values(&l);
        let _ = self.app_queue.remove_label_values(&l);
        let _ = self.app_drops.remove_label_values(&l);
    }

    /// The reordering counter of a site.
    pub fn reordered(&self, site: &str) -> IntCounter {
        self.reordered.with_label_values(&[site])
    }

    /// Records how many lanes are up, for `/healthz`.
    pub fn set_lanes_up(&self, n: usize) {
        self.lanes_up.store(n, Ordering::Relaxed);
    }

    pub fn lanes_up(&self) -> usize {
        self.lanes_up.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}
