//! From what a site's gateways report to the table a controller puts to them: the
//! allocation of each direction, turned into the application table's rates, colours
//! and uplinks.
//!
//! The site's entry paces uploads (`rate_up_kbps`) and its exit downloads
//! (`rate_down_kbps`); both get the same table. Each direction is allocated over its
//! own capacities. An application's route is one for both directions (the table's
//! `uplinks` apply in each gateway's sending direction): the download's, which is
//! where most of most applications' bytes go, unless only the upload keeps to one
//! uplink. The table's other fields are the operator's and are kept: the match
//! rules, and applications the gateway controls itself (`background`, with a
//! `deadline`) or that carry no flows, which the allocation leaves out.

use std::collections::{BTreeMap, VecDeque};

use super::catalogue::Class;
use super::utility::DelayFunction;
use super::{Allocation, Problem, Route, Uplink};
use crate::core::lane::Colour;
use crate::core::pacing_table::{AppClass, PacingTable};

/// An uplink of a site as its gateways report it.
#[derive(Debug, Clone, PartialEq)]
pub struct UplinkSeen {
    pub name: String,
    /// Its delay with no queue, one way: half its least round trip.
    pub one_way_ms: f64,
    /// What it carries each way: the configured rate where known, else measured.
    pub up_kbps: f64,
    pub down_kbps: f64,
}

/// A lane of a site as one of its gateways reports it (`GET /v1/status`).
#[derive(Debug, Clone, PartialEq)]
pub struct LaneSeen {
    pub uplink: String,
    pub up: bool,
    pub min_srtt_ms: f64,
    pub srtt_ms: f64,
    pub cwnd_bytes: u64,
    /// The uplink's known rate in the reporting gateway's sending direction.
    pub rate_kbps: Option<u64>,
    /// What the lane sent over the last second, in bit/s.
    pub sent_bps: u64,
}

/// The site's uplinks that have a lane up, from its entry's lanes (what goes up) and
/// its exit's (what comes down; `None` if the exit did not answer, and then the
/// entry's estimate stands for both). An uplink's capacity each way is its known
/// rate, else the most its lanes could send now: the larger of what they sent and
/// their windows per round trip.
pub fn uplinks(entry: &[LaneSeen], exit: Option<&[LaneSeen]>) -> Vec<UplinkSeen> {
    let mut names: Vec<&str> = Vec::new();
    for lane in entry.iter().filter(|l| l.up) {
        if !names.contains(&lane.uplink.as_str()) {
            names.push(&lane.uplink);
        }
    }
    let capacity = |lanes: &[LaneSeen], name: &str| -> Option<f64> {
        let of: Vec<&LaneSeen> = lanes.iter().filter(|l| l.up && l.uplink == name).collect();
        if let Some(known) = of.iter().find_map(|l| l.rate_kbps) {
            return Some(known as f64);
        }
        of.iter()
            .map(|l| {
                let window = l.cwnd_bytes as f64 * 8.0 / l.srtt_ms.max(0.1);
                window.max(l.sent_bps as f64 / 1000.0)
            })
            .reduce(f64::max)
    };
    names
        .into_iter()
        .filter_map(|name| {
            let up = capacity(entry, name)?;
            let down = exit.and_then(|lanes| capacity(lanes, name)).unwrap_or(up);
            let least = entry
                .iter()
                .filter(|l| l.up && l.uplink == name && l.min_srtt_ms > 0.0)
                .map(|l| l.min_srtt_ms)
                .reduce(f64::min)?;
            Some(UplinkSeen {
                name: name.to_string(),
                one_way_ms: least / 2.0,
                up_kbps: up,
                down_kbps: down,
            })
        })
        .collect()
}

/// What of an uplink's rate the allocation grants as throughput: less the tunnel's
/// framing (QUIC, UDP and IP, about 4 %) and a margin that keeps the uplink's queue
/// short, and over [`PACED_PER_GRANTED`], so that the applications' paced rates
/// together never fill the uplink (were they to, its queue would drop packets of
/// every flow: with 96 % paced, 60 applications' VoIP calls lost 2 to 5 % of their
/// packets, `cargo bench --bench section7`).
pub const DATA_PER_CAPACITY: f64 = 0.9 / PACED_PER_GRANTED;

