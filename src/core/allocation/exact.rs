//! The paper's allocation as a mixed-integer program (its Appendix A), solved exactly
//! by an established solver through `good_lp`.
//!
//! Unknowns, per [`cells`](super::cells): how many applications of each group take
//! each cell (an integer), and, for the first step, whether a cell is used at all (a
//! binary that lets the least utility ignore unused cells). A cell that promises its
//! utility only within a delay is tied to a binary per (route, delay) that holds every
//! uplink of the route within that delay. The paper models each uplink's delay as a
//! piecewise linear function of its load with a binary per segment (its equations 17
//! to 19); as the delay never falls with more load, a delay is kept by keeping the
//! load within the most that gives it, one constraint on the load and no variables
//! for the delay. Traffic routed to any uplink is split freely among them.
//!
//! The paper's formulation has about 2,900 variables per application and took Gurobi
//! 66 s for 110 of them. Counting interchangeable applications instead of choosing for
//! each, and leaving out cells no allocation would choose, makes the program's size
//! depend on the classes and uplinks of a site, not on how many applications it has.

use std::time::Duration;

use good_lp::{
    Expression, ProblemVariables, ResolutionError, Solution, SolutionStatus, SolverModel, Variable,
    WithTimeLimit, constraint, highs, variable,
};

use super::cells::{self, Cell, Group};
use super::utility::{MAX_UTILITY, MIN_UTILITY};
use super::{Allocation, Problem, Route, Violation};

/// Why the exact solve gave no allocation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("the solver found no allocation: {0}")]
    Solver(String),
    #[error("the solver ran out of its {0:?} before proving its allocation best")]
    TimeLimit(Duration),
    #[error("the solver's allocation does not hold: {0}")]
    Invalid(#[from] Violation),
}

/// Solves `problem` exactly, each step within `time_limit`.
pub fn solve(problem: &Problem, time_limit: Duration) -> Result<Allocation, SolveError> {
    if problem.apps.is_empty() {
        return Ok(problem.nothing());
    }
    let groups = cells::groups(problem);
    let cells = cells::cells(problem, &groups);
    // Step 1: the most the least utility can be.
    let all: Vec<usize> = (0..cells.len()).collect();
    let (first, _) = step(problem, &groups, &cells, &all, Step::MaxMin, time_limit)?;
    // Step 2: the most total utility, no application below the first step's least
    // less epsilon.
    let floor = first - problem.epsilon;
    let allowed: Vec<usize> = all
        .into_iter()
        .filter(|&c| cells[c].utility >= floor - 1e-9)
        .collect();
    let (_, counts) = step(problem, &groups, &cells, &allowed, Step::MaxSum, time_limit)?;
    allocation(problem, &groups, &cells, &counts, first)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    MaxMin,
    MaxSum,
}

