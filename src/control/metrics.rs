//! Prometheus metrics of SPEC §10 (prefix `braid_`). Children are created once per
//! lane or reason and kept, so the per-packet cost is one atomic add.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, MetricFamily};
use prometheus::{
    Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::core::engine::{DataPath, GreenDrops, LaneCounters, LaneState, SiteIdx};
use crate::core::lane::{Colour, LaneId};
use crate::core::reseq::ReseqCounters;
use crate::core::sched::DecisionKind;
use crate::core::stats::{DELAY_BUCKETS, DelayHistogram, DropReason};

/// Labels of every lane metric.
const LANE_LABELS: [&str; 3] = ["site", "uplink", "colour"];
/// Labels of every application metric.
const APP_LABELS: [&str; 3] = ["site", "app", "direction"];

pub struct Metrics {
    registry: Registry,
    dropped: Vec<IntCounter>,
    /// By `Colour as usize`.
    abe_packets: Vec<IntCounter>,
    abe_fallbacks: Vec<IntCounter>,
    /// `abe_green_drops_total{reason}`: refused at arrival, gone stale.
    green_acceptance_drops: IntCounter,
    green_stale_drops: IntCounter,
    /// DSD's g per shaped uplink.
    green_bias: GaugeVec,
    /// `queue_delay_seconds{colour}`, one series per colour by `Colour as usize`.
    queue_delay: Arc<DelayHistograms>,
    uplink_up: IntGaugeVec,
    uplink_standby: IntGaugeVec,
    /// Data caps (`control/caps.rs`).
    uplink_cap: IntGaugeVec,
    uplink_cap_used: IntGaugeVec,
    uplink_capped: IntGaugeVec,
    uplink_cap_warnings: IntCounterVec,
    /// An entry's exits (`lane/exits.rs`): 1 for the one its lanes go to.
    exit_in_use: IntGaugeVec,
    lane_srtt: GaugeVec,
    lane_delay_variation: GaugeVec,
    lane_cwnd: IntGaugeVec,
    lane_fill: IntGaugeVec,
    lane_tx_bytes: IntCounterVec,
    lane_rx_bytes: IntCounterVec,
    lane_tx_packets: IntCounterVec,
    lane_rx_packets: IntCounterVec,
    lane_lost: IntCounterVec,
    lane_stalls: IntCounterVec,
    lane_cutoffs: IntCounterVec,
    lane_resent: IntCounterVec,
    lane_standby_copies: IntCounterVec,
    lane_probes: IntCounterVec,
    lane_opening_bytes: IntCounterVec,
    lane_loss_repairs: IntCounterVec,
    decisions: IntCounterVec,
    reordered: IntCounterVec,
    reseq_packets: IntCounterVec,
    reseq_hold: Arc<DelayHistograms>,
    pub flows_active: IntGauge,
    admin_requests: IntCounterVec,
    admin_connections_failed: IntCounter,
    /// `config_reloads_total{result}`: applied, refused.
    reloads: [IntCounter; 2],
    /// Pacing state files found unusable at start and set aside.
    pub state_set_aside: IntCounter,
    /// `tun_super_packets_total{direction}` and `tun_offload_packets_total{direction}`,
    /// by [`TunOffload`] field order: read, write.
    tun_super_packets: [IntCounter; 2],
    /// `tun_handoff_packets_total`.
    tun_handoff_packets: IntCounter,
    tun_offload_packets: [IntCounter; 2],
    app_target: IntGaugeVec,
    app_tx_bytes: IntCounterVec,
    app_queue: IntGaugeVec,
    app_drops: IntCounterVec,
    app_steered_off: IntCounterVec,
    app_duplicates: IntCounterVec,
    app_duplicate_bytes: IntCounterVec,
    app_over_budget: IntCounterVec,
    app_duplicates_dropped: IntCounterVec,
    app_background_spare: IntGaugeVec,
    app_deadlines_met: IntCounterVec,
    app_deadlines_missed: IntCounterVec,
    lanes_up: AtomicI64,
}

/// The metric children of one application of a site in one direction.
#[derive(Clone)]
pub struct AppMetrics {
    pub target_bps: IntGauge,
    pub tx_bytes: IntCounter,
    pub queue_bytes: IntGauge,
    pub drops: IntCounter,
    pub steered_off: IntCounter,
    pub duplicates: IntCounter,
    pub duplicate_bytes: IntCounter,
    pub over_budget: IntCounter,
    pub duplicates_dropped: IntCounter,
    pub background_spare_bps: IntGauge,
    pub deadlines_met: IntCounter,
    pub deadlines_missed: IntCounter,
}

/// The metric children of one lane (site, uplink, colour). A lane that reconnects
/// gets the same children, so its counters keep counting.
#[derive(Clone)]
pub struct LaneMetrics {
    pub srtt: Gauge,
    pub delay_variation: Gauge,
    pub cwnd: IntGauge,
    pub fill: IntGauge,
    pub tx_bytes: IntCounter,
    pub rx_bytes: IntCounter,
    pub tx_packets: IntCounter,
    pub rx_packets: IntCounter,
    pub lost: IntCounter,
    pub stalls: IntCounter,
    pub cutoffs: IntCounter,
    pub resent: IntCounter,
    pub standby_copies: IntCounter,
    pub probes_sent: IntCounter,
    pub probes_received: IntCounter,
    pub opening_bytes: IntCounter,
    pub loss_reported: IntCounter,
    pub loss_repaired: IntCounter,
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
        let by_colour = |name: &str, help: &str| -> anyhow::Result<Vec<IntCounter>> {
            let c = IntCounterVec::new(Opts::new(name, help), &["colour"])?;
            registry.register(Box::new(c.clone()))?;
            Ok(Colour::ALL
                .iter()
                .map(|colour| c.with_label_values(&[colour.as_str()]))
                .collect())
        };
        let abe_packets = by_colour(
            "abe_packets_total",
            "Packets sent on lanes, by their colour",
        )?;
        let abe_fallbacks = by_colour(
            "abe_fallback_packets_total",
            "Packets that took the other colour's lanes because their colour had none up",
        )?;
        let green_drops = IntCounterVec::new(
            Opts::new(
                "abe_green_drops_total",
                "Green packets DSD dropped on uplinks of known rate: refused at arrival \
                 (acceptance) or waited too long (stale)",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(green_drops.clone()))?;
        let green_bias = GaugeVec::new(
            Opts::new(
                "abe_green_bias",
                "DSD's g on an uplink of known rate: the probability that green goes first \
                 when both colours can wait",
            ),
            &["site", "uplink"],
        )?;
        registry.register(Box::new(green_bias.clone()))?;
        let queue_delay = DelayHistograms::register(
            &registry,
            "queue_delay_seconds",
            "How long packets were expected to wait in their lane's queue inside braid, by colour",
            "colour",
        )?;
        queue_delay.series().extend(
            Colour::ALL
                .iter()
                .map(|c| (c.as_str().to_string(), DelayHistogram::default())),
        );
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
        // A lane's counters, by its labels and `by` (one more label) if any.
        let counter_by = |name: &str, help: &str, by: Option<&str>| {
            let mut labels = LANE_LABELS.to_vec();
            labels.extend(by);
            let c = IntCounterVec::new(Opts::new(name, help), &labels)?;
            registry.register(Box::new(c.clone()))?;
            anyhow::Ok(c)
        };
        let counter = |name: &str, help: &str| counter_by(name, help, None);
        let app_counter = |name: &str, help: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &APP_LABELS)?;
            registry.register(Box::new(c.clone()))?;
            anyhow::Ok(c)
        };
        let lane_srtt = GaugeVec::new(
            Opts::new(
                "lane_srtt_seconds",
                "Smoothed RTT of the lane's QUIC connection",
            ),
            &LANE_LABELS,
        )?;
        registry.register(Box::new(lane_srtt.clone()))?;
        let lane_delay_variation = GaugeVec::new(
            Opts::new(
                "lane_delay_variation_seconds",
                "How much the uplink's one-way delay varies by itself, as the lane's delay cap allows it: declared, or learned (0: steady)",
            ),
            &LANE_LABELS,
        )?;
        registry.register(Box::new(lane_delay_variation.clone()))?;
        Ok(Metrics {
            dropped,
            abe_packets,
            abe_fallbacks,
            green_acceptance_drops: green_drops.with_label_values(&["acceptance"]),
            green_stale_drops: green_drops.with_label_values(&["stale"]),
            green_bias,
            queue_delay,
            uplink_up: gauge(
                "uplink_up",
                "1 while the uplink has a lane up",
                &["site", "uplink"],
            )?,
            uplink_standby: gauge(
                "uplink_standby",
                "1 while the uplink is up but its tier carries no traffic",
                &["site", "uplink"],
            )?,
            uplink_cap: gauge(
                "uplink_cap_bytes",
                "The uplink's data cap per period",
                &["site", "uplink"],
            )?,
            uplink_cap_used: gauge(
                "uplink_cap_used_bytes",
                "Bytes the uplink carried in its cap's current period, both ways, headers counted",
                &["site", "uplink"],
            )?,
            uplink_capped: gauge(
                "uplink_capped",
                "1 while the uplink is at its data cap (demoted until the period resets)",
                &["site", "uplink"],
            )?,
            exit_in_use: gauge(
                "exit_in_use",
                "1 for the exit the entry's lanes go to, 0 for the other exits it lists",
                &["exit"],
            )?,
            uplink_cap_warnings: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "uplink_cap_warnings_total",
                        "Times the uplink's count reached a warning fraction of its cap",
                    ),
                    &["site", "uplink", "percent"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            lane_srtt,
            lane_delay_variation,
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
            lane_stalls: counter(
                "lane_stalls_total",
                "Times the lane was taken out of service because its peer fell silent",
            )?,
            lane_cutoffs: counter(
                "lane_cutoffs_total",
                "Times the lane went beyond its uplink's quality cut-off (max_rtt_ms, max_loss_percent)",
            )?,
            lane_resent: counter(
                "lane_resent_packets_total",
                "Packets the lane's dead path may have lost, sent again over the other lanes when it was taken out of service",
            )?,
            lane_standby_copies: counter(
                "lane_standby_copies_total",
                "Copies of sparse flows' packets the standby lane carried in the idle bound (400 ms) after a lane of its site's carrying tier was given up",
            )?,
            lane_probes: counter_by(
                "lane_probes_total",
                "Probes the lane sent while an answer from its peer was overdue, and probes it received",
                Some("direction"),
            )?,
            lane_opening_bytes: counter(
                "lane_opening_bytes_total",
                "Bytes of padding the lane sent in its first slow start, to open its window while the site's packets queued on a lane with a larger one",
            )?,
            lane_loss_repairs: counter_by(
                "lane_loss_repairs_total",
                "Packets lost on the lane: the peer's found missing and reported to it (reported), and the lane's own that its peer reported missing, sent again over the other lanes (resent)",
                Some("action"),
            )?,
            decisions: counter_by(
                "sched_decisions_total",
                "Scheduler decisions, by lane and kind",
                Some("kind"),
            )?,
            reordered: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "reordered_packets_total",
                        "Packets written to the TUN device after a later-sent packet of their flow",
                    ),
                    &["site"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            reseq_packets: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "reseq_packets_total",
                        "Packets of striped flows the resequencer held, and how they left",
                    ),
                    &["site", "outcome"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            reseq_hold: DelayHistograms::register(
                &registry,
                "reseq_hold_seconds",
                "How long the resequencer held packets of striped flows",
                "site",
            )?,
            flows_active: {
                let g = IntGauge::new(
                    "flows_active",
                    "Flows that sent a packet within the flow idle timeout",
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            admin_requests: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "admin_requests_total",
                        "Admin API requests answered, by HTTP status code",
                    ),
                    &["code"],
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            admin_connections_failed: {
                let c = IntCounter::new(
                    "admin_connections_failed_total",
                    "Admin API connections ended early: a malformed request, headers \
                     too large or too slow, or more than 64 open at once",
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            reloads: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "config_reloads_total",
                        "Configuration reloads (SIGHUP): applied, or refused with nothing \
                         changed (an invalid file, unusable certificates)",
                    ),
                    &["result"],
                )?;
                registry.register(Box::new(c.clone()))?;
                ["applied", "refused"].map(|result| c.with_label_values(&[result]))
            },
            state_set_aside: {
                let c = IntCounter::new(
                    "pacing_state_set_aside_total",
                    "Pacing state files that could not be read at start: the gateway \
                     started without tables and kept the file as NAME.corrupt",
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            tun_handoff_packets: {
                let c = IntCounter::new(
                    "tun_handoff_packets_total",
                    "Packets an exit's data-path thread read from its TUN queue for a site \
                     another thread serves, and handed to that thread",
                )?;
                registry.register(Box::new(c.clone()))?;
                c
            },
            tun_super_packets: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "tun_super_packets_total",
                        "TCP super-packets read from the TUN device (cut into segments) \
                         or written to it (merged from segments), by direction",
                    ),
                    &["direction"],
                )?;
                registry.register(Box::new(c.clone()))?;
                ["read", "write"].map(|direction| c.with_label_values(&[direction]))
            },
            tun_offload_packets: {
                let c = IntCounterVec::new(
                    Opts::new(
                        "tun_offload_packets_total",
                        "Packets that crossed the TUN device inside super-packets, by \
                         direction",
                    ),
                    &["direction"],
                )?;
                registry.register(Box::new(c.clone()))?;
                ["read", "write"].map(|direction| c.with_label_values(&[direction]))
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
            app_steered_off: app_counter(
                "app_steered_off_packets_total",
                "Packets of the application sent over uplinks it keeps off, as none of its own had a lane up",
            )?,
            app_duplicates: app_counter(
                "app_duplicate_packets_total",
                "Copies of the application's packets sent over a second uplink",
            )?,
            app_duplicate_bytes: app_counter(
                "app_duplicate_bytes_total",
                "Bytes of the copies of the application's packets sent over a second uplink",
            )?,
            app_over_budget: app_counter(
                "app_duplicates_over_budget_total",
                "Packets of the application sent without their copy: the site's duplicate_kbps was spent",
            )?,
            app_duplicates_dropped: app_counter(
                "app_duplicates_dropped_total",
                "Packets of the application received a second time (a copy and its original) and dropped",
            )?,
            app_background_spare: gauge(
                "app_background_spare_bps",
                "The spare capacity a background application's search estimates (its rate is app_rate_target_bps)",
                &APP_LABELS,
            )?,
            app_deadlines_met: app_counter(
                "app_deadlines_met_total",
                "Flows of the application that carried their deadline's bytes (or ended) in time",
            )?,
            app_deadlines_missed: app_counter(
                "app_deadlines_missed_total",
                "Flows of the application whose deadline passed before they carried its bytes",
            )?,
            lanes_up: AtomicI64::new(0),
            registry,
        })
    }

    /// The counter of drops for `reason`.
    pub fn dropped(&self, reason: DropReason) -> &IntCounter {
        &self.dropped[reason as usize]
    }

    pub fn lane(&self, site: &str, uplink: &str, colour: Colour) -> LaneMetrics {
        let l = [site, uplink, colour.as_str()];
        // A family with one label beyond the lane's.
        let by = |family: &IntCounterVec, value: &str| {
            family.with_label_values(&[site, uplink, colour.as_str(), value])
        };
        LaneMetrics {
            srtt: self.lane_srtt.with_label_values(&l),
            delay_variation: self.lane_delay_variation.with_label_values(&l),
            cwnd: self.lane_cwnd.with_label_values(&l),
            fill: self.lane_fill.with_label_values(&l),
            tx_bytes: self.lane_tx_bytes.with_label_values(&l),
            rx_bytes: self.lane_rx_bytes.with_label_values(&l),
            tx_packets: self.lane_tx_packets.with_label_values(&l),
            rx_packets: self.lane_rx_packets.with_label_values(&l),
            lost: self.lane_lost.with_label_values(&l),
            stalls: self.lane_stalls.with_label_values(&l),
            cutoffs: self.lane_cutoffs.with_label_values(&l),
            resent: self.lane_resent.with_label_values(&l),
            standby_copies: self.lane_standby_copies.with_label_values(&l),
            probes_sent: by(&self.lane_probes, "sent"),
            probes_received: by(&self.lane_probes, "received"),
            opening_bytes: self.lane_opening_bytes.with_label_values(&l),
            loss_reported: by(&self.lane_loss_repairs, "reported"),
            loss_repaired: by(&self.lane_loss_repairs, "resent"),
            decisions: DecisionKind::ALL
                .iter()
                .map(|k| by(&self.decisions, k.as_str()))
                .collect(),
        }
    }

    /// `uplink_cap_bytes`, `uplink_cap_used_bytes` and `uplink_capped` of a site's
    /// uplink.
    pub fn uplink_cap(&self, site: &str, uplink: &str) -> [IntGauge; 3] {
        [&self.uplink_cap, &self.uplink_cap_used, &self.uplink_capped]
            .map(|g| g.with_label_values(&[site, uplink]))
    }

    /// The entry's `exits` (addresses in order of preference), `in_use` the one its
    /// lanes go to; exits of an earlier configuration are forgotten.
    pub fn exits_in_use(&self, exits: &[String], in_use: usize) {
        self.exit_in_use.reset();
        for (i, exit) in exits.iter().enumerate() {
            self.exit_in_use
                .with_label_values(&[exit])
                .set(i64::from(i == in_use));
        }
    }

    /// Counts a warning of a site's uplink's cap at `percent`.
    pub fn uplink_cap_warned(&self, site: &str, uplink: &str, percent: u32) {
        self.uplink_cap_warnings
            .with_label_values(&[site, uplink, &percent.to_string()])
            .inc();
    }

    /// `uplink_up` and `uplink_standby` of a site's uplink.
    fn uplink_gauges(&self, site: &str, uplink: &str) -> [IntGauge; 2] {
        [&self.uplink_up, &self.uplink_standby].map(|g| g.with_label_values(&[site, uplink]))
    }

    /// The metrics of an application of a site in one direction.
    pub fn app(&self, site: &str, app: &str, direction: &str) -> AppMetrics {
        let l = [site, app, direction];
        AppMetrics {
            target_bps: self.app_target.with_label_values(&l),
            tx_bytes: self.app_tx_bytes.with_label_values(&l),
            queue_bytes: self.app_queue.with_label_values(&l),
            drops: self.app_drops.with_label_values(&l),
            steered_off: self.app_steered_off.with_label_values(&l),
            duplicates: self.app_duplicates.with_label_values(&l),
            duplicate_bytes: self.app_duplicate_bytes.with_label_values(&l),
            over_budget: self.app_over_budget.with_label_values(&l),
            duplicates_dropped: self.app_duplicates_dropped.with_label_values(&l),
            background_spare_bps: self.app_background_spare.with_label_values(&l),
            deadlines_met: self.app_deadlines_met.with_label_values(&l),
            deadlines_missed: self.app_deadlines_missed.with_label_values(&l),
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
        let _ = self.app_steered_off.remove_label_values(&l);
        let _ = self.app_duplicates.remove_label_values(&l);
        let _ = self.app_duplicate_bytes.remove_label_values(&l);
        let _ = self.app_over_budget.remove_label_values(&l);
        let _ = self.app_duplicates_dropped.remove_label_values(&l);
        let _ = self.app_background_spare.remove_label_values(&l);
        let _ = self.app_deadlines_met.remove_label_values(&l);
        let _ = self.app_deadlines_missed.remove_label_values(&l);
    }

    /// The reordering counter of a site.
    pub fn reordered(&self, site: &str) -> IntCounter {
        self.reordered.with_label_values(&[site])
    }

    /// The resequencer's counters of a site, indexed like [`RESEQ_OUTCOMES`].
    fn reseq_packets(&self, site: &str) -> Vec<IntCounter> {
        RESEQ_OUTCOMES
            .iter()
            .map(|(outcome, _)| self.reseq_packets.with_label_values(&[site, outcome]))
            .collect()
    }

    /// Adds a data-path thread's change in lanes up (`/healthz` reads the sum).
    fn add_lanes_up(&self, delta: i64) {
        self.lanes_up.fetch_add(delta, Ordering::Relaxed);
    }

    /// Counts an admin request answered with `status`.
    pub fn count_admin_request(&self, status: u16) {
        self.admin_requests
            .with_label_values(&[&status.to_string()])
            .inc();
    }

    /// Counts a reload, applied or refused.
    pub fn reload(&self, applied: bool) {
        self.reloads[usize::from(!applied)].inc();
    }

    /// Counts an admin connection that ended in an HTTP error.
    pub fn count_admin_connection_failed(&self) {
        self.admin_connections_failed.inc();
    }

    pub fn lanes_up(&self) -> usize {
        // Each thread adds only what it counted up before: never below zero.
        usize::try_from(self.lanes_up.load(Ordering::Relaxed)).unwrap_or(0)
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// One of a resequencer's counts.
type ReseqCount = fn(&ReseqCounters) -> u64;

/// The `outcome` labels of `reseq_packets_total` and where each count comes from.
const RESEQ_OUTCOMES: [(&str, ReseqCount); 4] = [
    ("held", |c| c.held),
    ("released_in_order", |c| c.released_in_order),
    ("released_at_deadline", |c| c.released_at_deadline),
    ("dropped_duplicate", |c| c.dropped),
];

/// A histogram of delays the core counted in fixed buckets (it cannot call into
/// prometheus), one series per value of its label, showing the counts last copied.
struct DelayHistograms {
    desc: Desc,
    label: &'static str,
    /// Per series: its label value and the counts.
    series: Mutex<Vec<(String, DelayHistogram)>>,
}

impl DelayHistograms {
    fn new(name: &str, help: &str, label: &'static str) -> prometheus::Result<DelayHistograms> {
        Ok(DelayHistograms {
            desc: Desc::new(
                name.into(),
                help.into(),
                vec![label.into()],
                Default::default(),
            )?,
            label,
            series: Mutex::new(Vec::new()),
        })
    }

    /// Registers a new family in `registry`; the returned handle updates it.
    fn register(
        registry: &Registry,
        name: &str,
        help: &str,
        label: &'static str,
    ) -> prometheus::Result<Arc<DelayHistograms>> {
        let h = Arc::new(DelayHistograms::new(name, help, label)?);
        registry.register(Box::new(SharedCollector(h.clone())))?;
        Ok(h)
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Vec<(String, DelayHistogram)>> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A collector registered once and updated through its `Arc`.
struct SharedCollector(Arc<DelayHistograms>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.0.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let h = &self.0;
        let mut family = MetricFamily::default();
        family.set_name(h.desc.fq_name.clone());
        family.set_help(h.desc.help.clone());
        family.set_field_type(proto::MetricType::HISTOGRAM);
        for (value, counts) in h.series().iter() {
            let mut cumulative = 0;
            let buckets = DELAY_BUCKETS
                .iter()
                .zip(&counts.buckets)
                .map(|(bound, n)| {
                    cumulative += n;
                    let mut b = proto::Bucket::default();
                    b.set_upper_bound(*bound);
                    b.set_cumulative_count(cumulative);
                    b
                })
                .collect();
            let mut histogram = proto::Histogram::default();
            histogram.set_bucket(buckets);
            histogram.set_sample_count(counts.count());
            histogram.set_sample_sum(counts.sum.as_secs_f64());
            let mut label = proto::LabelPair::default();
            label.set_name(h.label.into());
            label.set_value(value.clone());
            let mut metric = proto::Metric::default();
            metric.set_label(vec![label]);
            metric.set_histogram(histogram);
            family.mut_metric().push(metric);
        }
        vec![family]
    }
}

/// Grows `counter` by what the engine counted since the last copy: `now` against
/// `exported` (a count below the last copy adds nothing).
pub(super) fn count_since(counter: &IntCounter, now: u64, exported: u64) {
    counter.inc_by(now.saturating_sub(exported));
}

/// Copies a data path's counters and lane state into the metrics (the engine counts
/// in plain integers; the metrics grow by the difference since the last copy, so that
/// an exit's data-path threads, each with its own `Export`, add up). The first drop of
/// each reason is logged as a warning.
pub struct Export {
    metrics: Arc<Metrics>,
    /// Flows and lanes up as last copied.
    flows_active: i64,
    lanes_up: i64,
    /// The queue delay histograms as last copied, by `Colour as usize`.
    queue_delay: [DelayHistogram; 2],
    /// The offload counts last copied: (super-packets, packets in them), read and write.
    offload: [(u64, u64); 2],
    /// The handoff count last copied.
    handed_over: u64,
    drops: [u64; DropReason::ALL.len()],
    /// The colour counts last copied, by `Colour as usize`.
    colour_packets: [u64; 2],
    colour_fallbacks: [u64; 2],
    green_drops: GreenDrops,
    /// Per site: its reordering counter and the count last copied.
    reordered: Vec<(IntCounter, u64)>,
    /// Per site: its resequencer counters and the counts last copied.
    reseq: Vec<(Vec<IntCounter>, ReseqCounters)>,
    /// By `LaneId`.
    lanes: Vec<Option<LaneExport>>,
    /// Every uplink a lane came up on: its gauges and how many of its lanes stand how.
    uplinks: Vec<UplinkExport>,
    /// Each uplink's index in `uplinks`, by site and name.
    uplink_index: HashMap<(String, String), usize>,
    /// The lanes that carried since their last sample, for a copy of those alone.
    busy: Vec<LaneId>,
    /// The lanes sampled since the last copy: what changed in them is copied next.
    sampled: Vec<LaneId>,
}

/// Super-packets that crossed the TUN device and the packets they carried, counted by
/// the driver.
#[derive(Debug, Default)]
pub struct TunOffload {
    pub read_super: u64,
    pub read_packets: u64,
    pub write_super: u64,
    pub write_packets: u64,
    /// Packets read for another data-path thread's site and handed to it.
    pub handed_over: u64,
}

struct LaneExport {
    metrics: LaneMetrics,
    exported: LaneCounters,
    /// Its uplink in `Export::uplinks`.
    uplink: usize,
    /// As last copied: whether it was healthy, and whether it carried (up, not
    /// standing by or cut off).
    standing: Standing,
    /// Listed in `Export::sampled`.
    sampled: bool,
}

/// Whether a lane is healthy, and whether it carries.
type Standing = (bool, bool);

struct UplinkExport {
    up: IntGauge,
    standby: IntGauge,
    /// Its lanes (of either colour) healthy, and carrying, as last copied.
    healthy_lanes: u32,
    carrying_lanes: u32,
}

impl UplinkExport {
    /// One of its lanes went from standing `was` to `is`: the gauges follow. An
    /// uplink is up while a lane of either colour is (the green lanes' path may fail
    /// alone), and stands by while none of them carries.
    fn lane_moved(&mut self, was: Standing, is: Standing) {
        self.healthy_lanes = self.healthy_lanes + u32::from(is.0) - u32::from(was.0);
        self.carrying_lanes = self.carrying_lanes + u32::from(is.1) - u32::from(was.1);
        let up = self.healthy_lanes > 0;
        self.up.set(i64::from(up));
        self.standby.set(i64::from(up && self.carrying_lanes == 0));
    }
}

impl Export {
    pub fn new(metrics: Arc<Metrics>, engine: &DataPath) -> Export {
        let mut export = Export {
            metrics,
            flows_active: 0,
            lanes_up: 0,
            queue_delay: [DelayHistogram::default(); 2],
            offload: [(0, 0); 2],
            handed_over: 0,
            drops: [0; DropReason::ALL.len()],
            colour_packets: [0; 2],
            colour_fallbacks: [0; 2],
            green_drops: GreenDrops::default(),
            reordered: Vec::new(),
            reseq: Vec::new(),
            lanes: Vec::new(),
            uplinks: Vec::new(),
            uplink_index: HashMap::new(),
            sampled: Vec::new(),
            busy: Vec::new(),
        };
        export.add_sites(engine);
        export
    }

    /// Takes the engine's sites beyond those exported so far (a reload added them).
    fn add_sites(&mut self, engine: &DataPath) {
        if engine.sites().nth(self.reordered.len()).is_none() {
            return; // None added: the usual case, every 100 ms.
        }
        let mut holds = self.metrics.reseq_hold.series();
        for (_, id) in engine.sites().skip(self.reordered.len()) {
            self.reordered.push((self.metrics.reordered(id), 0));
            self.reseq
                .push((self.metrics.reseq_packets(id), ReseqCounters::default()));
            holds.push((id.to_string(), DelayHistogram::default()));
        }
    }

    /// A lane came up: its metrics are those of its site, uplink and colour (a lane
    /// that reconnects keeps counting on them).
    pub fn lane_up(&mut self, lane: LaneId, site: &str, uplink: &str, colour: Colour) {
        let slot = lane.0 as usize;
        if self.lanes.len() <= slot {
            self.lanes.resize_with(slot + 1, || None);
        }
        self.lane_closed(lane);
        let key = (site.to_string(), uplink.to_string());
        let index = match self.uplink_index.get(&key) {
            Some(&index) => index,
            None => {
                let [up, standby] = self.metrics.uplink_gauges(site, uplink);
                self.uplinks.push(UplinkExport {
                    up,
                    standby,
                    healthy_lanes: 0,
                    carrying_lanes: 0,
                });
                self.uplink_index.insert(key, self.uplinks.len() - 1);
                self.uplinks.len() - 1
            }
        };
        self.lanes[slot] = Some(LaneExport {
            metrics: self.metrics.lane(site, uplink, colour),
            exported: LaneCounters::default(),
            uplink: index,
            standing: (false, false),
            sampled: false,
        });
    }

    /// A lane is gone (copy its last counts first); its uplink is up while another
    /// of its lanes is.
    pub fn lane_closed(&mut self, lane: LaneId) {
        if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize).map(Option::take) {
            self.uplinks[l.uplink].lane_moved(l.standing, (false, false));
        }
    }

    /// Copies the driver's TUN offload and handoff counts.
    pub fn copy_offload(&mut self, counts: &TunOffload) {
        let now = [
            (counts.read_super, counts.read_packets),
            (counts.write_super, counts.write_packets),
        ];
        for (i, (supers, packets)) in now.into_iter().enumerate() {
            let (old_supers, old_packets) = self.offload[i];
            self.metrics.tun_super_packets[i].inc_by(supers - old_supers);
            self.metrics.tun_offload_packets[i].inc_by(packets - old_packets);
            self.offload[i] = (supers, packets);
        }
        self.metrics
            .tun_handoff_packets
            .inc_by(counts.handed_over - self.handed_over);
        self.handed_over = counts.handed_over;
    }

    /// The shell sampled `lanes`: their views and counts may have changed.
    pub fn lanes_sampled(&mut self, lanes: &[LaneId]) {
        for &lane in lanes {
            if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize)
                && !l.sampled
            {
                l.sampled = true;
                self.sampled.push(lane);
            }
        }
    }

    /// Copies what changed since the last call: of the lanes, only those sampled
    /// since or carrying now (`DataPath::lanes_sending`). An exit's thousands of idle
    /// lanes change only when sampled, once a second while their site is quiet,
    /// and reading each of them every 100 ms took about a tenth of the idle exit's
    /// CPU at 1,000 sites (docs/scale-out.md).
    pub fn copy(&mut self, engine: &DataPath) {
        self.copy_engine(engine);
        let mut lanes = std::mem::take(&mut self.busy);
        engine.lanes_sending(&mut lanes);
        lanes.append(&mut self.sampled);
        for &lane in &lanes {
            self.copy_lane(engine, lane);
        }
        lanes.clear();
        self.busy = lanes;
    }

    /// Copies what changed since the last call, every lane's included.
    pub fn copy_all(&mut self, engine: &DataPath) {
        self.copy_engine(engine);
        for i in 0..self.lanes.len() {
            self.copy_lane(engine, LaneId(i as u32));
        }
        self.sampled.clear();
    }

    /// Copies one lane's counts and gauges (it came up, or is about to be gone) and
    /// the lanes up.
    pub fn copy_one_lane(&mut self, engine: &DataPath, lane: LaneId) {
        self.copy_lanes_up(engine);
        self.copy_lane(engine, lane);
    }

    fn copy_lanes_up(&mut self, engine: &DataPath) {
        let lanes_up = i64::try_from(engine.lanes_up()).unwrap_or(i64::MAX);
        self.metrics.add_lanes_up(lanes_up - self.lanes_up);
        self.lanes_up = lanes_up;
    }

    /// Copies the data path's own counts: drops, colours, sites, flows, lanes up.
    fn copy_engine(&mut self, engine: &DataPath) {
        self.add_sites(engine);
        for reason in DropReason::ALL {
            let total = engine.dropped(reason);
            let exported = &mut self.drops[reason as usize];
            if total > *exported {
                // Link-local packets and CoDel's drops are the normal course of
                // things, not a sign of trouble.
                let routine = matches!(reason, DropReason::LinkLocal | DropReason::QueueDelay);
                if *exported == 0 && !routine {
                    tracing::warn!(
                        reason = reason.as_str(),
                        "dropped a packet (first of its kind; later ones are only counted)"
                    );
                }
                self.metrics.dropped(reason).inc_by(total - *exported);
                *exported = total;
            }
        }
        for colour in Colour::ALL {
            let i = colour as usize;
            let (packets, fallbacks) = engine.colour_packets(colour);
            self.metrics.abe_packets[i].inc_by(packets - self.colour_packets[i]);
            self.metrics.abe_fallbacks[i].inc_by(fallbacks - self.colour_fallbacks[i]);
            self.colour_packets[i] = packets;
            self.colour_fallbacks[i] = fallbacks;
        }
        let green_drops = engine.green_drops();
        self.metrics
            .green_acceptance_drops
            .inc_by(green_drops.acceptance - self.green_drops.acceptance);
        self.metrics
            .green_stale_drops
            .inc_by(green_drops.stale - self.green_drops.stale);
        self.green_drops = green_drops;
        for shaper in engine.shapers() {
            self.metrics
                .green_bias
                .with_label_values(&[engine.site_id(shaper.site), shaper.uplink])
                .set(shaper.green_bias);
        }
        for ((colour, (_, shown)), exported) in Colour::ALL
            .iter()
            .zip(self.metrics.queue_delay.series().iter_mut())
            .zip(&mut self.queue_delay)
        {
            let now = *engine.queue_delay(*colour);
            shown.add_since(&now, exported);
            *exported = now;
        }
        for (i, (counter, exported)) in self.reordered.iter_mut().enumerate() {
            let total = engine.reordered(SiteIdx(i as u32));
            count_since(counter, total, *exported);
            *exported = total;
        }
        let mut holds = self.metrics.reseq_hold.series();
        for (i, (counters, exported)) in self.reseq.iter_mut().enumerate() {
            let now = engine.reseq_counters(SiteIdx(i as u32));
            for (counter, (_, count)) in counters.iter().zip(RESEQ_OUTCOMES) {
                count_since(counter, count(now), count(exported));
            }
            // Another thread's site: its histogram is that thread's to show.
            if let Some((_, shown)) = holds.get_mut(i)
                && engine.owns(SiteIdx(i as u32))
            {
                *shown = now.hold;
            }
            *exported = *now;
        }
        drop(holds);
        let flows = i64::try_from(engine.flows_active()).unwrap_or(i64::MAX);
        self.metrics.flows_active.add(flows - self.flows_active);
        self.flows_active = flows;
        self.copy_lanes_up(engine);
    }

    /// Copies a lane's gauges, and its counts where they changed.
    fn copy_lane(&mut self, engine: &DataPath, lane: LaneId) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        l.sampled = false;
        let Some(lane) = engine.lane(lane) else {
            return;
        };
        let (view, now) = (lane.view, lane.counters);
        let standing = (lane.state.healthy(), lane.state == LaneState::Up);
        if l.standing != standing {
            self.uplinks[l.uplink].lane_moved(l.standing, standing);
            l.standing = standing;
        }
        let m = &l.metrics;
        m.srtt.set(view.srtt.as_secs_f64());
        m.delay_variation.set(view.delay_variation.as_secs_f64());
        m.cwnd.set(i64::try_from(view.cwnd).unwrap_or(i64::MAX));
        m.fill.set(i64::try_from(view.fill).unwrap_or(i64::MAX));
        if *now != l.exported {
            let old = l.exported;
            count_since(&m.tx_packets, now.tx_packets, old.tx_packets);
            count_since(&m.tx_bytes, now.tx_bytes, old.tx_bytes);
            count_since(&m.rx_packets, now.rx_packets, old.rx_packets);
            count_since(&m.rx_bytes, now.rx_bytes, old.rx_bytes);
            count_since(&m.lost, now.lost_packets, old.lost_packets);
            count_since(&m.stalls, now.stalls, old.stalls);
            count_since(&m.cutoffs, now.cutoffs, old.cutoffs);
            count_since(&m.resent, now.resent, old.resent);
            count_since(&m.standby_copies, now.standby_copies, old.standby_copies);
            count_since(&m.probes_sent, now.probes_sent, old.probes_sent);
            count_since(&m.probes_received, now.probes_received, old.probes_received);
            count_since(&m.opening_bytes, now.opening_bytes, old.opening_bytes);
            count_since(&m.loss_reported, now.loss_reported, old.loss_reported);
            count_since(&m.loss_repaired, now.loss_repaired, old.loss_repaired);
            for (k, c) in m.decisions.iter().enumerate() {
                count_since(c, now.decisions[k], old.decisions[k]);
            }
            l.exported = *now;
        }
    }
}