/// The rate an application is paced at for each unit of throughput granted: a TCP
/// flow held to a rate by the gateway's pacer backs off at its queue now and then,
/// and a web page's load waits a round trip for its request, so that either carries
/// about 0.9 of the paced rate, headers counted (`cargo bench --bench section7`).
pub const PACED_PER_GRANTED: f64 = 1.15;

/// Observations of an uplink's capacity that [`CapacityHistory`] keeps.
pub const CAPACITY_SAMPLES: usize = 5;

/// A site's uplinks' capacities over the last periods. Without a known rate, what an
/// uplink could carry is read from what its lanes sent or their window per round
/// trip, which move by a fifth or more from one second to the next under load (72 to
/// 114 Mbit/s on a 100 Mbit/s uplink): reallocating at each would move every rate
/// every period. The median of the last observations moves by a few percent.
#[derive(Debug, Clone, Default)]
pub struct CapacityHistory {
    /// Per uplink, the last observations (up, down), the newest last.
    seen: BTreeMap<String, VecDeque<[f64; 2]>>,
}

impl CapacityHistory {
    /// Records `uplinks` as seen now and returns them with each capacity the median
    /// of its last [`CAPACITY_SAMPLES`] observations; uplinks not seen now are
    /// forgotten.
    pub fn smooth(&mut self, uplinks: Vec<UplinkSeen>) -> Vec<UplinkSeen> {
        self.seen
            .retain(|name, _| uplinks.iter().any(|u| &u.name == name));
        uplinks
            .into_iter()
            .map(|mut u| {
                let history = self.seen.entry(u.name.clone()).or_default();
                if history.len() == CAPACITY_SAMPLES {
                    history.pop_front();
                }
                history.push_back([u.up_kbps, u.down_kbps]);
                let median = |way: usize| {
                    let mut v: Vec<f64> = history.iter().map(|h| h[way]).collect();
                    v.sort_by(f64::total_cmp);
                    v[v.len() / 2]
                };
                u.up_kbps = median(0);
                u.down_kbps = median(1);
                u
            })
            .collect()
    }
}

/// How a site's allocation is made.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub classes: Vec<Class>,
    /// Each class's colour, if it has one (by index, as `classes`).
    pub colours: Vec<Option<Colour>>,
    /// The class of an application whose table entry names none (an index).
    pub default_class: usize,
    pub epsilon: f64,
    /// An uplink's queue: none up to `queue_from` of its capacity, then growing to
    /// `queue_ms` more at full load.
    pub queue_from: f64,
    pub queue_ms: f64,
}

/// What allocating a site gives: the table to put, and each direction's allocation
/// (`None` without applications to allocate).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub table: PacingTable,
    pub up: Option<Allocation>,
    pub down: Option<Allocation>,
}

/// A direction's allocation problem.
pub struct Direction<'a> {
    pub problem: Problem<'a>,
    /// The table's index of each of the problem's applications.
    pub apps: Vec<usize>,
}

/// An uplink's capacity that moved by less than this share of it since the site was
/// last allocated leaves the allocation standing.
pub const CAPACITY_CHANGE: f64 = 0.1;
/// Likewise an uplink's delay, by less than this many milliseconds (or the share
/// above, if more).
pub const DELAY_CHANGE_MS: f64 = 2.0;

/// What a site's allocation was computed from: the table's version, the applications
/// it allocated with their classes, and the uplinks as they were seen. The allocation
/// stands while what the site looks like now is the same within the tolerances above:
/// recomputing at every small change would move every rate (two allocations of equal
/// worth are often far apart) and churn the gateways' tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Basis {
    pub version: u64,
    /// (table index, class) of each allocated application.
    apps: Vec<(usize, usize)>,
    uplinks: Vec<UplinkSeen>,
}

