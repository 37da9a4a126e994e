//! Utility functions of throughput and delay (the pacing paper's Section 4, Fig. 6) and
//! the delay of an uplink as a function of its load (its Appendix A.6).

use crate::core::field_error::FieldError;

/// The lowest and highest utility: the mean opinion score's scale.
pub const MIN_UTILITY: f64 = 1.0;
pub const MAX_UTILITY: f64 = 5.0;

/// An application class's utility on a grid: `utility[i][j]` at `throughput_kbps[i]`
/// and `delay_ms[j]`, both ascending.
///
/// A grid point is a promise the allocation can keep: granted `throughput_kbps[i]`
/// over a path whose delay is at most `delay_ms[j]`, the application gets at least
/// `utility[i][j]`. Measured grids are not monotone (the paper's download is worth
/// 1.17 at 607 kbit/s and no delay, 1.10 at 17 ms); a grant of more throughput or a
/// path of less delay can only help, so the function keeps the envelope: the best
/// of every point it dominates ([`UtilityFunction::at_level`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UtilityFunction {
    throughput_kbps: Vec<f64>,
    delay_ms: Vec<f64>,
    /// The envelope: `best[i][j]` is the most utility of any grid point at or below
    /// throughput `i` and at or above delay `j`.
    best: Vec<Vec<f64>>,
}

impl UtilityFunction {
    /// Checks the grid; errors name the field (`throughput_kbps[2]`, `utility[1][0]`).
    pub fn new(
        throughput_kbps: Vec<f64>,
        delay_ms: Vec<f64>,
        utility: Vec<Vec<f64>>,
    ) -> Result<UtilityFunction, FieldError> {
        ascending("throughput_kbps", &throughput_kbps, f64::MIN_POSITIVE)?;
        ascending("delay_ms", &delay_ms, 0.0)?;
        if utility.len() != throughput_kbps.len() {
            return Err(FieldError::new(
                "utility",
                format!(
                    "has {} rows, one per throughput ({} of them) is needed",
                    utility.len(),
                    throughput_kbps.len()
                ),
            ));
        }
        for (i, row) in utility.iter().enumerate() {
            if row.len() != delay_ms.len() {
                return Err(FieldError::new(
                    format!("utility[{i}]"),
                    format!(
                        "has {} values, one per delay ({} of them) is needed",
                        row.len(),
                        delay_ms.len()
                    ),
                ));
            }
            if let Some(j) = row
                .iter()
                .position(|u| !(MIN_UTILITY..=MAX_UTILITY).contains(u))
            {
                return Err(FieldError::new(
                    format!("utility[{i}][{j}]"),
                    format!("must be {MIN_UTILITY} to {MAX_UTILITY}"),
                ));
            }
        }
        let mut best = utility;
        for i in 0..best.len() {
            for j in (0..delay_ms.len()).rev() {
                let mut u = best[i][j];
                if j + 1 < delay_ms.len() {
                    u = u.max(best[i][j + 1]);
                }
                if i > 0 {
                    u = u.max(best[i - 1][j]);
                }
                best[i][j] = u;
            }
        }
        Ok(UtilityFunction {
            throughput_kbps,
            delay_ms,
            best,
        })
    }

    pub fn throughput_kbps(&self) -> &[f64] {
        &self.throughput_kbps
    }

    pub fn delay_ms(&self) -> &[f64] {
        &self.delay_ms
    }

    /// The utility promised at throughput level `i` over a path of at most delay
    /// level `j`'s delay.
    pub fn at_level(&self, i: usize, j: usize) -> f64 {
        self.best[i][j]
    }

    /// The delay level a path of `delay_ms` reaches: the least grid delay at or
    /// above it (give or take a nanosecond: a solver fills an uplink up to exactly
    /// the load of a level's delay, and rounding must not push it past). Beyond the
    /// grid, its last level: the measurements end there.
    pub fn delay_level(&self, delay_ms: f64) -> usize {
        self.delay_ms
            .iter()
            .position(|&d| d >= delay_ms - 1e-6)
            .unwrap_or(self.delay_ms.len() - 1)
    }

    /// The utility of `throughput_kbps` over a path of `delay_ms`: the grid's, at the
    /// highest throughput level it reaches; [`MIN_UTILITY`] below the first.
    pub fn at(&self, throughput_kbps: f64, delay_ms: f64) -> f64 {
        // A rate that is a level, give or take rounding, reaches it.
        let reached = self
            .throughput_kbps
            .iter()
            .rposition(|&t| t <= throughput_kbps * (1.0 + 1e-9));
        reached.map_or(MIN_UTILITY, |i| {
            self.at_level(i, self.delay_level(delay_ms))
        })
    }
}

