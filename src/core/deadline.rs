//! Deadlines (P2D, Ye, Lin and Huang): flows of an application with a `deadline` are
//! worth something only if each carries its `bytes` within its `ms`; when the
//! uplinks cannot carry them all in time, some are decelerated so that the others
//! finish, chosen with P2D's urgency-dependent probability.
//!
//! P2D's observation is priority synchronisation: flows of similar size and deadline
//! that share a congested bottleneck slow down together, finish together, and all
//! miss. Deadline-aware protocols that weight each flow by its urgency (D2TCP) do not
//! help when the urgencies are alike. P2D decelerates flows with a probability that
//! grows with their urgency (the rate they need over the average share), scaled so
//! that the bandwidth it expects to free equals the shortfall; a flow that needs more
//! than the whole bottleneck is decelerated outright (its case 1).
//!
//! braid sees every flow of the site at one place, so it does better than P2D's
//! switches and senders can: it draws with P2D's probabilities, then draws again
//! (with the same weights) while the flows it kept still need more than the uplinks
//! carry, and gives a decelerated flow back its place once there is room for what it
//! still needs. Kept flows share the uplinks evenly, as TCP flows do, so a set of
//! them fits only if the uplinks carry its largest need as many times as it has
//! flows. Flows kept go on as the application's table paces them; decelerated
//! ones wait in a queue of their own, paced at what the kept ones leave.

use std::time::Duration;

use super::flow::FlowTable;
use super::pacing_table::{AppIdx, DeadlineSpec};
use super::packet::{Data, FlowKey};
use super::time::Instant;

/// A flow's `deadline` (the table's `deadline` of its application).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub within: Duration,
    /// `None`: the flow is done when it ends; what it needs is not known, so it is
    /// never decelerated.
    pub bytes: Option<u64>,
}

impl Due {
    pub fn of(spec: &DeadlineSpec) -> Due {
        Due {
            within: Duration::from_millis(spec.ms),
            bytes: spec.bytes,
        }
    }
}

/// Where a flow with a deadline stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Running,
    /// It carried its bytes (or ended) in time.
    Met,
    /// Its deadline passed first.
    Missed,
}

/// One flow with a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadlineFlow {
    pub app: AppIdx,
    pub deadline: Instant,
    pub bytes: Option<u64>,
    pub carried: u64,
    /// For TCP, the sequence number its data starts at (as first seen).
    pub seq_base: Option<u32>,
    pub decelerated: bool,
    pub standing: Standing,
}

impl DeadlineFlow {
    /// The rate it needs, in bit/s, to carry what is left by its deadline; `None`
    /// once the deadline is past.
    pub fn required_bps(&self, now: Instant) -> Option<f64> {
        let left = self.deadline.saturating_since(now);
        if left.is_zero() {
            return None;
        }
        let Some(bytes) = self.bytes else {
            return Some(0.0);
        };
        let bits = bytes.saturating_sub(self.carried) as f64 * 8.0;
        Some(bits / left.as_secs_f64())
    }
}

/// P2D's deceleration probabilities of flows that need `required` (bit/s each) of a
/// bottleneck of `capacity`: zero while they fit; else a flow needing more than the
/// whole capacity is decelerated for sure, and the others with a probability that
/// grows with its urgency (its need over the average share, `capacity / n`), scaled
/// so that the bandwidth expected to be freed is the shortfall.
pub fn deceleration_probabilities(required: &[f64], capacity: f64) -> Vec<f64> {
    let total: f64 = required.iter().sum();
    if total <= capacity || required.is_empty() {
        return vec![0.0; required.len()];
    }
    let share = capacity / required.len() as f64;
    let urgency: Vec<f64> = required.iter().map(|r| r / share).collect();
    let shortfall = total - capacity;
    // Expected freed bandwidth with scale k: sum of min(1, k * urgency) * need,
    // increasing in k; found by bisection. A flow beyond the capacity is certain.
    let freed = |k: f64| -> f64 {
        required
            .iter()
            .zip(&urgency)
            .map(|(&r, &u)| {
                if r >= capacity {
                    r
                } else {
                    (k * u).min(1.0) * r
                }
            })
            .sum()
    };
    let (mut low, mut high) = (0.0, 1.0);
    while freed(high) < shortfall && high < 1e12 {
        high *= 2.0;
    }
    for _ in 0..60 {
        let mid = (low + high) / 2.0;
        if freed(mid) < shortfall {
            low = mid;
        } else {
            high = mid;
        }
    }
    required
        .iter()
        .zip(&urgency)
        .map(|(&r, &u)| {
            if r >= capacity {
                1.0
            } else {
                (high * u).min(1.0)
            }
        })
        .collect()
}

