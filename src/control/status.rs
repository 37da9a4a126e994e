//! `GET /v1/status` and `braid status`: what a gateway is doing, built by the driver
//! once a second from the engine's state and counters, and its 80-column table.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::control::app_stats::SiteReport;
use crate::core::engine::{DataPath, Role, SiteIdx};
use crate::core::stats::DropReason;
use crate::core::time::Instant;

/// The document of `GET /v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Status {
    pub version: String,
    /// `entry` or `exit`.
    pub role: String,
    pub uptime_seconds: u64,
    /// Flows the schedulers track.
    pub flows: u64,
    /// Packets dropped so far, by reason (every reason, zeros included).
    pub drops: BTreeMap<String, u64>,
    pub sites: Vec<SiteStatus>,
    /// A page of sites (`GET /v1/status?limit=N`) that more follow: the last site
    /// given, to ask for the next page with `after=`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl Status {
    /// The sites after `after` in order of their ids, at most `limit` of them, with
    /// `next` set when more follow: an exit of a thousand sites is read a page at a
    /// time.
    pub fn page(mut self, after: Option<&str>, limit: Option<usize>) -> Status {
        self.sites.sort_by(|a, b| a.site.cmp(&b.site));
        if let Some(after) = after {
            self.sites.retain(|s| s.site.as_str() > after);
        }
        if let Some(limit) = limit.filter(|&l| l < self.sites.len()) {
            self.sites.truncate(limit);
            self.next = self.sites.last().map(|s| s.site.clone());
        }
        self
    }

    /// Only `site`'s part (with the gateway's flows and drops); none if it is not
    /// served here.
    pub fn of_site(mut self, site: &str) -> Option<Status> {
        self.sites.retain(|s| s.site == site);
        (!self.sites.is_empty()).then_some(self)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SiteStatus {
    pub site: String,
    pub lanes: Vec<LaneStatus>,
    /// The applications, as `GET /v1/sites/{site}/apps` reports them.
    pub apps: Vec<crate::control::app_stats::AppReport>,
    /// The entry's uplinks with a data cap, and their counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caps: Vec<crate::control::caps::CapStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LaneStatus {
    pub uplink: String,
    pub colour: String,
    /// `up`, `down` (not scheduled: silent, closing or no datagrams) or `replaced`.
    pub state: String,
    /// Seconds in this state.
    pub since_seconds: u64,
    pub srtt_ms: f64,
    /// The least round trip the lane has seen: its path's delay with no queue.
    #[serde(default)]
    pub min_srtt_ms: f64,
    /// The uplink's known rate in this gateway's sending direction (its
    /// `rate_up_kbps` at the entry, `rate_down_kbps` at the exit); absent: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_kbps: Option<u64>,
    /// How much the uplink's one-way delay varies by itself, as the lane's delay cap
    /// allows it: declared, or learned from the lane's lone packets (0: steady).
    #[serde(default)]
    pub delay_variation_ms: f64,
    pub cwnd_bytes: u64,
    pub fill_bytes: u64,
    /// Measured over the last second; up is site to concentrator.
    pub rate_up_bps: u64,
    pub rate_down_bps: u64,
    pub lost_packets: u64,
}

/// Builds [`Status`] documents, measuring lane rates between two builds.
pub struct StatusBuilder {
    role: Role,
    /// (tx bytes, rx bytes) of each lane at the last build, by lane id.
    bytes: Vec<Option<(u64, u64)>>,
    built_at: Instant,
}

impl StatusBuilder {
    pub fn new(role: Role) -> StatusBuilder {
        StatusBuilder {
            role,
            bytes: Vec::new(),
            built_at: Instant::ZERO,
        }
    }

    /// The gateway's status at `now`, with the applications of the last report.
    pub fn build(&mut self, now: Instant, engine: &DataPath, apps: &[SiteReport]) -> Status {
        let secs = now.saturating_since(self.built_at).as_secs_f64();
        self.built_at = now;
        let mut sites: Vec<SiteStatus> = engine
            .sites()
            .map(|(site, id)| SiteStatus {
                site: id.to_string(),
                lanes: Vec::new(),
                apps: apps
                    .get(site.0 as usize)
                    .map(|r| r.apps.clone())
                    .unwrap_or_default(),
                caps: Vec::new(),
            })
            .collect();
        let mut bytes = Vec::new();
        for id in engine.lane_ids() {
            let Some(lane) = engine.lane(id) else {
                continue;
            };
            let (tx, rx) = (lane.counters.tx_bytes, lane.counters.rx_bytes);
            let before = self.bytes.get(id.0 as usize).copied().flatten();
            let bps = |now: u64, then: Option<u64>| match then {
                Some(then) if secs > 0.0 => (now.saturating_sub(then) as f64 * 8.0 / secs) as u64,
                _ => 0,
            };
            let (tx_bps, rx_bps) = (bps(tx, before.map(|b| b.0)), bps(rx, before.map(|b| b.1)));
            let (rate_up_bps, rate_down_bps) = match self.role {
                Role::Entry => (tx_bps, rx_bps),
                Role::Exit => (rx_bps, tx_bps),
            };
            let state = lane.state.as_str();
            sites[lane.site.0 as usize].lanes.push(LaneStatus {
                uplink: lane.uplink.to_string(),
                colour: lane.view.colour.as_str().to_string(),
                state: state.to_string(),
                since_seconds: now.saturating_since(lane.state_since).as_secs(),
                srtt_ms: lane.view.srtt.as_secs_f64() * 1000.0,
                min_srtt_ms: lane.view.min_srtt.as_secs_f64() * 1000.0,
                rate_kbps: lane.view.rate_kbps,
                delay_variation_ms: lane.view.delay_variation.as_secs_f64() * 1000.0,
                cwnd_bytes: lane.view.cwnd,
                fill_bytes: lane.view.fill,
                rate_up_bps,
                rate_down_bps,
                lost_packets: lane.counters.lost_packets,
            });
            let slot = id.0 as usize;
            if bytes.len() <= slot {
                bytes.resize(slot + 1, None);
            }
            bytes[slot] = Some((tx, rx));
        }
        self.bytes = bytes;
        // Sites a reload removed keep their index in the engine, not their place here.
        let mut index = 0;
        sites.retain(|_| {
            index += 1;
            engine.site_served(SiteIdx(index - 1))
        });
        for site in &mut sites {
            site.lanes
                .sort_by(|a, b| (&a.uplink, &a.colour).cmp(&(&b.uplink, &b.colour)));
        }
        Status {
            version: env!("CARGO_PKG_VERSION").to_string(),
            role: match self.role {
                Role::Entry => "entry",
                Role::Exit => "exit",
            }
            .to_string(),
            uptime_seconds: now.as_nanos() / 1_000_000_000,
            flows: engine.flows_active() as u64,
            drops: DropReason::ALL
                .iter()
                .map(|r| (r.as_str().to_string(), engine.dropped(*r)))
                .collect(),
            sites,
            next: None,
        }
    }
}

/// Where the data-path threads publish their status (once a second each), and where
/// `GET /v1/status` reads the gateway's: theirs merged.
#[derive(Debug, Default)]
pub struct StatusBoard {
    /// By thread.
    parts: Mutex<Vec<Status>>,
}

impl StatusBoard {
    pub fn new(threads: usize) -> StatusBoard {
        StatusBoard {
            parts: Mutex::new(vec![Status::default(); threads.max(1)]),
        }
    }

    pub fn publish(&self, thread: usize, status: Status) {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(part) = parts.get_mut(thread) {
            *part = status;
        }
    }

    /// The data-path threads that publish a part.
    pub fn threads(&self) -> usize {
        self.parts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The gateway's status: every thread's flows, drops, lanes and applications.
    pub fn current(&self) -> Status {
        let parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        merge(&parts)
    }
}

/// Merges the statuses of an exit's data-path threads. Each knows every site but
/// reports lanes and applications only for its own: the sites are the first
/// thread's, with every thread's lanes and applications of the same site.
fn merge(parts: &[Status]) -> Status {
    let Some((first, others)) = parts.split_first() else {
        return Status::default();
    };
    let mut merged = first.clone();
    for part in others {
        merged.flows += part.flows;
        for (reason, n) in &part.drops {
            *merged.drops.entry(reason.clone()).or_default() += n;
        }
        for site in &part.sites {
            if let Some(into) = merged.sites.iter_mut().find(|s| s.site == site.site) {
                into.lanes.extend(site.lanes.iter().cloned());
                into.apps.extend(site.apps.iter().cloned());
                into.caps.extend(site.caps.iter().cloned());
            }
        }
    }
    for site in &mut merged.sites {
        site.lanes
            .sort_by(|a, b| (&a.uplink, &a.colour).cmp(&(&b.uplink, &b.colour)));
    }
    merged
}

/// The status as a table of at most 80 columns.
pub fn table(status: &Status) -> String {
    let mut out = format!(
        "braid {} {}, up {}, {} flows\n",
        status.version,
        status.role,
        duration(status.uptime_seconds),
        status.flows
    );
    for site in &status.sites {
        out.push_str(&format!("\nsite {}\n", site.site));
        out.push_str(&format!(
            "  {:<10} {:<5} {:<12} {:>7} {:>7} {:>7} {:>8} {:>8} {:>5}\n",
            "uplink",
            "lane",
            "state",
            "srtt ms",
            "cwnd KB",
            "fill KB",
            "up Mb/s",
            "dn Mb/s",
            "lost"
        ));
        for l in &site.lanes {
            let state = format!("{} {}", l.state, duration(l.since_seconds));
            out.push_str(&format!(
                "  {:<10} {:<5} {:<12} {:>7.1} {:>7.0} {:>7.0} {:>8.1} {:>8.1} {:>5}\n",
                clip(&l.uplink, 10),
                clip(&l.colour, 5),
                clip(&state, 12),
                l.srtt_ms,
                l.cwnd_bytes as f64 / 1000.0,
                l.fill_bytes as f64 / 1000.0,
                l.rate_up_bps as f64 / 1e6,
                l.rate_down_bps as f64 / 1e6,
                compact(l.lost_packets)
            ));
        }
        if site.lanes.is_empty() {
            out.push_str("  no lane\n");
        }
        for c in &site.caps {
            out.push_str(&format!(
                "  data cap of {}: {:.1} of {:.1} MB this period ({})\n",
                c.uplink,
                c.used_bytes as f64 / 1e6,
                c.cap_bytes as f64 / 1e6,
                if c.state == "within" {
                    "within".to_string()
                } else {
                    format!("at the cap: {}", c.state)
                }
            ));
        }
        out.push_str(&format!(
            "  {:<22} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}\n",
            "application", "target", "up Mb/s", "dn Mb/s", "queue KB", "drops", "flows"
        ));
        for a in &site.apps {
            let target = if a.target_bps == 0 {
                "unpaced".to_string()
            } else {
                format!("{:.1}", a.target_bps as f64 / 1e6)
            };
            out.push_str(&format!(
                "  {:<22} {:>8} {:>8.1} {:>8.1} {:>8.0} {:>8} {:>7}\n",
                clip(&a.name, 22),
                target,
                a.rate_up_bps as f64 / 1e6,
                a.rate_down_bps as f64 / 1e6,
                a.queue_bytes as f64 / 1000.0,
                compact(a.drops),
                compact(a.flows)
            ));
            // Only where it happened: an application sent off the uplinks it keeps to.
            if a.steered_off_packets > 0 {
                out.push_str(&format!(
                    "    {} packets off its uplinks: none of them was up\n",
                    compact(a.steered_off_packets)
                ));
            }
            if let Some(spare) = a.background_spare_bps {
                out.push_str(&format!(
                    "    background: spare capacity estimated {:.1} Mb/s, lanes' queue {:.1} ms\n",
                    spare as f64 / 1e6,
                    a.background_queue_ms.unwrap_or_default()
                ));
            }
            if a.deadlines_met + a.deadlines_missed > 0 {
                out.push_str(&format!(
                    "    deadlines met {}, missed {}\n",
                    compact(a.deadlines_met),
                    compact(a.deadlines_missed)
                ));
            }
            if a.duplicate_packets + a.duplicates_over_budget + a.duplicates_dropped > 0 {
                out.push_str(&format!(
                    "    copies sent {} ({} kB), over budget {}, received twice {}\n",
                    compact(a.duplicate_packets),
                    compact(a.duplicate_bytes / 1000),
                    compact(a.duplicates_over_budget),
                    compact(a.duplicates_dropped)
                ));
            }
        }
    }
    let drops: Vec<String> = status
        .drops
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(reason, n)| format!("{reason} {}", compact(*n)))
        .collect();
    out.push_str(&format!(
        "\ndropped: {}\n",
        if drops.is_empty() {
            "nothing".to_string()
        } else {
            drops.join(", ")
        }
    ));
    out
}

/// `text` cut to `width` characters.
fn clip(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

/// A count in at most 5 characters: 12345, then 123k, 1234M, 18E.
fn compact(n: u64) -> String {
    if n < 100_000 {
        return n.to_string();
    }
    let mut value = n / 1000;
    let mut units = ["k", "M", "G", "T", "P", "E"].into_iter().peekable();
    while let Some(unit) = units.next() {
        if value < 10_000 || units.peek().is_none() {
            return format!("{value}{unit}");
        }
        value /= 1000;
    }
    n.to_string()
}

/// Seconds as `42s`, `7m`, `3h`, `12d`.
fn duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::app_stats::AppReport;

    fn of_sites(ids: &[&str]) -> Status {
        Status {
            sites: ids
                .iter()
                .map(|id| SiteStatus {
                    site: id.to_string(),
                    lanes: Vec::new(),
                    apps: Vec::new(),
                    caps: Vec::new(),
                })
                .collect(),
            ..Status::default()
        }
    }

    fn ids(s: &Status) -> Vec<&str> {
        s.sites.iter().map(|s| s.site.as_str()).collect()
    }

    #[test]
    fn sites_are_paged_in_order_of_their_ids() {
        let all = of_sites(&["c", "a", "d", "b"]);
        let first = all.clone().page(None, Some(2));
        assert_eq!(ids(&first), ["a", "b"]);
        assert_eq!(first.next.as_deref(), Some("b"));
        let last = all.clone().page(first.next.as_deref(), Some(2));
        assert_eq!(ids(&last), ["c", "d"]);
        assert_eq!(last.next, None, "nothing follows");
        let whole = all.clone().page(None, None);
        assert_eq!(ids(&whole), ["a", "b", "c", "d"]);
        assert_eq!(whole.next, None);
        assert!(all.clone().page(Some("d"), Some(2)).sites.is_empty());
        assert_eq!(ids(&all.clone().of_site("c").expect("served")), ["c"]);
        assert!(all.of_site("e").is_none());
    }

    fn status() -> Status {
        let lane = |uplink: &str, state: &str| LaneStatus {
            uplink: uplink.into(),
            colour: "blue".into(),
            state: state.into(),
            since_seconds: 4000,
            srtt_ms: 12.345,
            min_srtt_ms: 10.0,
            rate_kbps: Some(20_000),
            delay_variation_ms: 10.0,
            cwnd_bytes: 123_456_789,
            fill_bytes: 99_999_999,
            rate_up_bps: 987_654_321_000,
            rate_down_bps: 50_000_000,
            lost_packets: 123_456_789_012,
        };
        Status {
            version: "0.1.0".into(),
            role: "entry".into(),
            uptime_seconds: 90_000,
            flows: 17,
            drops: [("queue_full".to_string(), 3), ("spoofed".to_string(), 0)].into(),
            sites: vec![SiteStatus {
                site: "branch-with-a-very-long-name".into(),
                lanes: vec![
                    lane("dsl", "up"),
                    lane("a-very-long-uplink-name", "replaced"),
                ],
                apps: vec![AppReport {
                    name: "an-application-with-a-long-name".into(),
                    flows: 3,
                    target_bps: 12_000_000,
                    rate_up_bps: 11_900_000,
                    rate_down_bps: 0,
                    queue_bytes: 65_536,
                    drops: 2,
                    steered_off_packets: 1_234_567,
                    duplicate_packets: 5000,
                    duplicate_bytes: 1_000_000,
                    duplicates_over_budget: 7,
                    duplicates_dropped: 4990,
                    background_spare_bps: Some(31_400_000),
                    background_queue_ms: Some(0.42),
                    utility: Some("video".into()),
                    deadlines_met: 41,
                    deadlines_missed: 3,
                }],
                caps: vec![crate::control::caps::CapStatus {
                    uplink: "lte".into(),
                    used_bytes: 12_345_678,
                    cap_bytes: 20_000_000,
                    period_start: 1_796_515_200,
                    state: "within".into(),
                }],
            }],
            next: None,
        }
    }

    #[test]
    fn the_table_fits_80_columns_and_shows_every_lane_and_application() {
        let text = table(&status());
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{} columns: {line}", line.len());
        }
        assert!(
            text.contains("braid 0.1.0 entry, up 1d, 17 flows"),
            "{text}"
        );
        assert!(text.contains("dsl        blue  up 1h"), "{text}");
        assert!(text.contains("a-very-lon blue  replaced 1h"), "{text}");
        assert!(
            text.contains("an-application-with-a-     12.0     11.9"),
            "{text}"
        );
        assert!(
            text.contains("\n    1234k packets off its uplinks: none of them was up\n"),
            "{text}"
        );
        assert!(
            text.contains("\n    copies sent 5000 (1000 kB), over budget 7, received twice 4990\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\n    background: spare capacity estimated 31.4 Mb/s, lanes' queue 0.4 ms\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("\n    deadlines met 41, missed 3\n"),
            "{text}"
        );
        assert!(text.contains("dropped: queue_full 3\n"), "{text}");
        assert_eq!(
            [0, 99_999, 100_000, 9_999_999, 123_456_789_012, u64::MAX].map(compact),
            ["0", "99999", "100k", "9999k", "123G", "18E"]
        );
    }

    #[test]
    fn the_threads_statuses_merge_into_one_with_each_sites_lanes_and_applications() {
        let own = status();
        // The second thread serves a site of its own, and knows the first's without
        // lanes or applications.
        let mut other = status();
        other.flows = 3;
        other.drops = [
            ("queue_full".to_string(), 2),
            ("handoff_full".to_string(), 1),
        ]
        .into();
        other.sites[0].lanes.clear();
        other.sites[0].apps.clear();
        let mut second_site = status().sites.remove(0);
        second_site.site = "second".into();
        second_site.lanes.truncate(1);
        other.sites.push(second_site.clone());
        let mut first = own.clone();
        first.sites.push(SiteStatus {
            site: "second".into(),
            lanes: Vec::new(),
            apps: Vec::new(),
            caps: Vec::new(),
        });
        let board = StatusBoard::new(2);
        board.publish(0, first);
        board.publish(1, other);
        let merged = board.current();
        assert_eq!(merged.flows, 20);
        assert_eq!(merged.drops["queue_full"], 5);
        assert_eq!(merged.drops["handoff_full"], 1);
        assert_eq!(merged.sites.len(), 2);
        assert_eq!(merged.sites[0].lanes.len(), 2);
        assert_eq!(merged.sites[0].lanes[0].uplink, "a-very-long-uplink-name");
        assert_eq!(merged.sites[0].apps, own.sites[0].apps);
        assert_eq!(merged.sites[1], second_site);
        assert_eq!(StatusBoard::new(1).current(), Status::default());
    }

    #[test]
    fn the_document_round_trips_through_json() {
        let json = serde_json::to_string(&status()).expect("serialise");
        let back: Status = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, status());
    }
}