/// One step over the cells `allowed`: its objective's value and each cell's count
/// (with each uplink's share of the traffic routed to any uplink last).
fn step(
    problem: &Problem,
    groups: &[Group],
    cells: &[Cell],
    allowed: &[usize],
    objective: Step,
    time_limit: Duration,
) -> Result<(f64, Counts), SolveError> {
    let mut vars = ProblemVariables::new();
    let count: Vec<Variable> = allowed
        .iter()
        .map(|&c| {
            let most = groups[cells[c].group].apps.len() as f64;
            vars.add(variable().integer().min(0).max(most))
        })
        .collect();
    let theta = vars.add(variable().min(MIN_UTILITY).max(MAX_UTILITY));
    let used: Vec<Variable> = match objective {
        Step::MaxMin => allowed
            .iter()
            .map(|_| vars.add(variable().binary()))
            .collect(),
        Step::MaxSum => Vec::new(),
    };
    let uplinks = problem.uplinks.len();
    let any: Vec<Variable> = (0..uplinks).map(|_| vars.add(variable().min(0))).collect();
    // A binary per (route, delay) some cell is conditional on, and each cell's.
    let mut conditions: Vec<(Route, f64, Variable)> = Vec::new();
    let mut condition: Vec<Option<Variable>> = Vec::with_capacity(allowed.len());
    for &c in allowed {
        condition.push(cells[c].delay_ms.map(|d| {
            let route = cells[c].route;
            match conditions.iter().find(|&&(r, dd, _)| r == route && dd == d) {
                Some(&(_, _, holds)) => holds,
                None => {
                    let holds = vars.add(variable().binary());
                    conditions.push((route, d, holds));
                    holds
                }
            }
        }));
    }
    let goal: Expression = match objective {
        Step::MaxMin => theta.into(),
        Step::MaxSum => allowed
            .iter()
            .zip(&count)
            .map(|(&c, &n)| cells[c].utility * n)
            .sum(),
    };
    let mut model = vars
        .maximise(goal.clone())
        .using(highs)
        .with_time_limit(time_limit.as_secs_f64());
    for (g, group) in groups.iter().enumerate() {
        let members: Expression = allowed
            .iter()
            .zip(&count)
            .filter(|&(&c, _)| cells[c].group == g)
            .map(|(_, &n)| n)
            .sum();
        model = model.with(constraint!(members == group.apps.len() as f64));
    }
    for (k, &c) in allowed.iter().enumerate() {
        let most = groups[cells[c].group].apps.len() as f64;
        if objective == Step::MaxMin {
            model = model.with(constraint!(count[k] <= most * used[k]));
            let spread = MAX_UTILITY - MIN_UTILITY;
            model = model.with(constraint!(
                theta <= cells[c].utility + spread - spread * used[k]
            ));
        }
        if let Some(holds) = condition[k] {
            model = model.with(constraint!(count[k] <= most * holds));
        }
    }
    let routed_any: Expression = allowed
        .iter()
        .zip(&count)
        .filter(|&(&c, _)| cells[c].route == Route::Any)
        .map(|(&c, &n)| cells[c].rate_kbps * n)
        .sum();
    let split: Expression = any.iter().sum();
    model = model.with(constraint!(split == routed_any));
    for (u, uplink) in problem.uplinks.iter().enumerate() {
        let mut load = Expression::from(any[u]);
        for (&c, &n) in allowed.iter().zip(&count) {
            if cells[c].route == Route::Only(u) {
                load += cells[c].rate_kbps * n;
            }
        }
        let capacity = uplink.capacity_kbps;
        model = model.with(constraint!(load.clone() <= capacity));
        // A delay is kept by keeping the load within what gives it.
        for &(route, d, holds) in &conditions {
            if problem.route_uplinks(route).contains(&u) {
                let within = uplink.delay.load_within(d) * capacity;
                model = model.with(constraint!(
                    load.clone() <= within + (capacity - within) - (capacity - within) * holds
                ));
            }
        }
    }
    let solution = model
        .solve()
        .map_err(|e: ResolutionError| SolveError::Solver(e.to_string()))?;
    // Optimal, or within HiGHS's default relative gap of 0.01 %.
    if matches!(solution.status(), SolutionStatus::TimeLimit) {
        return Err(SolveError::TimeLimit(time_limit));
    }
    let mut counts = vec![0; cells.len()];
    for (&c, &n) in allowed.iter().zip(&count) {
        counts[c] = solution.value(n).round() as usize;
    }
    let any_kbps = any.iter().map(|&a| solution.value(a).max(0.0)).collect();
    Ok((solution.eval(&goal), Counts { counts, any_kbps }))
}

/// A solution: how many applications take each cell, and how the traffic routed to
/// any uplink is split.
struct Counts {
    counts: Vec<usize>,
    any_kbps: Vec<f64>,
}

/// The allocation of `counts`: each group's applications take its cells in order.
fn allocation(
    problem: &Problem,
    groups: &[Group],
    cells: &[Cell],
    counts: &Counts,
    first: f64,
) -> Result<Allocation, SolveError> {
    let granted = cells::grant(problem, groups, cells, &counts.counts);
    // The solver's split, scaled to what it granted exactly (its tolerance).
    let routed: f64 = granted
        .iter()
        .filter(|(_, r)| *r == Route::Any)
        .map(|(rate, _)| rate)
        .sum();
    let split: f64 = counts.any_kbps.iter().sum();
    let any_kbps = counts
        .any_kbps
        .iter()
        .map(|a| if split > 0.0 { a * routed / split } else { 0.0 })
        .collect();
    Ok(problem.settle(&granted, any_kbps, first)?)
}
