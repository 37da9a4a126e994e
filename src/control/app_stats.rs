//! Per-application statistics of the shell: the engine's per-application counters
//! copied into the `app_*` metrics, and the once-a-second report behind
//! `GET /v1/sites/{site}/apps` (rates measured from the same counters).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::control::metrics::{AppMetrics, Metrics, count_since};
use crate::core::app_pacing::{AppCounters, AppPacing};
use crate::core::engine::{DataPath, SiteIdx};
use crate::core::pacing_table::{AppIdx, Direction};
use crate::core::time::Instant;

/// What `GET /v1/sites/{site}/apps` answers.
#[derive(Debug, Clone, Serialize, Default)]
pub struct SiteReport {
    pub site: String,
    pub version: u64,
    /// The direction this gateway paces (`up` at the entry, `down` at the exit).
    pub paced_direction: &'static str,
    pub apps: Vec<AppReport>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct AppReport {
    pub name: String,
    /// Flows seen in the paced direction within the flow timeout.
    pub flows: u64,
    pub target_bps: u64,
    /// Measured over the last second.
    pub rate_up_bps: u64,
    pub rate_down_bps: u64,
    pub queue_bytes: u64,
    pub drops: u64,
    /// Packets sent over uplinks the application keeps off, as none of its own had
    /// a lane up.
    #[serde(default)]
    pub steered_off_packets: u64,
    /// Copies sent over a second uplink (`duplicate`), their bytes, and packets
    /// sent without one because the site's `duplicate_kbps` was spent.
    #[serde(default)]
    pub duplicate_packets: u64,
    #[serde(default)]
    pub duplicate_bytes: u64,
    #[serde(default)]
    pub duplicates_over_budget: u64,
    /// Packets received a second time (a copy and its original) and dropped.
    #[serde(default)]
    pub duplicates_dropped: u64,
    /// A background application's estimate of the spare capacity it searches for
    /// (its rate is `target_bps`); absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_spare_bps: Option<u64>,
    /// And the site's lanes' queue it last measured, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_queue_ms: Option<f64>,
    /// The controller's class of the application (the table's `utility`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utility: Option<String>,
    /// Flows of an application with a deadline that met it and that missed it.
    #[serde(default)]
    pub deadlines_met: u64,
    #[serde(default)]
    pub deadlines_missed: u64,
}

/// One application's metrics and where its counters stood.
struct AppCounter {
    name: String,
    /// In the paced direction: target, bytes, queue, drops.
    paced: AppMetrics,
    /// In the other direction: bytes, duplicates dropped.
    other: AppMetrics,
    /// The engine's counters as last copied into the metrics, and at the last report.
    exported: AppCounters,
    reported: AppCounters,
}

/// The shell's per-application accounting.
pub struct AppStats {
    metrics: Arc<Metrics>,
    site_ids: Vec<String>,
    direction: Direction,
    /// By site, by `AppIdx`.
    counters: Vec<Vec<AppCounter>>,
    report: Arc<Mutex<Vec<SiteReport>>>,
    reported_at: Instant,
}

impl AppStats {
    pub fn new(
        metrics: Arc<Metrics>,
        engine: &DataPath,
        report: Arc<Mutex<Vec<SiteReport>>>,
    ) -> AppStats {
        let mut stats = AppStats {
            metrics,
            counters: Vec::new(),
            site_ids: Vec::new(),
            direction: engine.pacing().direction(),
            report,
            reported_at: Instant::ZERO,
        };
        stats.add_sites(engine);
        stats
    }

    /// Takes the engine's sites beyond those accounted so far (a reload added them).
    /// Another data-path thread's site has no applications here: that thread
    /// accounts for them.
    pub fn add_sites(&mut self, engine: &DataPath) {
        for (site, id) in engine.sites().skip(self.site_ids.len()) {
            self.site_ids.push(id.to_string());
            self.counters.push(Vec::new());
            if engine.owns(site) {
                self.rebuild(site, engine.pacing());
            }
        }
    }

    /// Takes a site's applications anew after its table changed; applications that
    /// stay keep their metrics (the engine keeps their counters).
    pub fn rebuild<T>(&mut self, site: SiteIdx, pacing: &AppPacing<T>) {
        let site_id = &self.site_ids[site.0 as usize];
        let table = pacing.table(site);
        let mut old: BTreeMap<String, AppCounter> =
            std::mem::take(&mut self.counters[site.0 as usize])
                .into_iter()
                .map(|c| (c.name.clone(), c))
                .collect();
        let (paced, other_dir) = (self.direction.as_str(), self.direction.reverse().as_str());
        let counters: Vec<AppCounter> = (0..pacing.apps(site))
            .map(|i| {
                let name = table.name(AppIdx(i as u32));
                old.remove(name).unwrap_or_else(|| AppCounter {
                    name: name.to_string(),
                    paced: self.metrics.app(site_id, name, paced),
                    other: self.metrics.app(site_id, name, other_dir),
                    exported: AppCounters::default(),
                    reported: AppCounters::default(),
                })
            })
            .collect();
        for gone in old.keys() {
            self.metrics.remove_app(site_id, gone, paced);
            self.metrics.remove_app(site_id, gone, other_dir);
        }
        for (i, c) in counters.iter().enumerate() {
            let target = pacing.target_bps(site, AppIdx(i as u32));
            c.paced
                .target_bps
                .set(i64::try_from(target).unwrap_or(i64::MAX));
        }
        self.counters[site.0 as usize] = counters;
    }

