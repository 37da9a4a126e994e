//! The fast allocation: water-filling on the utility levels, then a greedy second step.
//!
//! Step one raises a common utility level as far as every application can be given a
//! cell at or above it: for a level, each application takes the cheapest such cell
//! whose delay the uplinks keep under the loads granted so far, and the level holds if
//! the result fits; the highest level that holds is found by bisection over the
//! levels the cells offer. Step two starts from the cheapest cells at that level less
//! epsilon and upgrades one application at a time, each time the upgrade that buys
//! the most utility per kbit/s and still fits. The paper's own sketch of a greedy
//! method (Appendix A.7) raises every application by 0.1 in turn instead; weighing
//! utility against rate lets the second step favour the cheap gains first.
//!
//! Applications are routed to any uplink unless a cell on one uplink alone is cheaper
//! or holds a delay no other route can, and the traffic routed to any uplink is split
//! as AFMT spreads it, the least delay first.

use super::cells::{self, Cell, Group};

/// Bisection steps of the split's delay: a nanosecond's precision over a second.
const SPLIT_STEPS: u32 = 30;
use super::{Allocation, Problem, Route, Violation};

/// Solves `problem` by water-filling and greedy upgrades.
pub fn solve(problem: &Problem) -> Result<Allocation, Violation> {
    if problem.apps.is_empty() {
        return Ok(problem.nothing());
    }
    let groups = cells::groups(problem);
    let cells = cells::cells(problem, &groups);
    let mut levels: Vec<f64> = cells.iter().map(|c| c.utility).collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    // The least level always holds: every group has a starved cell at it.
    let (mut lo, mut hi) = (0, levels.len() - 1);
    let mut best = State::new(problem, &groups, &cells);
    best.fill(levels[0]);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let mut state = State::new(problem, &groups, &cells);
        if state.fill(levels[mid]) {
            best = state;
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let first = levels[lo];
    let mut state = State::new(problem, &groups, &cells);
    if !state.fill(first - problem.epsilon) {
        state = best;
    }
    state.upgrade(first - problem.epsilon);
    let granted = cells::grant(problem, &groups, &cells, &state.counts);
    let any_kbps = state.split().ok_or(Violation::NoRoom)?;
    problem.settle(&granted, any_kbps, first)
}

/// How many applications take each cell, and the load that puts on each uplink.
struct State<'a> {
    problem: &'a Problem<'a>,
    groups: &'a [Group],
    cells: &'a [Cell],
    counts: Vec<usize>,
    /// Load routed to each uplink alone, and to any uplink.
    only_kbps: Vec<f64>,
    any_kbps: f64,
}

