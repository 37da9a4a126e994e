//! The controller's allocation: each application's share of a site's uplinks, from
//! utility functions of throughput and delay (the pacing paper's Sections 4 and 5, its
//! Appendix A).
//!
//! Two steps, as in the paper: the first maximises the least utility of any
//! application; the second maximises the sum of utilities while the least stays within
//! `epsilon` of the first step's. An application is granted one throughput level of its
//! class's grid and a route: any uplink (AFMT stripes it over all of them, and its delay
//! is the longest uplink's) or one uplink only (the application table's allow list).
//! An uplink's delay grows with its load ([`utility::DelayFunction`]), so what one
//! application is granted costs the others delay as well as capacity.
//!
//! Two solvers: [`exact`], the paper's mixed-integer program solved by an established
//! solver, and [`fast`], water-filling on the utility levels and a greedy second step,
//! for fleets where the exact one would not finish in time. Both work on the same
//! [`cells`]: applications of one class are interchangeable, so the unknowns are how
//! many of a class take each (throughput, route, delay) point of its grid, not which
//! point each application takes, and points no allocation would choose are left out.

pub mod catalogue;
mod cells;
pub mod exact;
pub mod fast;
pub mod lease;
pub mod plan;
pub mod utility;

use catalogue::Class;
use utility::DelayFunction;

/// An uplink of a site, as the allocation sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Uplink {
    pub name: String,
    pub capacity_kbps: f64,
    /// Its delay (one way) as a function of its load.
    pub delay: DelayFunction,
}

/// Where an application's traffic may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// Any uplink: AFMT spreads it.
    Any,
    /// Only this uplink (by index).
    Only(usize),
}

/// One site's allocation problem.
#[derive(Debug, Clone)]
pub struct Problem<'a> {
    pub classes: &'a [Class],
    pub uplinks: Vec<Uplink>,
    /// The class (index into `classes`) of each application.
    pub apps: Vec<usize>,
    /// How far below the first step's least utility the second may go.
    pub epsilon: f64,
}

/// What one application is granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    pub rate_kbps: f64,
    pub route: Route,
    /// Its utility at that rate over its route's delay under the allocation's loads.
    pub utility: f64,
}

/// A site's allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// One per application, in the problem's order.
    pub grants: Vec<Grant>,
    /// What each uplink carries of the applications routed to any uplink.
    pub any_kbps: Vec<f64>,
    /// The first step's least utility.
    pub first_min_utility: f64,
    pub min_utility: f64,
    pub total_utility: f64,
}

/// Why an allocation does not hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Violation {
    #[error("uplink {uplink} carries {load_kbps:.0} kbit/s of {capacity_kbps:.0}")]
    OverCapacity {
        uplink: usize,
        load_kbps: f64,
        capacity_kbps: f64,
    },
    #[error("the uplinks carry {split_kbps:.0} kbit/s of {granted_kbps:.0} granted to any uplink")]
    SplitMismatch { split_kbps: f64, granted_kbps: f64 },
    #[error("application {app} is routed to uplink {uplink}, which does not exist")]
    NoSuchUplink { app: usize, uplink: usize },
    #[error("the uplinks cannot carry every application's least rate")]
    NoRoom,
}

/// The share of a controller's period the exact solve may take (of each step): the
/// rest is for reading the fleet and putting the tables.
pub const EXACT_SHARE_OF_PERIOD: u32 = 4;

/// The method whose allocation stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Exact,
    Fast,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::Fast => "fast",
        }
    }
}

/// Of what the two methods gave (either may have given nothing), the allocation to put
/// in force: the exact one where it finished, else the fast one; and, where both
/// gave one, how far the fast one's total utility fell below the exact one's, as a
/// fraction.
pub fn choose(
    exact: Option<Allocation>,
    fast: Option<Allocation>,
) -> Option<(Allocation, Method, Option<f64>)> {
    let gap = match (&exact, &fast) {
        (Some(e), Some(f)) if e.total_utility > 0.0 => {
            Some((e.total_utility - f.total_utility) / e.total_utility)
        }
        (Some(_), Some(_)) => Some(0.0),
        _ => None,
    };
    match (exact, fast) {
        (Some(e), _) => Some((e, Method::Exact, gap)),
        (None, Some(f)) => Some((f, Method::Fast, gap)),
        (None, None) => None,
    }
}

/// Rates and capacities are compared to within this (kbit/s): solvers' tolerance.
const SLACK_KBPS: f64 = 1e-3;

