//! `braid controller`: every period, reads what each gateway of the fleet reports,
//! allocates each site's uplinks among its applications (`core::allocation`) and puts
//! the tables that changed to the site's entry and exit. Reference:
//! docs/controller.md.
//!
//! It keeps no state of its own beyond the gateways' answers: a restarted controller
//! rebuilds everything from them. A gateway that does not answer is tried again after
//! a growing wait and holds up no other; a table another controller put first is
//! refused by the gateway (the table names the version it replaces), and this one
//! says so and reads again next period.

pub mod config;
mod fleet;
mod serve;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::clock::Clock;
use crate::core::allocation::lease::{Leases, Standing};
use crate::core::allocation::plan::{self, Basis, CapacityHistory, Direction};
use crate::core::allocation::{self, Allocation, EXACT_SHARE_OF_PERIOD, Method, exact, fast};
use crate::core::pacing_table::PacingTable;
use crate::core::retry::Retry;
use crate::core::time::Instant;
use crate::notify::Notifier;
use config::{ControllerConfig, Solver};
use fleet::{Gateway, Observed, PushOutcome};
use serve::Metrics;

/// Checks a configuration and the token files it names; prints what it would run.
pub fn check(config: &Path) -> anyhow::Result<()> {
    let config = ControllerConfig::load(config)?;
    fleet(&config)?;
    let classes: Vec<&str> = config
        .settings
        .classes
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    println!(
        "controller on {}: {} gateways, every {} ms, solver {}, classes {} (default {})",
        config.listen,
        config.gateways.len(),
        config.period.as_millis(),
        config.solver.as_str(),
        classes.join(", "),
        classes[config.settings.default_class],
    );
    for g in &config.gateways {
        println!("gateway {} (token {})", g.url, g.token_file.display());
    }
    Ok(())
}

/// Runs the controller until interrupted (SIGINT or SIGTERM).
pub fn run(config: &Path) -> anyhow::Result<()> {
    let config = ControllerConfig::load(config)?;
    open_files_for(config.gateways.len());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(async move {
            let metrics = Arc::new(Metrics::new()?);
            let listener = tokio::net::TcpListener::bind(config.listen)
                .await
                .with_context(|| format!("listen: binding {}", config.listen))?;
            tokio::spawn(serve::serve(listener, metrics.clone()));
            let notifier = Notifier::from_env();
            notifier.ready();
            tracing::info!(
                gateways = config.gateways.len(),
                period_ms = config.period.as_millis() as u64,
                "controller started on {}",
                config.listen
            );
            tokio::select! {
                r = control(&config, &metrics, &notifier) => r,
                _ = shutdown() => {
                    tracing::info!("controller stopping; the gateways keep their tables");
                    Ok(())
                }
            }
        })
}

async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// The controller's loop: one cycle per period.
async fn control(
    config: &ControllerConfig,
    metrics: &Metrics,
    notifier: &Notifier,
) -> anyhow::Result<()> {
    let clock = Clock::new();
    let gateways = fleet(config)?;
    let mut retries = vec![Retry::default(); gateways.len()];
    let mut memory = Memory {
        leases: Leases::new(config.name.clone(), config.takeover_after),
        sites: BTreeMap::new(),
    };
    let mut ticker = tokio::time::interval(config.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = clock.now();
        // Every due gateway at once, each within its own time.
        let due: Vec<usize> = (0..gateways.len())
            .filter(|&g| retries[g].due(now))
            .collect();
        let answers = futures::future::join_all(
            due.iter()
                .map(|&g| gateways[g].observe(config.period.min(Duration::from_secs(5)))),
        )
        .await;
        let mut observed: Vec<Option<Observed>> = vec![None; gateways.len()];
        for (&g, answer) in due.iter().zip(answers) {
            match answer {
                Ok(o) => {
                    retries[g].succeeded();
                    metrics.gateway_up(&gateways[g].url, true);
                    observed[g] = Some(o);
                }
                Err(e) => {
                    let (failures, _) = retries[g].failed(clock.now());
                    metrics.gateway_up(&gateways[g].url, false);
                    metrics.push_failed(&gateways[g].url, "unreachable");
                    if failures == 1 {
                        tracing::warn!(gateway = %gateways[g].url, "gateway unreachable: {e:#}");
                    }
                }
            }
        }
        let answered = observed.iter().flatten().count();
        metrics.cycle(answered, gateways.len());
        notifier.status(&format!("{answered} of {} gateways answer", gateways.len()));
        let sites = sites(&observed);
        // Solving takes up to a quarter of the period per site: off the runtime's
        // other tasks (the /metrics and /healthz answers) meanwhile.
        let (puts, held) = tokio::task::block_in_place(|| {
            let mut puts = Vec::new();
            let mut held = 0;
            for (site, at) in &sites {
                let seen = Seen {
                    observed: &observed,
                    site,
                    at: *at,
                };
                match allocate_site(config, metrics, &mut memory, &seen, clock.now()) {
                    Some(site_puts) => puts.extend(site_puts),
                    None => held += 1,
                }
            }
            (puts, held)
        });
        metrics.sites(sites.len() - held, held);
        put_all(&gateways, metrics, puts).await;
        metrics.cycle_took(clock.now().saturating_since(now));
        // A site gone from every gateway that answered is forgotten; one whose
        // gateways did not answer keeps its place.
        if observed.iter().all(Option::is_some) {
            memory.leases.retain(|site| sites.contains_key(site));
            memory.sites.retain(|site, _| sites.contains_key(site));
        }
    }
}