/// The share of the uplinks' capacity that flows kept may not count on: the
/// estimate of the capacity is rough, and a kept flow that gets exactly what it needs
/// finishes on its deadline, with nothing to spare for a lost packet.
const HEADROOM: f64 = 0.1;

/// A draw in [0, 1): xorshift64*, seeded per site, so that tests and runs repeat.
#[derive(Debug, Clone)]
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What a review decided: the flows still running and decelerated, and the rate the
/// kept ones leave for the decelerated, in bit/s.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Review {
    pub running: usize,
    pub decelerated: usize,
    pub leftover_bps: f64,
}

/// A site's flows with deadlines.
pub struct Deadlines {
    flows: FlowTable<DeadlineFlow>,
    draws: Draws,
}

impl Deadlines {
    pub fn new(idle_timeout: Duration, max_flows: usize, seed: u64) -> Deadlines {
        Deadlines {
            flows: FlowTable::new(idle_timeout, max_flows),
            draws: Draws(seed | 1),
        }
    }

    /// A new version of the table: each running flow's application is `renumber`ed
    /// (its index in the new table), and the flows of an application it gives none
    /// (gone, or no longer with the same deadline) are forgotten. The others keep
    /// their clocks and what they carried: a controller puts its table again every few
    /// seconds, and a flow whose clock started again at each put met a deadline it
    /// had missed. Whether a flow is decelerated is decided again at the next review.
    pub fn renumber(&mut self, mut renumber: impl FnMut(AppIdx) -> Option<AppIdx>) {
        self.flows.retain(|f| match renumber(f.app) {
            Some(app) => {
                f.app = app;
                f.decelerated = false;
                true
            }
            None => false,
        });
    }

    /// Takes a packet of a flow of `app`, whose flows are `due`, carrying `data`; a
    /// flow's first packet starts its clock. A TCP flow has carried what its
    /// highest sequence number says (retransmissions carry it no further).
    /// A flow that carried its bytes, or ended, goes to `decided` with its standing.
    /// Returns whether the packet's flow is decelerated, and whether it is new.
    pub fn carry(
        &mut self,
        flow: FlowKey,
        app: AppIdx,
        due: Due,
        data: Data,
        now: Instant,
        mut decided: impl FnMut(AppIdx, Standing),
    ) -> (bool, bool) {
        let mut new = false;
        let mut outcome = None;
        let mut decelerated = false;
        self.flows.update(flow, now, |known| {
            let mut f = known.filter(|f| f.app == app).unwrap_or_else(|| {
                new = true;
                DeadlineFlow {
                    app,
                    deadline: now.saturating_add(due.within),
                    bytes: due.bytes,
                    carried: 0,
                    seq_base: None,
                    decelerated: false,
                    standing: Standing::Running,
                }
            });
            match data.seq_end {
                Some(end) => {
                    let base = *f.seq_base.get_or_insert(end.wrapping_sub(data.len as u32));
                    let reach = end.wrapping_sub(base);
                    // Beyond half the sequence space: a packet from before the base.
                    if reach < 1 << 31 {
                        f.carried = f.carried.max(u64::from(reach));
                    }
                }
                None => f.carried = f.carried.saturating_add(data.len as u64),
            }
            let carried_all = f.bytes.is_some_and(|b| f.carried >= b);
            if f.standing == Standing::Running && (carried_all || data.ends) {
                f.standing = if now <= f.deadline {
                    Standing::Met
                } else {
                    Standing::Missed
                };
                f.decelerated = false;
                outcome = Some(f.standing);
            }
            decelerated = f.decelerated;
            f
        });
        if let Some(standing) = outcome {
            decided(app, standing);
        }
        (decelerated, new)
    }