impl<'a> State<'a> {
    fn new(problem: &'a Problem, groups: &'a [Group], cells: &'a [Cell]) -> State<'a> {
        State {
            problem,
            groups,
            cells,
            counts: vec![0; cells.len()],
            only_kbps: vec![0.0; problem.uplinks.len()],
            any_kbps: 0.0,
        }
    }

    /// Moves `n` applications into (positive) or out of (negative) cell `c`.
    fn add(&mut self, c: usize, n: isize) {
        let cell = &self.cells[c];
        self.counts[c] = self.counts[c].saturating_add_signed(n);
        let rate = cell.rate_kbps * n as f64;
        match cell.route {
            Route::Any => self.any_kbps += rate,
            Route::Only(u) => self.only_kbps[u] += rate,
        }
    }

    /// Each uplink's share of the traffic routed to any uplink, as AFMT spreads it:
    /// the least delay first, so that the longest delay of the uplinks it uses is as
    /// short as it can be; `None` if the loads do not fit.
    fn split(&self) -> Option<Vec<f64>> {
        let uplinks = &self.problem.uplinks;
        let room = |delay_ms: f64| -> Vec<f64> {
            uplinks
                .iter()
                .zip(&self.only_kbps)
                .map(|(u, &only)| (u.delay.load_within(delay_ms) * u.capacity_kbps - only).max(0.0))
                .collect()
        };
        let longest = uplinks.iter().map(|u| u.delay.most()).fold(0.0, f64::max);
        let full = room(longest);
        let over = uplinks
            .iter()
            .zip(&self.only_kbps)
            .any(|(u, &only)| only > u.capacity_kbps + 1e-6);
        if over || self.any_kbps > full.iter().sum::<f64>() + 1e-6 {
            return None;
        }
        if self.any_kbps <= 0.0 {
            return Some(vec![0.0; uplinks.len()]);
        }
        // The least delay under which the uplinks have room for it all.
        let (mut lo, mut hi) = (0.0, longest);
        for _ in 0..SPLIT_STEPS {
            let mid = (lo + hi) / 2.0;
            if room(mid).iter().sum::<f64>() >= self.any_kbps {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let shares = room(hi);
        let total: f64 = shares.iter().sum();
        Some(shares.iter().map(|s| self.any_kbps * s / total).collect())
    }

    /// Each uplink's delay under the state's loads, if they fit.
    fn delays(&self) -> Option<Vec<f64>> {
        let split = self.split()?;
        let loads: Vec<f64> = split
            .iter()
            .zip(&self.only_kbps)
            .map(|(a, o)| a + o)
            .collect();
        Some(self.problem.delays(&loads))
    }

    /// Whether the loads fit and every used cell's delay holds.
    fn holds(&self) -> bool {
        let Some(delays) = self.delays() else {
            return false;
        };
        self.counts.iter().zip(self.cells).all(|(&n, cell)| {
            n == 0
                || cell
                    .delay_ms
                    .is_none_or(|d| self.problem.route_delay(cell.route, &delays) <= d)
        })
    }

    /// Gives every application the cheapest cell at or above `level` that still
    /// holds, one application at a time; whether all of them found one.
    fn fill(&mut self, level: f64) -> bool {
        let mut order: Vec<(usize, Vec<usize>)> = (0..self.groups.len())
            .map(|g| {
                let mut choices: Vec<usize> = (0..self.cells.len())
                    .filter(|&c| self.cells[c].group == g && self.cells[c].utility >= level - 1e-9)
                    .collect();
                // Cheapest first; any uplink before one alone at the same rate.
                choices.sort_by(|&a, &b| {
                    let (a, b) = (&self.cells[a], &self.cells[b]);
                    a.rate_kbps
                        .total_cmp(&b.rate_kbps)
                        .then(a.route.cmp(&b.route))
                });
                (g, choices)
            })
            .collect();
        // The groups that need the most first, as a packing does: the small ones fit
        // in what is left.
        let need = |choices: &[usize]| choices.first().map_or(0.0, |&c| self.cells[c].rate_kbps);
        order.sort_by(|a, b| need(&b.1).total_cmp(&need(&a.1)));
        for (g, choices) in order {
            for _ in &self.groups[g].apps {
                let fits = choices.iter().copied().find(|&c| {
                    self.add(c, 1);
                    let holds = self.holds();
                    self.add(c, -1);
                    holds
                });
                match fits {
                    Some(c) => self.add(c, 1),
                    None => return false,
                }
            }
        }
        true
    }

    /// Upgrades one application at a time to a cell of more utility, the most utility
    /// per kbit/s first, while the result holds; none falls below `floor`.
    fn upgrade(&mut self, floor: f64) {
        loop {
            let mut best: Option<(f64, usize, usize)> = None;
            for from in 0..self.cells.len() {
                if self.counts[from] == 0 {
                    continue;
                }
                let cell = self.cells[from];
                for to in self.next_cells(from) {
                    let target = &self.cells[to];
                    if target.utility < floor {
                        continue;
                    }
                    let gain = (target.utility - cell.utility)
                        / (target.rate_kbps - cell.rate_kbps).max(1.0);
                    if best.is_some_and(|(b, _, _)| b >= gain) {
                        continue;
                    }
                    self.add(from, -1);
                    self.add(to, 1);
                    if self.holds() {
                        best = Some((gain, from, to));
                    }
                    self.add(to, -1);
                    self.add(from, 1);
                }
            }
            let Some((_, from, to)) = best else {
                return;
            };
            self.add(from, -1);
            self.add(to, 1);
        }
    }

    /// The cells an application in `from` may move up to: on each route and delay
    /// condition of its group, the cheapest cell of more utility.
    fn next_cells(&self, from: usize) -> Vec<usize> {
        let cell = self.cells[from];
        let mut next: Vec<usize> = Vec::new();
        for (c, other) in self.cells.iter().enumerate() {
            if other.group != cell.group || other.utility <= cell.utility {
                continue;
            }
            match next.iter_mut().find(|&&mut n| {
                self.cells[n].route == other.route && self.cells[n].delay_ms == other.delay_ms
            }) {
                Some(n) if self.cells[*n].rate_kbps > other.rate_kbps => *n = c,
                Some(_) => {}
                None => next.push(c),
            }
        }
        next
    }
}