impl Basis {
    /// The basis of `directions` (both allocate the same applications) over
    /// `uplinks`, for the table `version`.
    pub fn new(version: u64, directions: &[Direction; 2], uplinks: &[UplinkSeen]) -> Basis {
        let d = &directions[0];
        Basis {
            version,
            apps: d
                .apps
                .iter()
                .copied()
                .zip(d.problem.apps.iter().copied())
                .collect(),
            uplinks: uplinks.to_vec(),
        }
    }

    /// Whether an allocation made on `self` still stands on `now`.
    pub fn holds_for(&self, now: &Basis) -> bool {
        let near = |a: f64, b: f64| (a - b).abs() <= CAPACITY_CHANGE * a.max(b);
        self.version == now.version
            && self.apps == now.apps
            && self.uplinks.len() == now.uplinks.len()
            && self.uplinks.iter().zip(&now.uplinks).all(|(was, is)| {
                was.name == is.name
                    && near(was.up_kbps, is.up_kbps)
                    && near(was.down_kbps, is.down_kbps)
                    && (was.one_way_ms - is.one_way_ms).abs()
                        <= DELAY_CHANGE_MS.max(CAPACITY_CHANGE * was.one_way_ms)
            })
    }
}

/// The allocation problems of a site's two directions, up and down: the
/// applications of `current` the allocation takes on (foreground ones without a
/// deadline that carry flows, `active` by the table's index) with their classes,
/// over `uplinks`. An error names an application whose class the settings do not
/// know.
pub fn directions<'a>(
    current: &PacingTable,
    active: &[bool],
    uplinks: &[UplinkSeen],
    settings: &'a Settings,
) -> Result<[Direction<'a>; 2], String> {
    let mut apps = Vec::new();
    let mut classes = Vec::new();
    for (i, app) in current.apps.iter().enumerate() {
        if app.class == AppClass::Background
            || app.deadline.is_some()
            || !active.get(i).copied().unwrap_or(false)
        {
            continue;
        }
        let class = match &app.utility {
            None => settings.default_class,
            Some(name) => settings
                .classes
                .iter()
                .position(|c| &c.name == name)
                .ok_or_else(|| format!("apps[{i}].utility: no class \"{name}\""))?,
        };
        apps.push(i);
        classes.push(class);
    }
    let direction = |capacity: fn(&UplinkSeen) -> f64| Direction {
        problem: Problem {
            classes: &settings.classes,
            uplinks: uplinks
                .iter()
                .map(|u| Uplink {
                    name: u.name.clone(),
                    capacity_kbps: capacity(u) * DATA_PER_CAPACITY,
                    delay: DelayFunction::queue_from(
                        u.one_way_ms,
                        settings.queue_from,
                        settings.queue_ms,
                    ),
                })
                .collect(),
            apps: classes.clone(),
            epsilon: settings.epsilon,
        },
        apps: apps.clone(),
    };
    Ok([direction(|u| u.up_kbps), direction(|u| u.down_kbps)])
}

/// The table that puts `up` and `down` (the allocations of [`directions`]) in force,
/// replacing `current`.
pub fn table(
    current: &PacingTable,
    directions: &[Direction; 2],
    up: Option<&Allocation>,
    down: Option<&Allocation>,
    settings: &Settings,
) -> PacingTable {
    let mut table = current.successor();
    let [up_dir, down_dir] = directions;
    for (k, &i) in down_dir.apps.iter().enumerate() {
        let app = &mut table.apps[i];
        let up_grant = up.map(|a| a.grants[k]);
        let down_grant = down.map(|a| a.grants[k]);
        app.rate_up_kbps = up_grant.map(|g| kbps(g.rate_kbps * PACED_PER_GRANTED));
        app.rate_down_kbps = down_grant.map(|g| kbps(g.rate_kbps * PACED_PER_GRANTED));
        let route = match (down_grant.map(|g| g.route), up_grant.map(|g| g.route)) {
            (Some(Route::Only(u)), _) | (Some(Route::Any) | None, Some(Route::Only(u))) => Some(u),
            _ => None,
        };
        app.uplinks = route.map(|u| vec![down_dir.problem.uplinks[u].name.clone()]);
        app.colour = settings.colours[up_dir.problem.apps[k]];
    }
    table
}