/// Each gateway read or put at once takes a socket: a fleet of more than the usual
/// soft limit of 1,024 needs the hard limit, which is raised to where it allows.
fn open_files_for(gateways: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let wanted = gateways as u64 + 64;
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < wanted => {
            let raised = wanted.min(hard);
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, raised, hard) {
                tracing::warn!("cannot raise the open files limit to {raised}: {e}");
            } else if raised < wanted {
                tracing::warn!(
                    "{gateways} gateways, but at most {hard} open files: some reads will fail"
                );
            }
        }
        _ => {}
    }
}

/// The configuration's gateways, with their tokens.
fn fleet(config: &ControllerConfig) -> anyhow::Result<Vec<Gateway>> {
    config
        .gateways
        .iter()
        .enumerate()
        .map(|(i, g)| Gateway::new(g, i))
        .collect()
}

/// Where each site was seen: its entry's gateway index (the one whose role is
/// `entry`) and its exit's. A site no entry reported has no uplinks to allocate.
#[derive(Debug, Clone, Copy, Default)]
struct SiteAt {
    entry: Option<usize>,
    exit: Option<usize>,
}

fn sites(observed: &[Option<Observed>]) -> BTreeMap<String, SiteAt> {
    let mut sites: BTreeMap<String, SiteAt> = BTreeMap::new();
    for (g, o) in observed.iter().enumerate() {
        let Some(o) = o else { continue };
        for site in o.sites.keys() {
            let at = sites.entry(site.clone()).or_default();
            if o.status.role == "entry" {
                at.entry = Some(g);
            } else {
                at.exit = Some(g);
            }
        }
    }
    sites.retain(|_, at| at.entry.is_some());
    sites
}

/// What the controller keeps between cycles, all of it rebuilt from the gateways'
/// answers after a restart: which sites are its own, what each site's allocation was
/// computed from, and its uplinks' last capacities.
struct Memory {
    leases: Leases,
    sites: BTreeMap<String, SiteMemory>,
}

/// One site's part of [`Memory`].
#[derive(Default)]
struct SiteMemory {
    /// What its allocation in force was computed from, if this controller made it.
    basis: Option<Basis>,
    capacities: CapacityHistory,
}

/// A site as this cycle saw it.
struct Seen<'a> {
    observed: &'a [Option<Observed>],
    site: &'a str,
    at: SiteAt,
}

/// A table to put to a gateway (by index) for a site.
struct Put {
    gateway: usize,
    site: String,
    table: PacingTable,
}

/// Tables put to more gateways than this at once wait for a slot: a fleet's worth of
/// connections at once would only queue in the kernel.
const PUTS_AT_ONCE: usize = 256;

