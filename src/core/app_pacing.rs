//! Per-application pacing at one gateway (SPEC §4): every site's application table,
//! its classifier behind a per-flow cache, and one pacer queue per application, all
//! applications of all sites sharing the pacer's single calendar.
//!
//! Contract: a gateway paces one direction (the entry `up`, the exit `down`); packets
//! of the other direction are only classified, for measurement. A new table replaces
//! a site's old one at once: applications that keep their name keep their queue (and
//! its packets) under the new rate; the packets of applications that are gone are
//! handed back to be sent unpaced, never dropped.

use std::time::Duration;

use super::background::{Interval, MIN_RATE_BPS, Method, SpareSearch};
use super::classify::Classifier;
use super::deadline::{Deadlines, Due, Review, Standing};
use super::flow::FlowTable;
use super::hash::FixedMap;
use super::pacer::{Enqueued, PaceSpec, Pacer, SlotId};
use super::pacing_table::{AppIdx, AppSpec, Direction, PacingTable};
use super::packet::{Data, FlowKey, PacketInfo};
use super::site::SiteIdx;
use super::time::Instant;

/// The queue limit of an application that sets none: 100 ms at its rate, at least
/// 16 KiB: a TCP flow needs about a round trip of queue to keep its rate, and a slow
/// application should not hold seconds of it.
pub fn default_queue_limit(rate_bps: u64) -> u64 {
    (rate_bps / 8 / 10).max(16 * 1024)
}

/// The least queue of an application's decelerated flows (see
/// [`AppPacing::review_deadlines`]).
const DECELERATED_QUEUE: u64 = 64 * 1024;

/// What an application carried and lost, counted once, after the data path's verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppCounters {
    /// Bytes of packets sent on a lane in the paced direction.
    pub paced_bytes: u64,
    /// Bytes of packets delivered to the TUN device in the other direction.
    pub other_bytes: u64,
    /// Packets the application's full queue refused.
    pub drops: u64,
    /// Packets sent over uplinks the application keeps off (`uplinks`, `avoid`)
    /// because none of its own had a lane up.
    pub steered_off: u64,
    /// Copies of a `duplicate` application's packets sent over a second uplink, and
    /// their bytes.
    pub duplicates: u64,
    pub duplicate_bytes: u64,
    /// Packets of a `duplicate` application sent without a copy: the site's
    /// `duplicate_kbps` was spent.
    pub over_budget: u64,
    /// Packets received in the other direction that arrived before, as a copy or
    /// as the original behind its copy, and were dropped.
    pub duplicates_dropped: u64,
    /// Flows of an application with a `deadline` that carried their bytes (or
    /// ended) in time, and those whose deadline passed first.
    pub deadlines_met: u64,
    pub deadlines_missed: u64,
}

/// Where a background application's search stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackgroundState {
    pub rate_bps: u64,
    pub spare_bps: u64,
    /// The site's lanes' queue over the last control interval
    /// (`core/engine/background.rs`).
    pub queue: Duration,
}

/// A flow's application, as the per-flow cache keeps it.
#[derive(Debug, Clone, Copy)]
struct Classified {
    app: AppIdx,
    /// The flow travels in the paced direction and counts among its application's.
    counted: bool,
}

struct SiteApps {
    table: PacingTable,
    classifier: Classifier,
    /// Flow (with its DSCP and direction) -> application: each flow scans the table
    /// once.
    cache: FlowTable<Classified>,
    /// Flows of each application (by `AppIdx`) in the paced direction, among the
    /// cache's entries.
    flows: Vec<u64>,
    /// The pacer queue of each application (by `AppIdx`).
    slots: Vec<SlotId>,
    /// The counters of each application (by `AppIdx`).
    counters: Vec<AppCounters>,
    /// The search for the spare capacity of each `background` application (by
    /// `AppIdx`; `None` for the others).
    searches: Vec<Option<Background>>,
    /// What the site's foreground applications had carried at the last revision of
    /// the background's rates.
    foreground_at: u64,
    /// The flows of the site's applications with a `deadline`, and each such
    /// application's queue for its decelerated flows (by `AppIdx`).
    deadlines: Deadlines,
    decelerated: Vec<Option<SlotId>>,
    /// What the site's applications without deadlines or background carried, as of
    /// the last review of the deadlines, and their rate since (bit/s, smoothed).
    others_at: u64,
    others_bps: f64,
    /// While flows with deadlines run: the most the background applications may
    /// have between them (what the deadlines leave), in bit/s.
    background_cap: Option<u64>,
}

/// A background application's search, what it had carried and how many of its
/// packets its full queue had refused at the last revision, and the lanes' queue its
/// last interval showed.
struct Background {
    search: SpareSearch,
    carried_at: u64,
    drops_at: u64,
    queue: Duration,
}