/// A non-decreasing, piecewise linear function of an uplink's load: the delay its
/// packets see (the propagation delay plus the queue that grows with its load), at
/// `load[k]` of its capacity `delay_ms[k]`, linear in between. The paper's example:
/// 10 ms of propagation and no queue up to a tenth of the capacity, then a queue
/// that grows to 70 ms at full load is `load = [0, 0.1, 1]`, `delay_ms = [10, 10, 80]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayFunction {
    load: Vec<f64>,
    delay_ms: Vec<f64>,
}

impl DelayFunction {
    /// Checks the breakpoints: loads from 0 to 1, ascending; delays non-decreasing.
    pub fn new(load: Vec<f64>, delay_ms: Vec<f64>) -> Result<DelayFunction, FieldError> {
        if load.len() < 2 || load.len() != delay_ms.len() {
            return Err(FieldError::new(
                "load",
                "needs two or more points, as many as delay_ms has",
            ));
        }
        if load[0] != 0.0 || load[load.len() - 1] != 1.0 {
            return Err(FieldError::new("load", "must run from 0 to 1"));
        }
        ascending("load", &load, 0.0)?;
        if let Some(k) = (1..delay_ms.len()).find(|&k| delay_ms[k] < delay_ms[k - 1]) {
            return Err(FieldError::new(
                format!("delay_ms[{k}]"),
                "must not be below the one before: more load never means less delay",
            ));
        }
        if delay_ms[0] < 0.0 || !delay_ms.iter().all(|d| d.is_finite()) {
            return Err(FieldError::new(
                "delay_ms",
                "must be finite and not negative",
            ));
        }
        Ok(DelayFunction { load, delay_ms })
    }

    /// `base_ms` of propagation, and a queue that grows linearly from `from` of the
    /// capacity to `queue_ms` at full load.
    pub fn queue_from(base_ms: f64, from: f64, queue_ms: f64) -> DelayFunction {
        DelayFunction {
            load: vec![0.0, from, 1.0],
            delay_ms: vec![base_ms, base_ms, base_ms + queue_ms],
        }
    }

    /// The delay at `load` of the capacity (clamped to 0..=1).
    pub fn at(&self, load: f64) -> f64 {
        let load = load.clamp(0.0, 1.0);
        let k = self
            .load
            .windows(2)
            .position(|w| load <= w[1])
            .unwrap_or(self.load.len() - 2);
        let (l0, l1) = (self.load[k], self.load[k + 1]);
        let (d0, d1) = (self.delay_ms[k], self.delay_ms[k + 1]);
        if l1 <= l0 {
            return d1;
        }
        d0 + (d1 - d0) * (load - l0) / (l1 - l0)
    }

    /// The most load (a fraction of the capacity) under which the delay stays within
    /// `delay_ms`: 0 if it never does, 1 if it always does.
    pub fn load_within(&self, delay_ms: f64) -> f64 {
        if delay_ms >= self.most() {
            return 1.0;
        }
        if delay_ms < self.least() {
            return 0.0;
        }
        // The first breakpoint beyond the delay; the load where the segment before
        // it crosses the delay.
        let k = self
            .delay_ms
            .iter()
            .position(|&d| d > delay_ms)
            .unwrap_or(0)
            .max(1);
        let (l0, l1) = (self.load[k - 1], self.load[k]);
        let (d0, d1) = (self.delay_ms[k - 1], self.delay_ms[k]);
        l0 + (l1 - l0) * (delay_ms - d0) / (d1 - d0)
    }

    /// The delay with no load, and at full load.
    pub fn least(&self) -> f64 {
        self.delay_ms[0]
    }

    pub fn most(&self) -> f64 {
        self.delay_ms[self.delay_ms.len() - 1]
    }
}