/// Allocates one site: the tables to put where they changed (or are to be renewed),
/// or `None` if another controller allocates it.
fn allocate_site(
    config: &ControllerConfig,
    metrics: &Metrics,
    memory: &mut Memory,
    seen_site: &Seen<'_>,
    now: Instant,
) -> Option<Vec<Put>> {
    let Seen { observed, site, at } = *seen_site;
    // The site's uplinks are the entry's; without it there is nothing to allocate.
    let Some(entry) = at.entry.and_then(|g| observed[g].as_ref()) else {
        return Some(Vec::new());
    };
    let exit = at.exit.and_then(|g| observed[g].as_ref());
    let seen = &entry.sites[site];
    // The table in force: the newer of the two gateways'.
    let current = match exit.map(|e| &e.sites[site]) {
        Some(other) if other.table.version > seen.table.version => &other.table,
        _ => &seen.table,
    };
    let standing =
        memory
            .leases
            .standing(site, current.version, current.controller.as_deref(), now);
    let renew = match standing {
        Standing::Held { by, first } => {
            if first {
                tracing::info!(
                    site,
                    "controller {by} allocates the site; left to it while it renews its table (taken over after {:?} without)",
                    config.takeover_after
                );
            }
            return None;
        }
        Standing::TakeOver { from } => {
            tracing::warn!(
                site,
                "taking the site over from controller {from}: its table has not changed for {:?}",
                config.takeover_after
            );
            true
        }
        Standing::Mine { renew } => renew,
    };
    let active: Vec<bool> = current
        .apps
        .iter()
        .map(|a| seen.flows(&a.name) > 0 || exit.is_some_and(|e| e.sites[site].flows(&a.name) > 0))
        .collect();
    let remembered = memory.sites.entry(site.to_string()).or_default();
    let uplinks = remembered.capacities.smooth(plan::uplinks(
        &entry.lanes(site),
        exit.map(|e| e.lanes(site)).as_deref(),
    ));
    if uplinks.is_empty() {
        return Some(Vec::new());
    }
    let directions = match plan::directions(current, &active, &uplinks, &config.settings) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(site, "the site's table cannot be allocated: {e}");
            return Some(Vec::new());
        }
    };
    let mut basis = Basis::new(current.version, &directions, &uplinks);
    let stands = remembered
        .basis
        .as_ref()
        .is_some_and(|made| made.holds_for(&basis));
    let mut table = if stands {
        // Nothing changed that matters: the table stays, renewed if due.
        if !renew {
            return Some(Vec::new());
        }
        current.successor()
    } else {
        let [up, down] = [0, 1].map(|d| {
            (!directions[d].apps.is_empty())
                .then(|| solve(config, metrics, site, &directions[d], ["up", "down"][d]))
                .flatten()
        });
        plan::table(
            current,
            &directions,
            up.as_ref(),
            down.as_ref(),
            &config.settings,
        )
    };
    table.controller = Some(config.name.clone());
    // Each gateway whose table differs (or is to be renewed) gets it, as replacing
    // the version this controller saw there: one that took another table meanwhile
    // refuses it.
    let mut puts = Vec::new();
    for g in [at.entry, at.exit].into_iter().flatten() {
        let Some(there) = observed[g].as_ref().map(|o| &o.sites[site].table) else {
            continue;
        };
        if !renew && table.same_applications(there) {
            continue;
        }
        let mut table = table.clone();
        table.replaces = Some(there.version);
        puts.push(Put {
            gateway: g,
            site: site.to_string(),
            table,
        });
    }
    // The version the allocation is in force at: the new one once put; a put that
    // is refused shows another version next cycle, and the site is allocated anew.
    if !puts.is_empty() {
        basis.version = table.version;
    }
    remembered.basis = Some(basis);
    Some(puts)
}

/// Puts the tables, many at once: a gateway slow to answer holds up no other.
async fn put_all(gateways: &[Gateway], metrics: &Metrics, puts: Vec<Put>) {
    use futures::StreamExt;
    futures::stream::iter(puts)
        .for_each_concurrent(PUTS_AT_ONCE, |put| async move {
            let gateway = &gateways[put.gateway];
            let site = put.site.as_str();
            match gateway.push(site, &put.table).await {
                Ok(PushOutcome::Taken) => metrics.pushed(&gateway.url),
                Ok(PushOutcome::Refused(reason)) => {
                    metrics.push_failed(&gateway.url, "refused");
                    tracing::warn!(
                        gateway = %gateway.url, site,
                        "the gateway refused the table (another controller's may have come first): {reason}"
                    );
                }
                Err(e) => {
                    metrics.push_failed(&gateway.url, "error");
                    tracing::warn!(gateway = %gateway.url, site, "putting the table: {e:#}");
                }
            }
        })
        .await;
}

/// One direction's allocation by the configured solver; `auto` runs both where the
/// exact solve finishes within a quarter of the period and keeps the exact one.
fn solve(
    config: &ControllerConfig,
    metrics: &Metrics,
    site: &str,
    direction: &Direction,
    name: &str,
) -> Option<Allocation> {
    let clock = Clock::new();
    let timed = |f: &dyn Fn() -> Option<Allocation>| {
        let started = clock.now();
        let a = f();
        (a, clock.now().saturating_since(started))
    };
    let fast = || -> Option<Allocation> {
        fast::solve(&direction.problem)
            .map_err(|e| tracing::warn!(site, direction = name, "fast allocation: {e}"))
            .ok()
    };
    let exact = || -> Option<Allocation> {
        exact::solve(&direction.problem, config.period / EXACT_SHARE_OF_PERIOD)
            .map_err(|e| tracing::warn!(site, direction = name, "exact allocation: {e}"))
            .ok()
    };
    let (fast_result, fast_took) = match config.solver {
        Solver::Exact => (None, Duration::ZERO),
        Solver::Auto | Solver::Fast => timed(&fast),
    };
    let (exact_result, exact_took) = match config.solver {
        Solver::Fast => (None, Duration::ZERO),
        Solver::Auto | Solver::Exact => timed(&exact),
    };
    let (chosen, method, gap) = allocation::choose(exact_result, fast_result)?;
    if let Some(gap) = gap {
        metrics.gap(site, name, gap);
    }
    let took = match method {
        Method::Exact => exact_took,
        Method::Fast => fast_took,
    };
    metrics.allocated(site, name, method.as_str(), took, &chosen);
    Some(chosen)
}