impl Background {
    /// A fresh search for `app`, whose counters stand at `counters`.
    fn new(
        method: Method,
        app: &AppSpec,
        direction: Direction,
        counters: &AppCounters,
    ) -> Background {
        Background {
            search: SpareSearch::new(method, app.rate_bps(direction)),
            carried_at: counters.paced_bytes,
            drops_at: counters.drops,
            queue: Duration::ZERO,
        }
    }
}

/// All sites' applications and their pacer.
pub struct AppPacing<T> {
    direction: Direction,
    background_method: Method,
    default_rate_bps: u64,
    flow_idle_timeout: Duration,
    max_flows: usize,
    sites: Vec<SiteApps>,
    pacer: Pacer<T>,
    /// The site and application of each pacer slot.
    owners: Vec<(SiteIdx, AppIdx)>,
}

impl<T> AppPacing<T> {
    /// Pacing for `sites` sites in `direction`, each with an empty table (version 0):
    /// everything is `default`, paced at `default_rate_kbps` if set.
    pub fn new(
        sites: usize,
        direction: Direction,
        default_rate_kbps: Option<u64>,
        flow_idle_timeout: Duration,
        max_flows: usize,
    ) -> AppPacing<T> {
        let mut pacing = AppPacing {
            direction,
            background_method: Method::default(),
            default_rate_bps: default_rate_kbps.unwrap_or(0) * 1000,
            flow_idle_timeout,
            max_flows,
            sites: Vec::with_capacity(sites),
            pacer: Pacer::default(),
            owners: Vec::new(),
        };
        for _ in 0..sites {
            pacing.add_site();
        }
        pacing
    }

    /// Paces traffic that no application matches at `default_rate_kbps` (0 or `None`:
    /// unpaced) from `now` on, at every site; queued packets stay queued.
    pub fn set_default_rate(&mut self, default_rate_kbps: Option<u64>, now: Instant) {
        self.default_rate_bps = default_rate_kbps.unwrap_or(0) * 1000;
        let spec = self.spec(None, None);
        for site in &self.sites {
            self.pacer.set(site.slots[0], spec, now);
        }
    }

    fn new_deadlines(&self, site: SiteIdx) -> Deadlines {
        Deadlines::new(
            self.flow_idle_timeout,
            self.max_flows,
            u64::from(site.0).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )
    }

    /// Adds a site (the next `SiteIdx`) with an empty table.
    pub fn add_site(&mut self) {
        let site = SiteIdx(self.sites.len() as u32);
        let default = self.pacer.add(self.spec(None, None));
        self.own(default, site, AppIdx::DEFAULT);
        self.sites.push(SiteApps {
            table: PacingTable::default(),
            classifier: Classifier::default(),
            cache: FlowTable::new(self.flow_idle_timeout, self.max_flows),
            flows: vec![0],
            slots: vec![default],
            counters: vec![AppCounters::default()],
            searches: vec![None],
            foreground_at: 0,
            deadlines: self.new_deadlines(site),
            decelerated: vec![None],
            others_at: 0,
            others_bps: 0.0,
            background_cap: None,
        });
    }

    /// Searches for the spare capacity with `method` from `now` on: background
    /// applications start their search anew (a search's state means nothing to the
    /// other method).
    pub fn set_background_method(&mut self, method: Method, now: Instant) {
        if method == self.background_method {
            return;
        }
        self.background_method = method;
        for s in 0..self.sites.len() {
            let site = &mut self.sites[s];
            for (i, app) in site.table.apps.iter().enumerate() {
                if app.is_background() {
                    let counters = &site.counters[i + 1];
                    site.searches[i + 1] =
                        Some(Background::new(method, app, self.direction, counters));
                }
            }
            self.respec_background(SiteIdx(s as u32), now);
        }
    }

    /// The pacing of an application's decelerated flows at `rate_bps`: a queue of
    /// at least [`DECELERATED_QUEUE`], as a slow rate's 100 ms would drop a TCP
    /// flow's first window and hold it in timeouts long after it is let go.
    fn decelerated_spec(&self, rate_bps: u64) -> PaceSpec {
        PaceSpec {
            rate_bps,
            burst_bytes: 0,
            queue_limit_bytes: default_queue_limit(rate_bps).max(DECELERATED_QUEUE),
            codel: false,
        }
    }

    /// The flows of `app` have a deadline: how long they have, and for what.
    pub fn due(&self, site: SiteIdx, app: AppIdx) -> Option<Due> {
        self.sites[site.0 as usize]
            .table
            .app(app)
            .and_then(|a| a.deadline.as_ref())
            .map(Due::of)
    }

    /// Takes a packet of a flow of `app`, whose flows are `due`, carrying `data`;
    /// counts the flow met or missed once it carried its bytes or ended. Returns
    /// whether the flow is decelerated, and whether it is new (a review of the
    /// site's deadlines is due).
    pub fn carry_deadline(
        &mut self,
        site: SiteIdx,
        app: AppIdx,
        due: Due,
        flow: FlowKey,
        data: Data,
        now: Instant,
    ) -> (bool, bool) {
        let s = &mut self.sites[site.0 as usize];
        let counters = &mut s.counters;
        s.deadlines
            .carry(flow, app, due, data, now, |app, standing| {
                count_standing(counters, app, standing)
            })
    }