impl Problem<'_> {
    /// The routes an application may be given: any uplink, and each uplink alone when
    /// there is more than one.
    pub fn routes(&self) -> Vec<Route> {
        let mut routes = vec![Route::Any];
        if self.uplinks.len() > 1 {
            routes.extend((0..self.uplinks.len()).map(Route::Only));
        }
        routes
    }

    /// The uplinks a route may use.
    pub fn route_uplinks(&self, route: Route) -> std::ops::Range<usize> {
        match route {
            Route::Any => 0..self.uplinks.len(),
            Route::Only(u) => u..u + 1,
        }
    }

    /// The delay of a route under `delays` (one per uplink): its longest uplink's.
    pub fn route_delay(&self, route: Route, delays: &[f64]) -> f64 {
        delays[self.route_uplinks(route)]
            .iter()
            .copied()
            .fold(0.0, f64::max)
    }

    /// Each uplink's delay under `loads_kbps`.
    pub fn delays(&self, loads_kbps: &[f64]) -> Vec<f64> {
        self.uplinks
            .iter()
            .zip(loads_kbps)
            .map(|(u, &load)| u.delay.at(load / u.capacity_kbps))
            .collect()
    }

    /// The allocation of a site without applications: nothing granted, every uplink
    /// idle (the least utility is the best there is, as nobody is below it).
    pub fn nothing(&self) -> Allocation {
        let loads = vec![0.0; self.uplinks.len()];
        Allocation {
            grants: Vec::new(),
            any_kbps: loads,
            first_min_utility: utility::MAX_UTILITY,
            min_utility: utility::MAX_UTILITY,
            total_utility: 0.0,
        }
    }

    /// The allocation of `rates` and `routes` (one each per application) with the
    /// traffic routed to any uplink split as `any_kbps`: each application's utility
    /// under the loads that result, checked against the uplinks' capacities.
    pub fn settle(
        &self,
        granted: &[(f64, Route)],
        any_kbps: Vec<f64>,
        first_min_utility: f64,
    ) -> Result<Allocation, Violation> {
        let mut loads = any_kbps.clone();
        let mut any_granted = 0.0;
        for (app, &(rate, route)) in granted.iter().enumerate() {
            match route {
                Route::Any => any_granted += rate,
                Route::Only(u) => {
                    *loads
                        .get_mut(u)
                        .ok_or(Violation::NoSuchUplink { app, uplink: u })? += rate
                }
            }
        }
        let split: f64 = any_kbps.iter().sum();
        if (split - any_granted).abs() > SLACK_KBPS * (1.0 + any_granted / 1e3) {
            return Err(Violation::SplitMismatch {
                split_kbps: split,
                granted_kbps: any_granted,
            });
        }
        for (uplink, (u, &load)) in self.uplinks.iter().zip(&loads).enumerate() {
            if load > u.capacity_kbps + SLACK_KBPS * (1.0 + u.capacity_kbps / 1e3) {
                return Err(Violation::OverCapacity {
                    uplink,
                    load_kbps: load,
                    capacity_kbps: u.capacity_kbps,
                });
            }
        }
        let delays = self.delays(&loads);
        let grants: Vec<Grant> = granted
            .iter()
            .zip(&self.apps)
            .map(|(&(rate_kbps, route), &class)| Grant {
                rate_kbps,
                route,
                utility: self.classes[class]
                    .utility
                    .at(rate_kbps, self.route_delay(route, &delays)),
            })
            .collect();
        let min_utility = grants
            .iter()
            .map(|g| g.utility)
            .fold(utility::MAX_UTILITY, f64::min);
        let total_utility = grants.iter().map(|g| g.utility).sum();
        Ok(Allocation {
            grants,
            any_kbps,
            first_min_utility,
            min_utility,
            total_utility,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `count` applications of each class of the defaults, cycling through them.
    pub(crate) fn mixed(count: usize) -> Vec<usize> {
        (0..count).map(|i| i % 5).collect()
    }

    /// An uplink of `mbps` with `base_ms` of propagation and a queue that grows from
    /// half its capacity to 20 ms at full load.
    pub(crate) fn uplink(name: &str, mbps: f64, base_ms: f64) -> Uplink {
        Uplink {
            name: name.to_string(),
            capacity_kbps: mbps * 1000.0,
            delay: DelayFunction::queue_from(base_ms, 0.5, 20.0),
        }
    }

    #[test]
    fn the_exact_allocation_stands_where_it_finished_and_the_gap_is_told_where_both_ran() {
        let with_total = |total_utility: f64| Allocation {
            grants: Vec::new(),
            any_kbps: Vec::new(),
            first_min_utility: 1.0,
            min_utility: 1.0,
            total_utility,
        };
        let (a, method, gap) = choose(Some(with_total(100.0)), Some(with_total(97.0))).unwrap();
        assert_eq!(
            (a.total_utility, method, gap),
            (100.0, Method::Exact, Some(0.03))
        );
        let (a, method, gap) = choose(None, Some(with_total(97.0))).unwrap();
        assert_eq!((a.total_utility, method, gap), (97.0, Method::Fast, None));
        assert_eq!(choose(Some(with_total(5.0)), None).unwrap().2, None);
        assert!(choose(None, None).is_none());
    }

    #[test]
    fn settling_an_allocation_counts_each_uplinks_load_and_each_applications_utility() {
        let classes = catalogue::defaults().unwrap();
        let problem = Problem {
            classes: &classes,
            uplinks: vec![uplink("dsl", 10.0, 10.0), uplink("lte", 10.0, 40.0)],
            // A download and a terminal.
            apps: vec![1, 2],
            epsilon: 0.3,
        };
        // The download anywhere at 5 Mbit/s, split evenly; the terminal on the DSL.
        let a = problem
            .settle(
                &[(5000.0, Route::Any), (100.0, Route::Only(0))],
                vec![2500.0, 2500.0],
                1.0,
            )
            .unwrap();
        // Both uplinks under half load: no queue. The download sees the LTE's 40 ms,
        // the terminal the DSL's 10.
        assert_eq!(a.grants[0].utility, classes[1].utility.at(5000.0, 40.0));
        assert_eq!(a.grants[1].utility, classes[2].utility.at(100.0, 10.0));
        assert_eq!(a.min_utility, a.grants[0].utility.min(a.grants[1].utility));
        let over = problem.settle(
            &[(5000.0, Route::Any), (100.0, Route::Only(0))],
            vec![0.0, 5000.0],
            1.0,
        );
        assert!(over.is_ok(), "5 of 10 Mbit/s on the LTE fits");
        let over = problem.settle(
            &[(12000.0, Route::Any), (100.0, Route::Only(0))],
            vec![0.0, 12000.0],
            1.0,
        );
        assert!(matches!(
            over,
            Err(Violation::OverCapacity { uplink: 1, .. })
        ));
        let lost = problem.settle(
            &[(5000.0, Route::Any), (100.0, Route::Only(0))],
            vec![1000.0, 1000.0],
            1.0,
        );
        assert!(matches!(lost, Err(Violation::SplitMismatch { .. })));
    }
}

#[cfg(test)]
mod solver_tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::tests::{mixed, uplink};
    use super::*;

    const LIMIT: Duration = Duration::from_secs(20);

    fn check(problem: &Problem, a: &Allocation) {
        assert_eq!(a.grants.len(), problem.apps.len());
        assert!(
            a.min_utility >= a.first_min_utility - problem.epsilon - 1e-9,
            "least {} below the first step's {} less {}",
            a.min_utility,
            a.first_min_utility,
            problem.epsilon
        );
    }

    #[test]
    fn a_site_without_applications_is_allocated_nothing_by_either_solver() {
        let classes = catalogue::defaults().unwrap();
        let problem = Problem {
            classes: &classes,
            uplinks: vec![uplink("dsl", 50.0, 10.0), uplink("lte", 50.0, 40.0)],
            apps: Vec::new(),
            epsilon: 0.3,
        };
        for a in [
            exact::solve(&problem, LIMIT).unwrap(),
            fast::solve(&problem).unwrap(),
        ] {
            assert!(a.grants.is_empty());
            assert_eq!(a.total_utility, 0.0);
        }
    }

    #[test]
    fn one_uplink_and_the_five_classes_both_solvers_agree_on_the_least_utility() {
        let classes = catalogue::defaults().unwrap();
        for (mbps, apps) in [(100.0, 20), (100.0, 60), (20.0, 20)] {
            let problem = Problem {
                classes: &classes,
                uplinks: vec![uplink("wan", mbps, 2.0)],
                apps: mixed(apps),
                epsilon: 0.3,
            };
            let exact = exact::solve(&problem, LIMIT).unwrap();
            let fast = fast::solve(&problem).unwrap();
            check(&problem, &exact);
            check(&problem, &fast);
            println!(
                "{mbps} Mbit/s, {apps} apps: exact least {:.2} (first {:.2}) total {:.1}; fast least {:.2} (first {:.2}) total {:.1}",
                exact.min_utility,
                exact.first_min_utility,
                exact.total_utility,
                fast.min_utility,
                fast.first_min_utility,
                fast.total_utility
            );
            assert!(exact.first_min_utility >= fast.first_min_utility - SOLVER_TOLERANCE);
        }
    }

    /// How far HiGHS's optimum may fall short of a bound it meets exactly in
    /// arithmetic: it works to a tolerance of about 1e-6 (4.249999 for 4.25 was seen).
    const SOLVER_TOLERANCE: f64 = 1e-5;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn random_sites_fit_their_uplinks_and_keep_the_least_utility(
            uplinks in proptest::collection::vec((2.0..60.0f64, 2.0..50.0f64, 0.2..0.9f64, 5.0..80.0f64), 1..4),
            apps in proptest::collection::vec(0..5usize, 1..25),
        ) {
            let classes = catalogue::defaults().unwrap();
            let problem = Problem {
                classes: &classes,
                uplinks: uplinks
                    .iter()
                    .enumerate()
                    .map(|(i, &(mbps, base, from, queue))| Uplink {
                        name: format!("u{i}"),
                        capacity_kbps: mbps * 1000.0,
                        delay: utility::DelayFunction::queue_from(base, from, queue),
                    })
                    .collect(),
                apps,
                epsilon: 0.3,
            };
            let exact = exact::solve(&problem, LIMIT).unwrap();
            let fast = fast::solve(&problem).unwrap();
            check(&problem, &exact);
            check(&problem, &fast);
            // HiGHS meets its bounds within its tolerances (about 1e-6).
            prop_assert!(exact.first_min_utility >= fast.first_min_utility - SOLVER_TOLERANCE,
                "exact {} below fast {}", exact.first_min_utility, fast.first_min_utility);
        }
    }
}
