//! What both solvers choose from: for each class present, the points of its grid an
//! allocation could sensibly grant on each route.
//!
//! A point (throughput level, route, delay level) promises its grid utility if the
//! route's delay stays within the level's delay. Left out: levels the route cannot
//! reach (below its delay with no load), levels past the first it always reaches (its
//! delay at full load), and points another point beats for free (more throughput for
//! no more utility, a tighter delay for no more utility).

use super::utility::MIN_UTILITY;
use super::{Problem, Route};

/// The least rate a starved application is granted: a grant of nothing would leave it
/// unpaced.
pub const STARVED_KBPS: f64 = 64.0;

/// Applications of one class: interchangeable.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub class: usize,
    pub apps: Vec<usize>,
}

/// A point a group's applications may be granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub group: usize,
    pub rate_kbps: f64,
    pub route: Route,
    /// The route's delay must stay within this for the promise to hold (`None`: it
    /// always does).
    pub delay_ms: Option<f64>,
    pub utility: f64,
}

/// The applications grouped by class, in the order classes first appear.
pub fn groups(problem: &Problem) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (app, &class) in problem.apps.iter().enumerate() {
        match groups.iter_mut().find(|g| g.class == class) {
            Some(g) => g.apps.push(app),
            None => groups.push(Group {
                class,
                apps: vec![app],
            }),
        }
    }
    groups
}

/// Every group's cells, and for each group a last resort: starved, at the least
/// utility, on any uplink (so that a site too small for every application's least
/// level still gets an allocation).
pub fn cells(problem: &Problem, groups: &[Group]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let utility = &problem.classes[group.class].utility;
        let delays = utility.delay_ms();
        for route in problem.routes() {
            let uplinks = &problem.uplinks[problem.route_uplinks(route)];
            let least = uplinks.iter().map(|u| u.delay.least()).fold(0.0, f64::max);
            let most = uplinks.iter().map(|u| u.delay.most()).fold(0.0, f64::max);
            let (first, always) = (utility.delay_level(least), utility.delay_level(most));
            if delays[first] < least {
                // Even the last level is tighter than the route with no load: the
                // grid's last level stands for everything beyond it.
                push_levels(&mut cells, g, utility, route, first, None);
                continue;
            }
            for (j, &delay) in delays.iter().enumerate().take(always + 1).skip(first) {
                let condition = (j < always).then_some(delay);
                // A tighter level that promises nothing more than the next is left
                // out: the next is easier to keep.
                if j < always
                    && (0..utility.throughput_kbps().len())
                        .all(|i| utility.at_level(i, j) <= utility.at_level(i, j + 1))
                {
                    continue;
                }
                push_levels(&mut cells, g, utility, route, j, condition);
            }
        }
        cells.push(Cell {
            group: g,
            rate_kbps: STARVED_KBPS,
            route: Route::Any,
            delay_ms: None,
            utility: MIN_UTILITY,
        });
    }
    cells
}

/// What each application is granted when `counts[c]` of its group take cell `c`:
/// a group's applications take its cells in order.
pub fn grant(
    problem: &Problem,
    groups: &[Group],
    cells: &[Cell],
    counts: &[usize],
) -> Vec<(f64, Route)> {
    let mut granted = vec![(STARVED_KBPS, Route::Any); problem.apps.len()];
    for (g, group) in groups.iter().enumerate() {
        let mut apps = group.apps.iter();
        for (c, cell) in cells.iter().enumerate().filter(|(_, c)| c.group == g) {
            for &app in apps.by_ref().take(counts[c]) {
                granted[app] = (cell.rate_kbps, cell.route);
            }
        }
    }
    granted
}

/// The throughput levels of delay level `j` that promise more than the level below.
fn push_levels(
    cells: &mut Vec<Cell>,
    group: usize,
    utility: &super::utility::UtilityFunction,
    route: Route,
    j: usize,
    delay_ms: Option<f64>,
) {
    let mut below = f64::NEG_INFINITY;
    for (i, &rate_kbps) in utility.throughput_kbps().iter().enumerate() {
        let u = utility.at_level(i, j);
        if u > below {
            cells.push(Cell {
                group,
                rate_kbps,
                route,
                delay_ms,
                utility: u,
            });
            below = u;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalogue;
    use super::super::tests::uplink;
    use super::*;

    #[test]
    fn cells_keep_what_a_route_can_reach_and_drop_what_is_beaten_for_free() {
        let classes = catalogue::defaults().unwrap();
        let problem = Problem {
            classes: &classes,
            uplinks: vec![uplink("dsl", 10.0, 10.0), uplink("lte", 10.0, 40.0)],
            // Two terminals and a download.
            apps: vec![2, 1, 2],
            epsilon: 0.3,
        };
        let groups = groups(&problem);
        assert_eq!(
            groups,
            [
                Group {
                    class: 2,
                    apps: vec![0, 2]
                },
                Group {
                    class: 1,
                    apps: vec![1]
                }
            ]
        );
        let cells = cells(&problem, &groups);
        let terminal: Vec<&Cell> = cells.iter().filter(|c| c.group == 0).collect();
        // The terminal depends on delay alone: one rate. On the DSL (10 to 30 ms)
        // the 34.5 ms level always holds, and the 0 ms level never can; on the LTE or
        // anywhere (40 to 60 ms), the 69 ms level always holds.
        assert!(
            terminal
                .iter()
                .all(|c| c.rate_kbps == 100.0 || c.rate_kbps == STARVED_KBPS)
        );
        let on = |route| -> Vec<(Option<f64>, f64)> {
            terminal
                .iter()
                .filter(|c| c.route == route && c.rate_kbps == 100.0)
                .map(|c| (c.delay_ms, c.utility))
                .collect()
        };
        assert_eq!(on(Route::Only(0)), [(None, 4.75)]);
        assert_eq!(on(Route::Only(1)), [(None, 4.25)]);
        assert_eq!(on(Route::Any), [(None, 4.25)]);
        // The download: more throughput, more utility, each level once per route.
        let download: Vec<f64> = cells
            .iter()
            .filter(|c| {
                c.group == 1
                    && c.route == Route::Any
                    && c.delay_ms.is_none()
                    && c.rate_kbps != STARVED_KBPS
            })
            .map(|c| c.utility)
            .collect();
        assert!(download.windows(2).all(|w| w[0] < w[1]), "{download:?}");
        // And each group's last resort.
        assert_eq!(
            cells.iter().filter(|c| c.rate_kbps == STARVED_KBPS).count(),
            2
        );
    }
}