    /// Reviews the site's flows with deadlines, for lanes that carry `lanes_bps` and
    /// `elapsed` after the last review: what the site's other foreground
    /// applications carry is not theirs. Paces each application's decelerated flows
    /// at an even part of what the kept ones leave.
    pub fn review_deadlines(
        &mut self,
        site: SiteIdx,
        lanes_bps: f64,
        elapsed: Duration,
        now: Instant,
    ) -> Review {
        let s = &mut self.sites[site.0 as usize];
        let others: u64 = s
            .counters
            .iter()
            .enumerate()
            .filter(|(i, _)| s.searches[*i].is_none() && s.decelerated[*i].is_none())
            .map(|(_, c)| c.paced_bytes)
            .sum();
        if !elapsed.is_zero() {
            let bps = others.saturating_sub(s.others_at) as f64 * 8.0 / elapsed.as_secs_f64();
            // Smoothed over a few reviews: one review sees a burst or a pause.
            s.others_bps += (bps - s.others_bps) / 4.0;
        }
        s.others_at = others;
        let capacity = (lanes_bps - s.others_bps).max(0.0);
        let counters = &mut s.counters;
        let review = s.deadlines.review(capacity, now, |app, standing| {
            count_standing(counters, app, standing)
        });
        let queues = s.decelerated.iter().flatten().count().max(1);
        let rate = ((review.leftover_bps / queues as f64) as u64).max(MIN_RATE_BPS);
        // Deadlines come before the background: it gets what the kept flows leave
        // only while none is decelerated, and otherwise its least.
        let left = if review.decelerated > 0 {
            0
        } else {
            review.leftover_bps as u64
        };
        s.background_cap = (review.running > 0).then_some(left);
        let spec = self.decelerated_spec(rate);
        for slot in self.sites[site.0 as usize].decelerated.iter().flatten() {
            self.pacer.set(*slot, spec, now);
        }
        self.respec_background(site, now);
        review
    }

    /// Whether some site has flows with deadlines (its reviews are due).
    pub fn has_deadline_flows(&self) -> bool {
        self.sites.iter().any(|s| !s.deadlines.is_empty())
    }

    /// Sites with a background application.
    pub fn has_background(&self) -> bool {
        self.sites
            .iter()
            .any(|s| s.searches.iter().any(Option::is_some))
    }

    /// Revises the rate of every background application of `site` after a control
    /// interval of `elapsed` in which the site's lanes held `queue` beyond what they
    /// are meant to (`core/background.rs`).
    pub fn revise_background(
        &mut self,
        site: SiteIdx,
        queue: Duration,
        elapsed: Duration,
        now: Instant,
    ) {
        let s = &mut self.sites[site.0 as usize];
        if s.searches.iter().all(Option::is_none) || elapsed.is_zero() {
            return;
        }
        let bps = |bytes: u64| (u128::from(bytes) * 8_000_000_000 / elapsed.as_nanos()) as u64;
        let foreground: u64 = s
            .counters
            .iter()
            .zip(&s.searches)
            .filter(|(_, b)| b.is_none())
            .map(|(c, _)| c.paced_bytes)
            .sum();
        let foreground_bps = bps(foreground.saturating_sub(s.foreground_at));
        s.foreground_at = foreground;
        for (b, c) in s.searches.iter_mut().zip(&s.counters) {
            if let Some(b) = b {
                let carried_bps = bps(c.paced_bytes.saturating_sub(b.carried_at));
                b.carried_at = c.paced_bytes;
                let held_back = c.drops > b.drops_at;
                b.drops_at = c.drops;
                b.queue = queue;
                b.search.step(Interval {
                    carried_bps,
                    held_back,
                    foreground_bps,
                    queue,
                });
            }
        }
        self.respec_background(site, now);
    }

    /// Gives the pacer queues of `site`'s background applications their searches'
    /// rates, within what flows with deadlines leave them.
    fn respec_background(&mut self, site: SiteIdx, now: Instant) {
        let s = &self.sites[site.0 as usize];
        let apps = s.searches.iter().flatten().count().max(1) as u64;
        for (i, b) in s.searches.iter().enumerate() {
            if b.is_some() {
                let mut spec = self.spec(s.table.app(AppIdx(i as u32)), b.as_ref());
                if let Some(cap) = s.background_cap {
                    let cap = (cap / apps).max(MIN_RATE_BPS);
                    // 0 is not held: the cap holds it.
                    spec.rate_bps = if spec.rate_bps == 0 {
                        cap
                    } else {
                        spec.rate_bps.min(cap)
                    };
                }
                self.pacer.set(s.slots[i], spec, now);
            }
        }
    }