/// Checks that `values` are finite, at least `min` and strictly ascending.
fn ascending(name: &str, values: &[f64], min: f64) -> Result<(), FieldError> {
    if values.is_empty() {
        return Err(FieldError::new(name, "needs at least one value"));
    }
    for (k, &v) in values.iter().enumerate() {
        if !v.is_finite() || v < min {
            return Err(FieldError::new(
                format!("{name}[{k}]"),
                format!("must be a number of at least {min}"),
            ));
        }
        if k > 0 && v <= values[k - 1] {
            return Err(FieldError::new(
                format!("{name}[{k}]"),
                "must be above the one before",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's example of utility selection (Appendix A.3): throughput
    /// 100, 500 and 1000 kbit/s, delay demands of 50, 100 and 150 ms, 4.9 at best
    /// and 1.3 at worst. (The text keeps only those two corners of its matrix; the
    /// rest is filled in between.)
    fn example() -> UtilityFunction {
        UtilityFunction::new(
            vec![100.0, 500.0, 1000.0],
            vec![50.0, 100.0, 150.0],
            vec![
                vec![2.0, 1.6, 1.3],
                vec![3.8, 3.2, 2.5],
                vec![4.9, 4.2, 3.4],
            ],
        )
        .unwrap()
    }

    #[test]
    fn the_papers_utility_selection_reads_the_grid_at_the_level_granted_and_the_delay_demand() {
        let u = example();
        assert_eq!(u.at(1000.0, 50.0), 4.9);
        assert_eq!(u.at(100.0, 150.0), 1.3);
        // The solver's choice in the example: 500 kbit/s within 100 ms.
        assert_eq!(u.at(500.0, 100.0), 3.2);
        // A path of 60 ms is within the 100 ms demand, not the 50 ms one.
        assert_eq!(u.at(500.0, 60.0), 3.2);
        // Between levels, the level reached; below the first, the least utility.
        assert_eq!(u.at(999.0, 100.0), 3.2);
        assert_eq!(u.at(99.0, 0.0), MIN_UTILITY);
        // Beyond the grid's delays, its last.
        assert_eq!(u.at(1000.0, 400.0), 3.4);
    }

    #[test]
    fn a_measured_grid_that_is_not_monotone_promises_the_best_it_dominates() {
        let u = UtilityFunction::new(
            vec![100.0, 607.0],
            vec![0.0, 16.6],
            vec![vec![1.0, 1.0], vec![1.17, 1.10]],
        )
        .unwrap();
        // A path of no delay may claim the 16.6 ms point too; one of 16.6 ms only
        // its own.
        assert_eq!(u.at_level(1, 0), 1.17);
        assert_eq!(u.at_level(1, 1), 1.10);
        let more_is_never_less =
            UtilityFunction::new(vec![100.0, 200.0], vec![0.0], vec![vec![2.0], vec![1.5]])
                .unwrap();
        assert_eq!(more_is_never_less.at(200.0, 0.0), 2.0);
    }

    #[test]
    fn a_grid_that_does_not_fit_is_refused_naming_the_field() {
        let refused = |tp: Vec<f64>, d: Vec<f64>, u: Vec<Vec<f64>>| {
            UtilityFunction::new(tp, d, u).unwrap_err().to_string()
        };
        assert_eq!(
            refused(vec![100.0, 50.0], vec![0.0], vec![vec![1.0], vec![2.0]]),
            "throughput_kbps[1]: must be above the one before"
        );
        assert_eq!(
            refused(vec![100.0], vec![0.0, 10.0], vec![vec![1.0]]),
            "utility[0]: has 1 values, one per delay (2 of them) is needed"
        );
        assert_eq!(
            refused(vec![100.0], vec![0.0], vec![vec![7.0]]),
            "utility[0][0]: must be 1 to 5"
        );
        assert_eq!(
            refused(vec![100.0], vec![0.0], vec![]),
            "utility: has 0 rows, one per throughput (1 of them) is needed"
        );
    }

    #[test]
    fn the_papers_link_delay_interpolation() {
        // Appendix A.6: 1000 kbit/s, 10 ms of propagation, no queue up to
        // 100 kbit/s, then linear to 70 ms more at 1000: at 500 kbit/s,
        // 10 + 70 x (500 - 100) / 900 = 41.1 ms.
        let d = DelayFunction::new(vec![0.0, 0.1, 1.0], vec![10.0, 10.0, 80.0]).unwrap();
        assert!((d.at(0.5) - 41.11).abs() < 0.01, "{}", d.at(0.5));
        assert_eq!(d.at(0.05), 10.0);
        assert_eq!(d.at(1.0), 80.0);
        assert_eq!(d.at(3.0), 80.0);
        assert_eq!(d, DelayFunction::queue_from(10.0, 0.1, 70.0));
        // And back: 41.1 ms is reached at half the capacity.
        assert!((d.load_within(41.11) - 0.5).abs() < 0.001);
        assert_eq!(d.load_within(10.0), 0.1);
        assert_eq!(d.load_within(9.0), 0.0);
        assert_eq!(d.load_within(80.0), 1.0);
        assert_eq!(
            DelayFunction::new(vec![0.0, 1.0], vec![10.0, 5.0])
                .unwrap_err()
                .to_string(),
            "delay_ms[1]: must not be below the one before: more load never means less delay"
        );
        assert_eq!(
            DelayFunction::new(vec![0.0, 0.5], vec![10.0, 20.0])
                .unwrap_err()
                .to_string(),
            "load: must run from 0 to 1"
        );
    }
}