/// A rate as the table takes it: whole kbit/s, at least 1.
fn kbps(rate_kbps: f64) -> u64 {
    (rate_kbps.round() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::super::{catalogue, exact};
    use super::*;
    use std::time::Duration;

    fn settings() -> Settings {
        let classes = catalogue::defaults().unwrap();
        let colours = classes
            .iter()
            .map(|c| catalogue::default_colour(&c.name))
            .collect();
        Settings {
            default_class: 1,
            classes,
            colours,
            epsilon: 0.3,
            queue_from: 0.5,
            queue_ms: 20.0,
        }
    }

    fn lane(uplink: &str, up: bool, min_srtt_ms: f64, rate_kbps: Option<u64>) -> LaneSeen {
        LaneSeen {
            uplink: uplink.into(),
            up,
            min_srtt_ms,
            srtt_ms: 2.0 * min_srtt_ms,
            cwnd_bytes: 50_000,
            rate_kbps,
            sent_bps: 1_000_000,
        }
    }

    #[test]
    fn a_sites_uplinks_are_those_with_a_lane_up_at_their_known_or_estimated_rates() {
        let entry = [
            lane("dsl", true, 20.0, Some(10_000)),
            lane("dsl", true, 22.0, Some(10_000)),
            lane("lte", true, 80.0, None),
            lane("cable", false, 30.0, Some(50_000)),
        ];
        let exit = [lane("dsl", true, 20.0, Some(50_000))];
        let seen = uplinks(&entry, Some(&exit));
        assert_eq!(
            seen[0],
            UplinkSeen {
                name: "dsl".into(),
                one_way_ms: 10.0,
                up_kbps: 10_000.0,
                down_kbps: 50_000.0,
            }
        );
        // The LTE's rate is unknown: its window per round trip, 50 kB per 160 ms, both
        // ways (the exit has no lane of it up).
        assert_eq!(seen[1].name, "lte");
        assert_eq!(seen[1].up_kbps, 2500.0);
        assert_eq!(seen[1].down_kbps, 2500.0);
        assert_eq!(seen.len(), 2, "the cable has no lane up");
    }

    #[test]
    fn an_uplinks_capacity_is_the_median_of_its_last_observations() {
        let seen = |name: &str, kbps: f64| UplinkSeen {
            name: name.into(),
            one_way_ms: 5.0,
            up_kbps: kbps,
            down_kbps: 2.0 * kbps,
        };
        let mut history = CapacityHistory::default();
        // What the lanes of a 100 Mbit/s uplink under load reported, a second apart.
        let mut smoothed = Vec::new();
        for kbps in [
            102.0, 94.0, 114.0, 72.0, 94.0, 105.0, 99.0, 99.0, 94.0, 94.0,
        ] {
            let u = history.smooth(vec![seen("wan", kbps * 1000.0)]);
            smoothed.push(u[0].up_kbps / 1000.0);
            assert_eq!(u[0].down_kbps, 2.0 * u[0].up_kbps);
        }
        assert_eq!(
            smoothed,
            [
                102.0, 102.0, 102.0, 102.0, 94.0, 94.0, 99.0, 99.0, 99.0, 99.0
            ]
        );
        // Every step after the first few within CAPACITY_CHANGE of the one before.
        assert!(
            smoothed
                .windows(2)
                .all(|w| (w[0] - w[1]).abs() <= 0.1 * w[0])
        );
        // An uplink gone is forgotten; back, it starts afresh.
        history.smooth(vec![seen("lte", 10_000.0)]);
        assert_eq!(
            history.smooth(vec![seen("wan", 50_000.0)])[0].up_kbps,
            50_000.0
        );
    }

    #[test]
    fn an_allocation_stands_until_the_table_its_applications_or_its_uplinks_change() {
        let settings = settings();
        let current = PacingTable::parse(
            br#"{"version": 4, "apps": [{"name": "calls", "utility": "voip"}, {"name": "files"}]}"#,
        )
        .unwrap();
        let uplink = |kbps: f64, ms: f64| UplinkSeen {
            name: "dsl".into(),
            one_way_ms: ms,
            up_kbps: kbps,
            down_kbps: kbps,
        };
        let basis = |version: u64, active: &[bool], u: UplinkSeen| {
            let mut table = current.clone();
            table.version = version;
            let dirs = directions(&table, active, std::slice::from_ref(&u), &settings).unwrap();
            Basis::new(version, &dirs, &[u])
        };
        let made = basis(4, &[true, true], uplink(20000.0, 10.0));
        // Capacity within a tenth, delay within 2 ms: it stands.
        assert!(made.holds_for(&basis(4, &[true, true], uplink(18500.0, 11.9))));
        // Anything more, another table, an application gone: it is made again.
        assert!(!made.holds_for(&basis(4, &[true, true], uplink(17900.0, 10.0))));
        assert!(!made.holds_for(&basis(4, &[true, true], uplink(20000.0, 12.5))));
        assert!(!made.holds_for(&basis(5, &[true, true], uplink(20000.0, 10.0))));
        assert!(!made.holds_for(&basis(4, &[true, false], uplink(20000.0, 10.0))));
        // A long delay may move by a tenth of it.
        let far = basis(4, &[true, true], uplink(20000.0, 40.0));
        assert!(far.holds_for(&basis(4, &[true, true], uplink(20000.0, 43.9))));
    }

    #[test]
    fn a_sites_table_gets_each_directions_rates_one_route_and_its_classes_colour() {
        let settings = settings();
        let current = PacingTable::parse(
            br#"{"version": 4, "apps": [
                {"name": "calls", "match": {"proto": "udp"}, "utility": "voip"},
                {"name": "files", "match": {"proto": "tcp", "remote_ports": "443"}},
                {"name": "idle", "match": {"remote_ports": "873"}, "utility": "web"},
                {"name": "backup", "match": {"remote_ports": "22"}, "class": "background"}]}"#,
        )
        .unwrap();
        let uplinks = [
            UplinkSeen {
                name: "dsl".into(),
                one_way_ms: 10.0,
                up_kbps: 2000.0,
                down_kbps: 20000.0,
            },
            UplinkSeen {
                name: "lte".into(),
                one_way_ms: 45.0,
                up_kbps: 5000.0,
                down_kbps: 30000.0,
            },
        ];
        // The idle application carries no flows; the background one is the gateway's.
        let active = [true, true, false, true];
        let dirs = directions(&current, &active, &uplinks, &settings).unwrap();
        assert_eq!(dirs[1].apps, [0, 1]);
        let solve = |d: &Direction| exact::solve(&d.problem, Duration::from_secs(10)).unwrap();
        let (up, down) = (solve(&dirs[0]), solve(&dirs[1]));
        let t = table(&current, &dirs, Some(&up), Some(&down), &settings);
        assert_eq!((t.version, t.replaces), (5, Some(4)));
        let calls = &t.apps[0];
        // VoIP: green, kept to the DSL, whose 10 ms the LTE's 45 would spoil.
        assert_eq!(calls.colour, Some(Colour::Green));
        assert_eq!(calls.uplinks.as_deref(), Some(&["dsl".to_string()][..]));
        // Paced 15 % above the throughput granted: what TCP's backing off, a page
        // load's round trips and the headers take.
        assert_eq!(calls.rate_down_kbps, Some(115));
        // The download (the default class): a download's best, anywhere.
        let files = &t.apps[1];
        assert_eq!(files.rate_down_kbps, Some(5750));
        // Each uplink offers the applications its rate less the tunnel's and the
        // headers' share.
        assert_eq!(
            dirs[1].problem.uplinks[0].capacity_kbps,
            20000.0 * 0.9 / 1.15
        );
        assert_eq!(files.colour, None);
        // The others as they were.
        assert_eq!(t.apps[2], current.apps[2]);
        assert_eq!(t.apps[3], current.apps[3]);
        t.validate().unwrap();
        // A class the settings do not know is named.
        let unknown =
            PacingTable::parse(br#"{"version": 1, "apps": [{"name": "x", "utility": "gaming"}]}"#)
                .unwrap();
        assert_eq!(
            directions(&unknown, &[true], &uplinks, &settings).err(),
            Some("apps[0].utility: no class \"gaming\"".to_string())
        );
    }
}