    /// A background application's rate and the spare capacity its search estimates,
    /// in bit/s, and the lanes' queue of its last control interval; `None` for the
    /// others.
    pub fn background(&self, site: SiteIdx, app: AppIdx) -> Option<BackgroundState> {
        self.sites[site.0 as usize].searches[app.0 as usize]
            .as_ref()
            .map(|b| BackgroundState {
                rate_bps: b.search.rate_bps(),
                spare_bps: b.search.spare_bps(),
                queue: b.queue,
            })
    }

    pub fn direction(&self) -> Direction {
        self.direction
    }

    fn own(&mut self, slot: SlotId, site: SiteIdx, app: AppIdx) {
        let i = slot.0 as usize;
        if self.owners.len() <= i {
            self.owners.resize(i + 1, (site, app));
        }
        self.owners[i] = (site, app);
    }

    /// How an application (`None`: default) is paced in this gateway's direction: a
    /// background application at its search's rate.
    fn spec(&self, app: Option<&AppSpec>, background: Option<&Background>) -> PaceSpec {
        let rate_bps = match background {
            Some(b) => b.search.rate_bps(),
            None => app.map_or(self.default_rate_bps, |a| a.rate_bps(self.direction)),
        };
        PaceSpec {
            rate_bps,
            burst_bytes: app.and_then(|a| a.burst_bytes).unwrap_or(0),
            queue_limit_bytes: app
                .and_then(|a| a.queue_limit_bytes)
                .unwrap_or_else(|| default_queue_limit(rate_bps)),
            // A foreground application's greedy flows would keep its queue full, the
            // whole limit (100 ms at its rate) added to every round trip of its
            // flows and to the delay its utility is judged by (`core/allocation/`).
            // A background application's search reads its full queue's drops as
            // demand beyond its rate (`core/background.rs`).
            codel: background.is_none(),
        }
    }

    /// The site's current table.
    pub fn table(&self, site: SiteIdx) -> &PacingTable {
        &self.sites[site.0 as usize].table
    }

    /// Replaces a site's table (already validated). Packets queued for applications
    /// that are gone go to `unpaced`, to be sent at once.
    pub fn apply(
        &mut self,
        site: SiteIdx,
        table: PacingTable,
        now: Instant,
        mut unpaced: impl FnMut(T),
    ) {
        let mut old_searches = std::mem::take(&mut self.sites[site.0 as usize].searches);
        let old = &self.sites[site.0 as usize];
        // Name -> queue, counters and search of the old table's applications: they
        // follow the name into the new table; what is left over is gone.
        let mut old_apps: FixedMap<&str, (SlotId, AppCounters, Option<Background>)> = old
            .table
            .apps
            .iter()
            .zip(old.slots[1..].iter().zip(&old.counters[1..]))
            .zip(old_searches.iter_mut().skip(1))
            .map(|((a, (slot, c)), b)| (a.name.as_str(), (*slot, *c, b.take())))
            .collect();
        let kept: Vec<Option<(SlotId, AppCounters, Option<Background>)>> = table
            .apps
            .iter()
            .map(|a| old_apps.remove(a.name.as_str()))
            .collect();
        let mut counters = Vec::with_capacity(table.apps.len() + 1);
        counters.push(old.counters[0]);
        counters.extend(
            kept.iter()
                .map(|k| k.as_ref().map(|k| k.1).unwrap_or_default()),
        );
        let mut gone: Vec<SlotId> = old_apps.into_values().map(|(slot, ..)| slot).collect();
        // The queues of decelerated flows go too (their packets were accepted: they
        // are sent on at once); the flows of applications that keep their deadline
        // keep their clocks (`Deadlines::renumber`).
        gone.extend(
            std::mem::take(&mut self.sites[site.0 as usize].decelerated)
                .into_iter()
                .flatten(),
        );
        gone.sort();
        let old = &self.sites[site.0 as usize];
        let default = old.slots[0];
        for slot in gone {
            self.pacer.remove(slot, &mut unpaced);
        }
        self.pacer.set(default, self.spec(None, None), now);
        let mut slots = Vec::with_capacity(table.apps.len() + 1);
        slots.push(default);
        let mut searches = Vec::with_capacity(table.apps.len() + 1);
        searches.push(None);
        for (i, (app, kept)) in table.apps.iter().zip(kept).enumerate() {
            let (slot, search) = match kept {
                Some((slot, c, search)) => (
                    Some(slot),
                    search
                        .filter(|_| app.is_background())
                        .map(
                            // A background application that stays keeps its search, under
                            // its new ceiling.
                            |mut b| {
                                b.search.set_ceiling(app.rate_bps(self.direction));
                                b
                            },
                        )
                        .or_else(|| {
                            app.is_background().then(|| {
                                Background::new(self.background_method, app, self.direction, &c)
                            })
                        }),
                ),
                None => (
                    None,
                    app.is_background().then(|| {
                        let fresh = AppCounters::default();
                        Background::new(self.background_method, app, self.direction, &fresh)
                    }),
                ),
            };
            let spec = self.spec(Some(app), search.as_ref());
            let slot = match slot {
                Some(slot) => {
                    self.pacer.set(slot, spec, now);
                    slot
                }
                None => self.pacer.add(spec),
            };
            self.own(slot, site, AppIdx(i as u32 + 1));
            slots.push(slot);
            searches.push(search);
        }
        let decelerated: Vec<Option<SlotId>> = std::iter::once(None)
            .chain(table.apps.iter().enumerate().map(|(i, app)| {
                app.deadline.is_some().then(|| {
                    let slot = self.pacer.add(self.decelerated_spec(MIN_RATE_BPS));
                    self.own(slot, site, AppIdx(i as u32 + 1));
                    slot
                })
            }))
            .collect();
        let s = &mut self.sites[site.0 as usize];
        // Each old application's index in the new table, where it keeps its deadline.
        let new_index: FixedMap<&str, usize> = table
            .apps
            .iter()
            .enumerate()
            .map(|(i, a)| (a.name.as_str(), i))
            .collect();
        let renumbered: Vec<Option<AppIdx>> = s
            .table
            .apps
            .iter()
            .map(|before| {
                let i = *new_index.get(before.name.as_str())?;
                (before.deadline.is_some() && table.apps[i].deadline == before.deadline)
                    .then_some(AppIdx(i as u32 + 1))
            })
            .collect();
        s.deadlines
            .renumber(|old| *renumbered.get(old.0.checked_sub(1)? as usize)?);
        s.decelerated = decelerated;
        s.classifier = Classifier::new(&table);
        s.cache = FlowTable::new(self.flow_idle_timeout, self.max_flows);
        s.flows = vec![0; table.apps.len() + 1];
        s.slots = slots;
        s.counters = counters;
        s.searches = searches;
        s.table = table;
    }