    /// Decides which running flows are decelerated, for uplinks that carry
    /// `capacity_bps` for them at `now`; a flow whose deadline passed goes to
    /// `decided` as missed (and is decelerated: its time is gone, the others' is not).
    pub fn review(
        &mut self,
        capacity_bps: f64,
        now: Instant,
        mut decided: impl FnMut(AppIdx, Standing),
    ) -> Review {
        let capacity_bps = capacity_bps * (1.0 - HEADROOM);
        // The running flows' needs, kept first.
        let mut running: Vec<(f64, &mut DeadlineFlow)> = Vec::new();
        for f in self.flows.values_mut() {
            if f.standing != Standing::Running {
                continue;
            }
            match f.required_bps(now) {
                Some(need) => running.push((need, f)),
                None => {
                    f.standing = Standing::Missed;
                    f.decelerated = true;
                    decided(f.app, Standing::Missed);
                }
            }
        }
        // Kept flows share what they get evenly (TCP flows through one queue): each
        // gets its need only if every one gets the largest.
        let kept_need = |running: &[(f64, &mut DeadlineFlow)]| -> f64 {
            let kept = running.iter().filter(|(_, f)| !f.decelerated);
            let largest = kept.clone().map(|(n, _)| *n).fold(0.0, f64::max);
            largest * kept.count() as f64
        };
        if kept_need(&running) > capacity_bps {
            // P2D's draw among the kept flows, then more draws with the same weights
            // until the kept ones fit.
            let kept: Vec<usize> = (0..running.len())
                .filter(|&i| !running[i].1.decelerated)
                .collect();
            let needs: Vec<f64> = kept.iter().map(|&i| running[i].0).collect();
            let p = deceleration_probabilities(&needs, capacity_bps);
            for (&i, &p) in kept.iter().zip(&p) {
                if self.draws.next() < p {
                    running[i].1.decelerated = true;
                }
            }
            while kept_need(&running) > capacity_bps {
                let left: Vec<usize> = kept
                    .iter()
                    .copied()
                    .filter(|&i| !running[i].1.decelerated)
                    .collect();
                let weights: Vec<f64> = left
                    .iter()
                    .map(|&i| p[kept.iter().position(|&k| k == i).unwrap_or(0)].max(1e-9))
                    .collect();
                let mut pick = self.draws.next() * weights.iter().sum::<f64>();
                let mut chosen = left[left.len() - 1];
                for (&i, w) in left.iter().zip(&weights) {
                    if pick < *w {
                        chosen = i;
                        break;
                    }
                    pick -= w;
                }
                running[chosen].1.decelerated = true;
            }
        } else {
            // Room: decelerated flows that still fit come back, the least needy first
            // (the likeliest to make it).
            let mut waiting: Vec<usize> = (0..running.len())
                .filter(|&i| running[i].1.decelerated)
                .collect();
            waiting.sort_by(|&a, &b| running[a].0.total_cmp(&running[b].0));
            for i in waiting {
                running[i].1.decelerated = false;
                if kept_need(&running) > capacity_bps {
                    running[i].1.decelerated = true;
                    break;
                }
            }
        }
        let decelerated = running.iter().filter(|(_, f)| f.decelerated).count();
        Review {
            running: running.len(),
            decelerated,
            leftover_bps: (capacity_bps - kept_need(&running)).max(0.0),
        }
    }

    /// Forgets flows idle for the flow timeout.
    pub fn expire(&mut self, now: Instant) {
        self.flows.expire(now, |_| ());
    }

    /// Flows known, running or not.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Data without sequence numbers (UDP-like): counted as it comes.
    fn data(len: u64, ends: bool) -> Data {
        Data {
            len: len as usize,
            ends,
            seq_end: None,
        }
    }

    /// The paper's example (its Table 1): flows A and B of one unit each due at 2.5,
    /// C and D of two units due at 5.5, on a bottleneck of one unit per unit of time.
    const NEEDS: [f64; 4] = [1.0 / 2.5, 1.0 / 2.5, 2.0 / 5.5, 2.0 / 5.5];