    /// Copies the engine's per-application counters and queues into the metrics.
    pub fn export(&mut self, engine: &DataPath) {
        for (s, counters) in self.counters.iter_mut().enumerate() {
            let site = SiteIdx(s as u32);
            for (i, c) in counters.iter_mut().enumerate() {
                let app = AppIdx(i as u32);
                let now = engine.app_counters(site, app);
                let (m, other, was) = (&c.paced, &c.other, &c.exported);
                count_since(&m.tx_bytes, now.paced_bytes, was.paced_bytes);
                count_since(&other.tx_bytes, now.other_bytes, was.other_bytes);
                let dropped = &other.duplicates_dropped;
                count_since(dropped, now.duplicates_dropped, was.duplicates_dropped);
                count_since(&m.drops, now.drops, was.drops);
                count_since(&m.steered_off, now.steered_off, was.steered_off);
                count_since(&m.duplicates, now.duplicates, was.duplicates);
                count_since(&m.duplicate_bytes, now.duplicate_bytes, was.duplicate_bytes);
                count_since(&m.over_budget, now.over_budget, was.over_budget);
                count_since(&m.deadlines_met, now.deadlines_met, was.deadlines_met);
                count_since(
                    &m.deadlines_missed,
                    now.deadlines_missed,
                    was.deadlines_missed,
                );
                c.exported = now;
                let queue = engine.pacing().queued_bytes(site, app);
                c.paced
                    .queue_bytes
                    .set(i64::try_from(queue).unwrap_or(i64::MAX));
                // A background application's rate moves with its search.
                if let Some(b) = engine.pacing().background(site, app) {
                    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                    c.paced.target_bps.set(gauge(b.rate_bps));
                    c.paced.background_spare_bps.set(gauge(b.spare_bps));
                }
            }
        }
    }

    /// Measures every application's rates since the last report, publishes the new
    /// report of this thread's sites and returns it (other threads' sites without
    /// applications).
    pub fn report(&mut self, now: Instant, engine: &DataPath) -> Vec<SiteReport> {
        let secs = now.saturating_since(self.reported_at).as_secs_f64();
        self.reported_at = now;
        let pacing = engine.pacing();
        let bps = |bytes: u64, before: u64| {
            if secs > 0.0 {
                ((bytes - before) as f64 * 8.0 / secs) as u64
            } else {
                0
            }
        };
        let mut reports = Vec::with_capacity(self.counters.len());
        for (s, counters) in self.counters.iter_mut().enumerate() {
            let site = SiteIdx(s as u32);
            let mut apps = Vec::with_capacity(counters.len());
            for (i, c) in counters.iter_mut().enumerate() {
                let app = AppIdx(i as u32);
                let counts = engine.app_counters(site, app);
                let paced_bps = bps(counts.paced_bytes, c.reported.paced_bytes);
                let other_bps = bps(counts.other_bytes, c.reported.other_bytes);
                c.reported = counts;
                let (rate_up_bps, rate_down_bps) = match self.direction {
                    Direction::Up => (paced_bps, other_bps),
                    Direction::Down => (other_bps, paced_bps),
                };
                let background = pacing.background(site, app);
                apps.push(AppReport {
                    name: c.name.clone(),
                    flows: pacing.flows(site, app),
                    target_bps: pacing.target_bps(site, app),
                    rate_up_bps,
                    rate_down_bps,
                    queue_bytes: pacing.queued_bytes(site, app),
                    drops: counts.drops,
                    steered_off_packets: counts.steered_off,
                    duplicate_packets: counts.duplicates,
                    duplicate_bytes: counts.duplicate_bytes,
                    duplicates_over_budget: counts.over_budget,
                    duplicates_dropped: counts.duplicates_dropped,
                    background_spare_bps: background.map(|b| b.spare_bps),
                    background_queue_ms: background.map(|b| b.queue.as_secs_f64() * 1e3),
                    utility: pacing.table(site).app(app).and_then(|a| a.utility.clone()),
                    deadlines_met: counts.deadlines_met,
                    deadlines_missed: counts.deadlines_missed,
                });
            }
            reports.push(SiteReport {
                site: self.site_ids[s].clone(),
                version: pacing.table(site).version,
                paced_direction: self.direction.as_str(),
                apps,
            });
        }
        let mut published = self.report.lock().unwrap_or_else(|e| e.into_inner());
        if published.len() < reports.len() {
            published.resize_with(reports.len(), SiteReport::default);
        }
        for (s, report) in reports.iter().enumerate() {
            if engine.owns(SiteIdx(s as u32)) {
                published[s].clone_from(report);
            }
        }
        drop(published);
        reports
    }
}