    /// The application of a packet of `site` travelling in `direction`.
    pub fn classify(
        &mut self,
        site: SiteIdx,
        info: &PacketInfo,
        direction: Direction,
        now: Instant,
    ) -> AppIdx {
        let s = &mut self.sites[site.0 as usize];
        let flows = &mut s.flows;
        s.cache.expire(now, |gone| uncount(flows, gone));
        let key = cache_key(info, direction);
        if let Some(known) = s.cache.refresh(key, now) {
            return known.app;
        }
        let app = s.classifier.classify(info, direction);
        let counted = direction == self.direction;
        if counted {
            s.flows[app.0 as usize] += 1;
        }
        if let Some(evicted) = s.cache.record(key, Classified { app, counted }, now) {
            uncount(&mut s.flows, evicted);
        }
        app
    }

    /// Forgets flows idle for the flow timeout at `now`, in every site's cache.
    pub fn expire(&mut self, now: Instant) {
        for s in &mut self.sites {
            let flows = &mut s.flows;
            s.cache.expire(now, |gone| uncount(flows, gone));
            s.deadlines.expire(now);
        }
    }

    /// When [`AppPacing::expire`] will next forget a flow.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.sites
            .iter()
            .filter_map(|s| s.cache.next_expiry())
            .min()
    }

    /// Counts a packet of an application carried in `direction`.
    pub fn count_carried(&mut self, site: SiteIdx, app: AppIdx, direction: Direction, len: usize) {
        let c = &mut self.sites[site.0 as usize].counters[app.0 as usize];
        if direction == self.direction {
            c.paced_bytes += len as u64;
        } else {
            c.other_bytes += len as u64;
        }
    }

    /// Counts a packet of an application sent over an uplink it keeps off, as none of
    /// its own had a lane up.
    pub fn count_steered_off(&mut self, site: SiteIdx, app: AppIdx) {
        self.sites[site.0 as usize].counters[app.0 as usize].steered_off += 1;
    }

    /// Counts a copy of `len` bytes of an application's packet sent over a second
    /// uplink.
    pub fn count_duplicate(&mut self, site: SiteIdx, app: AppIdx, len: usize) {
        let c = &mut self.sites[site.0 as usize].counters[app.0 as usize];
        c.duplicates += 1;
        c.duplicate_bytes += len as u64;
    }

    /// Counts a received packet of an application dropped because it arrived before.
    pub fn count_duplicate_dropped(&mut self, site: SiteIdx, app: AppIdx) {
        self.sites[site.0 as usize].counters[app.0 as usize].duplicates_dropped += 1;
    }

    /// Counts a packet of a `duplicate` application the site's budget left uncopied.
    pub fn count_over_budget(&mut self, site: SiteIdx, app: AppIdx) {
        self.sites[site.0 as usize].counters[app.0 as usize].over_budget += 1;
    }

    /// What an application carried and lost so far.
    pub fn counters(&self, site: SiteIdx, app: AppIdx) -> AppCounters {
        self.sites[site.0 as usize].counters[app.0 as usize]
    }

    /// Offers a packet of an application to its queue, or, for a decelerated flow
    /// of an application with a deadline, to its queue for those; a packet the full
    /// queue refuses is counted as the application's drop.
    pub fn enqueue(
        &mut self,
        site: SiteIdx,
        app: AppIdx,
        decelerated: bool,
        item: T,
        len: usize,
        now: Instant,
    ) -> Enqueued<T> {
        let s = &mut self.sites[site.0 as usize];
        let slot = match s.decelerated[app.0 as usize] {
            Some(slot) if decelerated => slot,
            _ => s.slots[app.0 as usize],
        };
        let enqueued = self.pacer.enqueue(slot, item, len, now);
        if matches!(enqueued, Enqueued::Dropped(_) | Enqueued::Standing(_)) {
            s.counters[app.0 as usize].drops += 1;
        }
        enqueued
    }

    /// Hands every packet due at `now` to `out` with its site and application.
    pub fn release(&mut self, now: Instant, mut out: impl FnMut(SiteIdx, AppIdx, T)) {
        let owners = &self.owners;
        self.pacer.release(now, |slot, item| {
            let (site, app) = owners[slot.0 as usize];
            out(site, app, item);
        });
    }

    /// When [`AppPacing::release`] may have packets to hand out next.
    pub fn next_release(&self) -> Option<Instant> {
        self.pacer.next_release()
    }

    /// The number of applications of a site, `default` included (`AppIdx` 0..n).
    pub fn apps(&self, site: SiteIdx) -> usize {
        self.sites[site.0 as usize].slots.len()
    }

    /// Bytes queued for an application.
    pub fn queued_bytes(&self, site: SiteIdx, app: AppIdx) -> u64 {
        self.pacer
            .queued_bytes(self.sites[site.0 as usize].slots[app.0 as usize])
    }

    /// An application's paced rate in bit/s (0: unpaced).
    pub fn target_bps(&self, site: SiteIdx, app: AppIdx) -> u64 {
        self.pacer
            .spec(self.sites[site.0 as usize].slots[app.0 as usize])
            .rate_bps
    }

    /// Flows of an application in the paced direction seen within the flow timeout.
    pub fn flows(&self, site: SiteIdx, app: AppIdx) -> u64 {
        self.sites[site.0 as usize].flows[app.0 as usize]
    }
}