    #[test]
    fn p2ds_probabilities_on_the_papers_example_free_the_shortfall_urgent_flows_first() {
        let p = deceleration_probabilities(&NEEDS, 1.0);
        let freed: f64 = p.iter().zip(NEEDS).map(|(p, n)| p * n).sum();
        let shortfall = NEEDS.iter().sum::<f64>() - 1.0;
        assert!((freed - shortfall).abs() < 1e-9, "{freed} vs {shortfall}");
        // A and B are the more urgent (0.4 of a unit each against 0.36): likelier
        // to be decelerated, in proportion to their urgency.
        assert!((p[0] - p[1]).abs() < 1e-12 && (p[2] - p[3]).abs() < 1e-12);
        assert!((p[0] / p[2] - NEEDS[0] / NEEDS[2]).abs() < 1e-9, "{p:?}");
        assert!(
            (0.35..0.37).contains(&p[0]) && (0.32..0.34).contains(&p[2]),
            "{p:?}"
        );
        // Flows that fit are not decelerated; one that needs the whole bottleneck
        // alone surely is.
        assert_eq!(deceleration_probabilities(&[0.3, 0.3], 1.0), [0.0, 0.0]);
        let p = deceleration_probabilities(&[1.5, 0.2, 0.2], 1.0);
        assert_eq!(p[0], 1.0);
        assert!(p[1] < 1.0);
    }

    /// Runs the example as a fluid: each review every `step`, kept flows share
    /// the capacity equally (as TCP flows do), decelerated ones share what the kept
    /// ones leave. Returns how many met their deadlines.
    fn fluid(seed: u64, deadline_aware: bool) -> usize {
        let step = 0.01;
        let unit = 1_000_000u64; // bytes per unit
        let capacity = unit as f64 * 8.0; // bit/s: one unit per second
        let mut d = Deadlines::new(Duration::from_secs(60), 100, seed);
        let at = |t: f64| Instant::from_nanos((t * 1e9) as u64);
        let mut met = 0;
        let dues = [(1, 2.5), (1, 2.5), (2, 5.5), (2, 5.5)];
        let keys: Vec<FlowKey> = (0..4).map(|i| FlowKey(i + 1)).collect();
        for (k, (units, within)) in keys.iter().zip(dues) {
            let due = Due {
                within: Duration::from_secs_f64(within),
                bytes: Some(units * unit),
            };
            d.carry(*k, AppIdx(1), due, data(0, false), at(0.0), |_, _| ());
        }
        let mut t = 0.0;
        while t < 8.0 {
            let review = if deadline_aware {
                d.review(capacity, at(t), |_, _| ())
            } else {
                Review::default()
            };
            let flows: Vec<(FlowKey, DeadlineFlow)> = keys
                .iter()
                .filter_map(|k| d.flows.get(*k).map(|e| (*k, e.value)))
                .filter(|(_, f)| f.standing == Standing::Running)
                .collect();
            let kept = flows.iter().filter(|(_, f)| !f.decelerated).count();
            let slowed = flows.len() - kept;
            for (k, f) in flows {
                let rate = match (f.decelerated, kept, slowed) {
                    (false, n, _) => capacity / n as f64 - review.leftover_bps / n as f64,
                    (true, 0, n) => capacity / n as f64,
                    (true, _, n) => review.leftover_bps / n as f64,
                };
                let bytes = (rate * step / 8.0) as u64;
                let due = Due {
                    within: Duration::ZERO,
                    bytes: f.bytes,
                };
                d.carry(
                    k,
                    AppIdx(1),
                    due,
                    data(bytes, false),
                    at(t + step),
                    |_, s| {
                        if s == Standing::Met {
                            met += 1;
                        }
                    },
                );
            }
            t += step;
        }
        met
    }

    #[test]
    fn on_the_papers_example_p2d_meets_deadlines_fair_sharing_misses_them_all() {
        assert_eq!(fluid(1, false), 0, "fair sharing: all four miss");
        let met: Vec<usize> = (1..=50).map(|seed| fluid(seed, true)).collect();
        let mean = met.iter().sum::<usize>() as f64 / met.len() as f64;
        assert!(met.iter().all(|&m| m >= 2), "{met:?}");
        // Two or three of the four (the paper's Fig. 3(d): three, with the right one
        // decelerated), where fair sharing meets none.
        assert!(mean >= 2.2, "{mean}: {met:?}");
    }