/// Counts a flow with a deadline that was met or missed.
fn count_standing(counters: &mut [AppCounters], app: AppIdx, standing: Standing) {
    let c = &mut counters[app.0 as usize];
    match standing {
        Standing::Met => c.deadlines_met += 1,
        Standing::Missed => c.deadlines_missed += 1,
        Standing::Running => {}
    }
}

/// A flow left the cache: it no longer counts for its application. (Counts and cache
/// are replaced together with the table, so a counted entry always has its count.)
fn uncount(flows: &mut [u64], gone: Classified) {
    if gone.counted {
        flows[gone.app.0 as usize] -= 1;
    }
}

/// The cache key of a packet: its flow, its DSCP (a rule may match on it) and its
/// direction.
fn cache_key(info: &PacketInfo, direction: Direction) -> FlowKey {
    let salt = (u64::from(info.dscp) << 1 | u64::from(direction == Direction::Down))
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    FlowKey(info.flow_key().0 ^ salt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::tests as testing;

    const MS: u64 = 1_000_000;

    fn table(json: &str) -> PacingTable {
        PacingTable::parse(json.as_bytes()).expect("valid")
    }

    fn pacing() -> AppPacing<u32> {
        AppPacing::new(2, Direction::Up, None, Duration::from_secs(10), 1000)
    }

    /// Pacing of two sites, `site` with the table `json` (applied with no queues).
    fn with_table(site: SiteIdx, json: &str) -> AppPacing<u32> {
        let mut p = pacing();
        p.apply(site, table(json), Instant::ZERO, |_| {
            panic!("nothing was queued")
        });
        p
    }

    fn info(src: &str, sport: u16, dst: &str, dport: u16) -> PacketInfo {
        PacketInfo::parse(&testing::tcp_v4(src, sport, dst, dport)).expect("packet")
    }

    #[test]
    fn applications_are_classified_per_site_and_counted_per_flow() {
        let site = SiteIdx(1);
        let mut p = with_table(
            site,
            r#"{"version": 3, "apps": [{"name": "web", "match": {"remote_ports": "443"}, "rate_up_kbps": 800}]}"#,
        );
        let web = info("198.18.1.2", 40000, "203.0.113.1", 443);
        let other = info("198.18.1.2", 40001, "203.0.113.1", 80);
        for _ in 0..3 {
            assert_eq!(
                p.classify(site, &web, Direction::Up, Instant::ZERO),
                AppIdx(1)
            );
        }
        assert_eq!(
            p.classify(site, &other, Direction::Up, Instant::ZERO),
            AppIdx::DEFAULT
        );
        // The site without a table puts everything in default.
        assert_eq!(
            p.classify(SiteIdx(0), &web, Direction::Up, Instant::ZERO),
            AppIdx::DEFAULT
        );
        // Return traffic is classified too, but not counted as a paced flow.
        let back = info("203.0.113.1", 443, "198.18.1.2", 40000);
        assert_eq!(
            p.classify(site, &back, Direction::Down, Instant::ZERO),
            AppIdx(1)
        );
        assert_eq!(
            (p.flows(site, AppIdx(1)), p.flows(site, AppIdx::DEFAULT)),
            (1, 1)
        );
        assert_eq!(p.target_bps(site, AppIdx(1)), 800_000);
        assert_eq!(p.target_bps(site, AppIdx::DEFAULT), 0);
        // Idle flows expire and stop counting.
        p.classify(
            site,
            &other,
            Direction::Up,
            Instant::from_nanos(10_001 * MS),
        );
        assert_eq!(
            (p.flows(site, AppIdx(1)), p.flows(site, AppIdx::DEFAULT)),
            (0, 1)
        );
    }

    #[test]
    fn an_application_with_six_flows_gets_its_rate_not_six_times_it() {
        let site = SiteIdx(0);
        // 8 Mbit/s: 1 ms per 1000-byte packet, whatever flow it belongs to.
        let mut p = with_table(
            site,
            r#"{"version": 1, "apps": [{"name": "browser", "match": {"remote_ports": "443"}, "rate_up_kbps": 8000}]}"#,
        );
        let mut released = 0;
        let mut now_sent = 0;
        for round in 0..10u16 {
            for conn in 0..6 {
                let pkt = info("198.18.1.2", 40000 + conn, "203.0.113.1", 443);
                let app = p.classify(site, &pkt, Direction::Up, Instant::ZERO);
                match p.enqueue(site, app, false, u32::from(round), 1000, Instant::ZERO) {
                    Enqueued::Now(_) => now_sent += 1,
                    Enqueued::Queued => {}
                    Enqueued::Dropped(_) | Enqueued::Standing(_) => {
                        panic!("the default queue holds 100 ms at 8 Mbit/s")
                    }
                }
            }
        }
        assert_eq!(p.flows(site, AppIdx(1)), 6);
        // 60 packets of 1000 bytes from six flows: in 20 ms the first left at once
        // and then one per ms, 21 in all, not six times as many.
        for ms in 0..=20 {
            p.release(Instant::from_nanos(ms * MS), |_, _, _| released += 1);
        }
        assert_eq!(now_sent + released, 21);
        assert_eq!(p.queued_bytes(site, AppIdx(1)), 39_000);
    }

    #[test]
    fn a_new_table_keeps_the_queues_of_applications_that_stay() {
        let site = SiteIdx(0);
        let mut p = with_table(
            site,
            r#"{"version": 1, "apps": [
                {"name": "a", "match": {"remote_ports": "1"}, "rate_up_kbps": 8},
                {"name": "b", "match": {"remote_ports": "2"}, "rate_up_kbps": 8}]}"#,
        );
        for (port, app) in [(1, AppIdx(1)), (2, AppIdx(2))] {
            let pkt = info("198.18.1.2", 5, "203.0.113.1", port);
            assert_eq!(p.classify(site, &pkt, Direction::Up, Instant::ZERO), app);
            for i in 0..3 {
                p.enqueue(
                    site,
                    app,
                    false,
                    u32::from(port) * 10 + i,
                    1000,
                    Instant::ZERO,
                );
            }
        }
        assert_eq!(p.queued_bytes(site, AppIdx(1)), 2000);
        p.count_carried(site, AppIdx(2), Direction::Up, 1000);
        p.count_carried(site, AppIdx(1), Direction::Down, 7);
        // "a" goes, "b" moves to the front and speeds up, "c" is new.
        let second = r#"{"version": 2, "apps": [
            {"name": "b", "match": {"remote_ports": "2"}, "rate_up_kbps": 8000},
            {"name": "c", "match": {"remote_ports": "3"}}]}"#;
        let mut unpaced = Vec::new();
        p.apply(site, table(second), Instant::ZERO, |i| unpaced.push(i));
        assert_eq!(unpaced, [11, 12], "a's queued packets are sent, not lost");
        assert_eq!(p.queued_bytes(site, AppIdx(1)), 2000, "b kept its queue");
        let b_counts = p.counters(site, AppIdx(1));
        assert_eq!(
            (b_counts.paced_bytes, b_counts.drops),
            (1000, 0),
            "and its counters"
        );
        assert_eq!(
            p.counters(site, AppIdx(2)),
            AppCounters::default(),
            "c starts at 0"
        );
        assert_eq!(p.target_bps(site, AppIdx(1)), 8_000_000);
        assert_eq!(p.table(site).version, 2);
        let mut out = Vec::new();
        p.release(Instant::from_nanos(3 * MS), |s, a, i| out.push((s, a, i)));
        assert_eq!(out, [(site, AppIdx(1), 21), (site, AppIdx(1), 22)]);
        let pkt = info("198.18.1.2", 5, "203.0.113.1", 1);
        assert_eq!(
            p.classify(site, &pkt, Direction::Up, Instant::ZERO),
            AppIdx::DEFAULT
        );
    }

    #[test]
    fn a_new_version_of_the_table_keeps_the_clocks_of_flows_whose_deadline_stays() {
        let site = SiteIdx(0);
        let json = |version: u32, first: &str, ms: u32| {
            format!(
                r#"{{"version": {version}, "apps": [{first}{{"name": "reports", "match": {{"remote_ports": "80"}}, "deadline": {{"ms": {ms}}}}}]}}"#
            )
        };
        let mut p = with_table(site, &json(1, "", 500));
        let flow = FlowKey(7);
        let data = |ends| Data {
            len: 1000,
            ends,
            seq_end: None,
        };
        let at = |ms: u64| Instant::from_nanos(ms * MS);
        let reports = AppIdx(1);
        let due = p.due(site, reports).expect("a deadline");
        assert_eq!(
            p.carry_deadline(site, reports, due, flow, data(false), at(0)),
            (false, true)
        );
        // The controller puts its table again, an application before it: the flow
        // keeps the clock it started at 0, and ends at 600 ms, too late.
        let other = r#"{"name": "other", "match": {"remote_ports": "22"}}, "#;
        p.apply(site, table(&json(2, other, 500)), at(100), |_| ());
        let reports = AppIdx(2);
        let due = p.due(site, reports).expect("a deadline");
        assert_eq!(
            p.carry_deadline(site, reports, due, flow, data(true), at(600)),
            (false, false)
        );
        let c = p.counters(site, reports);
        assert_eq!((c.deadlines_met, c.deadlines_missed), (0, 1));
        // A deadline changed: its flows start afresh under it.
        let flow = FlowKey(8);
        p.carry_deadline(site, reports, due, flow, data(false), at(700));
        p.apply(site, table(&json(3, other, 800)), at(800), |_| ());
        let due = p.due(site, reports).expect("a deadline");
        assert_eq!(
            p.carry_deadline(site, reports, due, flow, data(true), at(1_400)),
            (false, true)
        );
        let c = p.counters(site, reports);
        assert_eq!((c.deadlines_met, c.deadlines_missed), (1, 1));
    }

    #[test]
    fn a_background_applications_rate_follows_its_search_and_survives_a_new_table() {
        let site = SiteIdx(0);
        let json = |version: u32, class: &str| {
            format!(
                r#"{{"version": {version}, "apps": [{{"name": "bulk", "match": {{"remote_ports": "873"}}, "class": "{class}", "rate_up_kbps": 50000}}]}}"#
            )
        };
        let ceiling = 50_000_000;
        let mut p = with_table(site, &json(1, "background"));
        let bulk = AppIdx(1);
        assert!(p.has_background());
        // Its search starts at its table rate, the most it may have.
        assert_eq!(p.target_bps(site, bulk), ceiling);
        let second = Duration::from_secs(1);
        // It used 1 Mbit/s in a second without a queue: nothing held it.
        p.count_carried(site, bulk, Direction::Up, 125_000);
        p.revise_background(site, Duration::ZERO, second, Instant::ZERO);
        assert_eq!(
            p.background(site, bulk),
            Some(BackgroundState {
                rate_bps: ceiling,
                spare_bps: 1_000_000,
                queue: Duration::ZERO
            })
        );
        // The foreground (default) came and the lanes queued while it carried
        // 2 Mbit/s: it yields, to half of that.
        p.count_carried(site, bulk, Direction::Up, 250_000);
        p.count_carried(site, AppIdx::DEFAULT, Direction::Up, 10_000_000);
        p.revise_background(site, Duration::from_millis(20), second, Instant::ZERO);
        let yielded = p.target_bps(site, bulk);
        assert_eq!(yielded, 1_000_000);
        // A new version of the table keeps the search; the application's counters
        // and rate go on.
        p.apply(site, table(&json(2, "background")), Instant::ZERO, |_| ());
        assert_eq!(p.target_bps(site, bulk), yielded);
        // Made a foreground application, it is paced at its table rate.
        p.apply(site, table(&json(3, "foreground")), Instant::ZERO, |_| ());
        assert_eq!(p.target_bps(site, bulk), 50_000_000);
        assert_eq!(p.background(site, bulk), None);
        assert!(!p.has_background());
        // Back to background: a fresh search, from its table rate.
        p.apply(site, table(&json(4, "background")), Instant::ZERO, |_| ());
        assert_eq!(p.target_bps(site, bulk), ceiling);
        // Another method starts the search anew as well.
        p.count_carried(site, bulk, Direction::Up, 250_000);
        p.count_carried(site, AppIdx::DEFAULT, Direction::Up, 10_000_000);
        p.revise_background(site, Duration::from_millis(20), second, Instant::ZERO);
        assert_eq!(p.target_bps(site, bulk), 1_000_000);
        p.set_background_method(
            crate::core::background::Method::StochasticApproximation,
            Instant::ZERO,
        );
        assert_eq!(p.target_bps(site, bulk), ceiling);
    }
}