    #[test]
    fn a_flow_is_met_when_it_carried_its_bytes_or_ended_in_time_and_missed_after() {
        let mut d = Deadlines::new(Duration::from_secs(10), 10, 7);
        let due = Due {
            within: Duration::from_secs(1),
            bytes: Some(1000),
        };
        let mut outcomes = Vec::new();
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        let (slow, new) = d.carry(
            FlowKey(1),
            AppIdx(2),
            due,
            data(600, false),
            t(0),
            |a, s| outcomes.push((a, s)),
        );
        assert!(!slow && new);
        d.carry(
            FlowKey(1),
            AppIdx(2),
            due,
            data(400, false),
            t(500),
            |a, s| outcomes.push((a, s)),
        );
        d.carry(FlowKey(2), AppIdx(2), due, data(10, false), t(0), |a, s| {
            outcomes.push((a, s))
        });
        d.carry(
            FlowKey(2),
            AppIdx(2),
            due,
            data(10, true),
            t(900),
            |a, s| outcomes.push((a, s)),
        );
        d.carry(FlowKey(3), AppIdx(3), due, data(10, false), t(0), |a, s| {
            outcomes.push((a, s))
        });
        assert_eq!(
            outcomes,
            [(AppIdx(2), Standing::Met), (AppIdx(2), Standing::Met)]
        );
        // Flow 3 needs 990 bytes in what is left of its second: it fits; then its
        // deadline passes.
        let review = d.review(1e6, t(100), |a, s| outcomes.push((a, s)));
        assert_eq!((review.running, review.decelerated), (1, 0));
        d.review(1e6, t(1001), |a, s| outcomes.push((a, s)));
        assert_eq!(outcomes[2], (AppIdx(3), Standing::Missed));
        // Counted once.
        d.review(1e6, t(1100), |a, s| outcomes.push((a, s)));
        d.carry(
            FlowKey(3),
            AppIdx(3),
            due,
            data(990, false),
            t(1200),
            |a, s| outcomes.push((a, s)),
        );
        assert_eq!(outcomes.len(), 3);
    }

    #[test]
    fn a_decelerated_flow_comes_back_once_there_is_room() {
        let mut d = Deadlines::new(Duration::from_secs(10), 10, 3);
        let due = Due {
            within: Duration::from_secs(1),
            bytes: Some(125_000), // 1 Mbit/s for a second
        };
        for k in 1..=3 {
            d.carry(
                FlowKey(k),
                AppIdx(1),
                due,
                data(0, false),
                Instant::ZERO,
                |_, _| (),
            );
        }
        // Room for two of the three (each needs 1 Mbit/s, and a tenth of the
        // capacity is kept in hand).
        let review = d.review(2.5e6, Instant::ZERO, |_, _| ());
        assert_eq!((review.running, review.decelerated), (3, 1));
        assert!((review.leftover_bps - 0.25e6).abs() < 1.0, "{review:?}");
        // The capacity grows: it comes back.
        let review = d.review(3.5e6, Instant::ZERO, |_, _| ());
        assert_eq!(review.decelerated, 0);
    }

    #[test]
    fn a_flow_without_bytes_is_never_decelerated_and_is_done_when_it_ends() {
        let mut d = Deadlines::new(Duration::from_secs(10), 10, 5);
        let due = Due {
            within: Duration::from_secs(1),
            bytes: None,
        };
        let mut outcomes = Vec::new();
        let t = |ms: u64| Instant::from_nanos(ms * 1_000_000);
        for k in 1..=3 {
            d.carry(
                FlowKey(k),
                AppIdx(1),
                due,
                data(1_000_000, false),
                t(0),
                |a, s| outcomes.push((a, s)),
            );
        }
        // Whatever the capacity, their need is not known: none is decelerated.
        let review = d.review(1.0, t(10), |a, s| outcomes.push((a, s)));
        assert_eq!((review.running, review.decelerated), (3, 0));
        d.carry(
            FlowKey(1),
            AppIdx(1),
            due,
            data(10, true),
            t(500),
            |a, s| outcomes.push((a, s)),
        );
        d.review(1.0, t(1001), |a, s| outcomes.push((a, s)));
        assert_eq!(
            outcomes,
            [
                (AppIdx(1), Standing::Met),
                (AppIdx(1), Standing::Missed),
                (AppIdx(1), Standing::Missed)
            ]
        );
    }
}
