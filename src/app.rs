//! Runtime wiring of a gateway: TLS, lanes, the TUN device and the driver, plus the
//! signals (TERM and INT stop cleanly, HUP reloads the configuration: `reload.rs`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::cert::TlsMaterial;
use crate::clock::Clock;
use crate::config::{Config, RoleConfig};
use crate::control::admin::{self, Admin};
use crate::control::app_stats::{AppStats, SiteReport};
use crate::control::caps::CapKeeper;
use crate::control::command::DriverCommand;
use crate::control::metrics::Metrics;
use crate::control::pacing_control::{self, PacingControl};
use crate::control::status::StatusBoard;
use crate::core::engine::{
    DataPath, EngineConfig, LANE_QUEUE_LIMIT, LANE_STALL, Role, Shard, SiteIdx, SiteSpec,
};
use crate::core::time::Instant;
use crate::dispatch::{self, ThreadInputs};
use crate::driver::{Driver, DriverParts, ThreadLinks};
use crate::lane::client::{DialDemand, Dialers};
use crate::lane::{self, LaneEvent, dscp::ColourDscp, server::Admission};
use crate::notify::Notifier;
use crate::reload::{self, ReloadPlan};
use crate::tun::{self, Tun};

/// How long lanes get to close after the data path stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Runs a gateway until SIGTERM or SIGINT.
pub async fn run(config: Config, config_path: PathBuf) -> anyhow::Result<()> {
    for warning in config.warnings() {
        warn!("{warning}");
    }
    let material = TlsMaterial::load(&config.tls)?;
    let site_ids: Vec<String> = match &config.role {
        RoleConfig::Entry(entry) => vec![entry.site.clone()],
        RoleConfig::Exit(exit) => exit.sites.iter().map(|s| s.id.clone()).collect(),
    };
    let metrics = Arc::new(Metrics::new()?);
    // The controller's last tables: a restart must not lose them.
    let tables = match &config.pacing.state_file {
        Some(path) => {
            let (tables, set_aside) = pacing_control::load_state_or_set_aside(path, &site_ids);
            if set_aside {
                metrics.state_set_aside.inc();
            }
            tables
        }
        None => pacing_control::Tables::new(),
    };
    let token = config
        .admin
        .token_file
        .as_deref()
        .map(admin::read_token)
        .transpose()?;
    let admin_listener = admin::bind(config.admin.listen).await?;
    let clock = Clock::new();
    let shutdown = CancellationToken::new();
    let (events_tx, events_rx) = mpsc::channel(256);
    let mut tasks = tokio::task::JoinSet::new();

    // Everything that can fail on bad input or a busy port happens before the TUN
    // device exists, so a failed start leaves nothing behind.
    // The entry's dialers run here and change with reloads.
    let dialer_tasks = TaskTracker::new();
    let mut dialers = None;
    let mut dial_demand = None;
    let mut admission = None;
    let dscp = ColourDscp {
        green: config.abe.green_dscp,
        blue: config.abe.blue_dscp,
    };
    let (role, sites) = match &config.role {
        RoleConfig::Entry(entry) => {
            let tls = lane::client::tls_config(&material)?;
            let mut d = Dialers::new(
                tls,
                dscp,
                events_tx.clone(),
                clock,
                shutdown.clone(),
                dialer_tasks.clone(),
            );
            d.show_exits_in(metrics.clone());
            d.apply(entry);
            dial_demand = Some(d.dial_demand());
            dialers = Some(d);
            let site = SiteSpec {
                id: entry.site.clone(),
                prefixes: Vec::new(),
            };
            (Role::Entry, vec![site])
        }
        RoleConfig::Exit(exit) => {
            let (admission_tx, admission_rx) =
                watch::channel(Arc::new(Admission::new(site_set(&exit.sites), &material)?));
            let listener = lane::server::bind(exit.listen, admission_rx, dscp)
                .with_context(|| format!("listening on {}", exit.listen))?;
            info!(listen = %exit.listen, "accepting lanes");
            tasks.spawn(lane::server::run(
                listener,
                events_tx.clone(),
                shutdown.clone(),
            ));
            admission = Some(admission_tx);
            (Role::Exit, exit.sites.clone())
        }
    };
    drop(events_tx);
    let threads = match &config.role {
        RoleConfig::Entry(_) => 1,
        RoleConfig::Exit(exit) => exit.data_path_threads(),
    };
    let tuns = match Tun::open(&config.tun, &reload::tunnel_routes(&config), threads).await {
        Ok(tuns) => tuns,
        Err(e) => {
            shutdown.cancel();
            return Err(e);
        }
    };
    // One thread per queue the kernel gave.
    let threads = tuns.len();
    let tun_name = tuns[0].name().to_string();
    if threads > 1 {
        info!(threads, "sites spread over data-path threads");
    }
    let report = Arc::new(Mutex::new(Vec::new()));
    let (commands_tx, commands_rx) = mpsc::channel(16);
    let status = Arc::new(StatusBoard::new(threads));
    let control = Arc::new(PacingControl::new(
        site_ids.clone(),
        tables.clone(),
        config.pacing.state_file.clone(),
        commands_tx.clone(),
        report.clone(),
    ));
    let notifier = Arc::new(Notifier::from_env());
    tasks.spawn(watch_signals(
        shutdown.clone(),
        Reloader {
            path: config_path,
            tun: tun_name,
            running: config.clone(),
            material,
            driver: commands_tx.clone(),
            pacing: control.clone(),
            dialers,
            admission,
            metrics: metrics.clone(),
        },
        notifier.clone(),
    ));
    tasks.spawn(admin::serve(
        admin_listener,
        Arc::new(Admin {
            metrics: metrics.clone(),
            pacing: control,
            token,
            status: status.clone(),
            driver: commands_tx,
        }),
        shutdown.clone(),
    ));
    // One thread takes the lanes and commands itself; several have them routed.
    let inputs: Vec<(mpsc::Receiver<LaneEvent>, mpsc::Receiver<DriverCommand>)> = if threads == 1 {
        vec![(events_rx, commands_rx)]
    } else {
        let (routes, inputs) = (0..threads)
            .map(|_| {
                let (events, events_rx) = mpsc::channel(256);
                let (commands, commands_rx) = mpsc::channel(16);
                (ThreadInputs { events, commands }, (events_rx, commands_rx))
            })
            .unzip();
        tasks.spawn(dispatch::run(
            events_rx,
            commands_rx,
            routes,
            site_ids.clone(),
            shutdown.clone(),
        ));
        inputs
    };
    let threads_of = ThreadsOf {
        config: &config,
        role,
        sites: &sites,
        site_ids: &site_ids,
        tables: &tables,
        metrics: &metrics,
        report: &report,
        clock,
        status: &status,
        notifier: &notifier,
        dial_demand: dial_demand.as_ref(),
    };
    let mut drivers: Vec<Driver> = tuns
        .into_iter()
        .zip(ThreadLinks::all(threads))
        .zip(inputs)
        .map(|((tun, links), (events, commands))| threads_of.driver(tun, links, events, commands))
        .collect::<anyhow::Result<_>>()?;
    // The first thread runs here, as the only one did; the others beside it. Any
    // of them stopping (its TUN queue or the thread writing it failed) stops the
    // gateway.
    let first = drivers.remove(0);
    let mut others = tokio::task::JoinSet::new();
    for driver in drivers {
        let shutdown = shutdown.clone();
        others.spawn(async move {
            let ended = driver.run(shutdown.clone()).await;
            shutdown.cancel();
            ended
        });
    }
    // The first failure is the gateway's: it exits with it, and systemd restarts it.
    let mut ended = first.run(shutdown.clone()).await;
    shutdown.cancel();
    while let Some(other) = others.join_next().await {
        let other = other
            .map_err(|e| anyhow::anyhow!("a data-path thread panicked: {e}"))
            .and_then(|ended| ended);
        if ended.is_ok() {
            ended = other;
        }
    }
    dialer_tasks.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, async {
        while tasks.join_next().await.is_some() {}
        dialer_tasks.wait().await;
    })
    .await
    .is_err()
    {
        warn!("some lanes did not close within {SHUTDOWN_GRACE:?}");
    }
    info!("stopped");
    ended.context("the data path stopped")
}

/// What every data-path thread of a gateway is built from.
pub(crate) struct ThreadsOf<'a> {
    pub config: &'a Config,
    pub role: Role,
    pub sites: &'a [SiteSpec],
    pub site_ids: &'a [String],
    /// The controller's last tables, restored at start.
    pub tables: &'a pacing_control::Tables,
    pub metrics: &'a Arc<Metrics>,
    pub report: &'a Arc<Mutex<Vec<SiteReport>>>,
    pub clock: Clock,
    pub status: &'a Arc<StatusBoard>,
    pub notifier: &'a Arc<Notifier>,
    pub dial_demand: Option<&'a DialDemand>,
}

impl ThreadsOf<'_> {
    /// The driver of the thread `links` names, over its TUN queue `tun`, with its
    /// own engine holding the tables of the sites it serves.
    pub(crate) fn driver(
        &self,
        tun: Tun,
        links: ThreadLinks,
        events: mpsc::Receiver<LaneEvent>,
        commands: mpsc::Receiver<DriverCommand>,
    ) -> anyhow::Result<Driver> {
        let config = self.config;
        let mut engine = DataPath::new(engine_config(config, self.role, self.sites, links.shard));
        let caps = match &config.role {
            RoleConfig::Entry(entry) => Some(CapKeeper::new(
                entry,
                config.tiers,
                config.caps_state_file.clone(),
                self.metrics.clone(),
            )),
            RoleConfig::Exit(_) => None,
        };
        for (site, table) in self.tables {
            if let Some(i) = self.site_ids.iter().position(|s| s == site)
                && engine.owns(SiteIdx(i as u32))
            {
                engine.handle_pacing_table(SiteIdx(i as u32), table.clone(), Instant::ZERO);
                info!(
                    site,
                    version = table.version,
                    apps = table.apps.len(),
                    "pacing table restored"
                );
            }
        }
        let app_stats = AppStats::new(self.metrics.clone(), &engine, self.report.clone());
        Driver::new(DriverParts {
            engine,
            app_stats,
            metrics: self.metrics.clone(),
            clock: self.clock,
            tun,
            events,
            commands,
            links,
            status: self.status.clone(),
            notifier: self.notifier.clone(),
            dial_demand: self.dial_demand.cloned(),
            caps,
        })
        .context("starting the thread that writes the TUN device")
    }
}

/// What a data-path thread's engine is built from.
fn engine_config(config: &Config, role: Role, sites: &[SiteSpec], shard: Shard) -> EngineConfig {
    EngineConfig::builder()
        .role(role)
        .sites(sites.to_vec())
        .tun_mtu(config.tun.mtu as usize)
        .algorithm(config.scheduler.algorithm)
        .flow_idle_timeout(config.scheduler.flow_idle_timeout)
        .max_flows(config.scheduler.max_flows)
        .default_rate_kbps(Some(config.pacing.default_rate_kbps))
        .background(config.pacing.background)
        .lane_stall(LANE_STALL)
        .lane_queue_limit(LANE_QUEUE_LIMIT)
        .green_inner_dscp(config.abe.green_inner_dscp.clone())
        .abe(config.abe.queues)
        .shard(shard)
        .warm_up_lanes(true)
        .tiers(config.tiers)
        .site_to_site(matches!(&config.role, RoleConfig::Exit(x) if x.site_to_site))
        .build()
}

/// The ids of an exit's sites, as its admission checks them.
fn site_set(sites: &[SiteSpec]) -> HashSet<String> {
    sites.iter().map(|s| s.id.clone()).collect()
}

/// What a reload needs: the file, what runs, and the parts it changes.
struct Reloader {
    path: PathBuf,
    /// The TUN device's name, whose routes a reload changes.
    tun: String,
    running: Config,
    /// The certificates in use, compared by content with the files at each reload.
    material: TlsMaterial,
    driver: mpsc::Sender<DriverCommand>,
    pacing: Arc<PacingControl>,
    /// The entry's dialers (none at an exit).
    dialers: Option<Dialers>,
    /// The exit's admission of lanes (none at an entry).
    admission: Option<watch::Sender<Arc<Admission>>>,
    /// Counts reloads applied and refused.
    metrics: Arc<Metrics>,
}

impl Reloader {
    /// Re-reads and validates the file and applies what can change while running;
    /// an invalid file, or certificates that cannot be used, change nothing.
    async fn reload(&mut self) {
        let new = match Config::load(&self.path) {
            Ok(new) => new,
            Err(e) => {
                warn!(error = %e, "reload: the configuration is invalid; nothing changed");
                self.metrics.reload(false);
                return;
            }
        };
        let plan = ReloadPlan::new(&self.running, &new);
        // Everything that can fail is prepared before anything is applied.
        let material = match TlsMaterial::load(&new.tls) {
            Ok(m) if m.same_as(&self.material) => None,
            Ok(m) => Some(m),
            Err(e) => {
                warn!(error = format!("{e:#}"), "reload: tls: nothing changed");
                self.metrics.reload(false);
                return;
            }
        };
        let prepared = self.prepare_tls(material.as_ref(), &plan, &new);
        let (client_tls, admission) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => {
                warn!(error = format!("{e:#}"), "reload: tls: nothing changed");
                self.metrics.reload(false);
                return;
            }
        };
        if !plan.fixed.is_empty() {
            warn!(
                keys = plan.fixed.join(", "),
                "reload: these cannot change while the gateway runs; keeping their running values"
            );
        }
        if !plan.at_restart.is_empty() {
            warn!(
                keys = plan.at_restart.join(", "),
                "reload: this build applies these at the next restart"
            );
        }
        if self.apply(&plan, client_tls, admission).await.is_err() {
            return; // The data path has stopped.
        }
        if let Some(material) = material {
            info!("reload: new certificate files; every handshake from now on uses them");
            self.material = material;
        }
        let mut after = plan.running_after(&self.running, &new);
        if let Some(path) = &plan.state_file
            && let Err(e) = self.pacing.move_state_file(path.clone()).await
        {
            // Kept as it runs, so that the next reload tries the new file again.
            after
                .pacing
                .state_file
                .clone_from(&self.running.pacing.state_file);
            warn!(
                error = ?e,
                path = ?path,
                "reload: pacing.state_file: the tables cannot be written there; the previous file stays in use"
            );
        }
        self.running = after;
        self.metrics.reload(true);
        info!("reload: done");
    }

    /// The entry's TLS configuration and the exit's admission the reload installs,
    /// when new certificates or (exit) new sites need them.
    fn prepare_tls(
        &self,
        material: Option<&TlsMaterial>,
        plan: &ReloadPlan,
        new: &Config,
    ) -> anyhow::Result<(Option<Arc<rustls::ClientConfig>>, Option<Admission>)> {
        let client_tls = match (material, &self.dialers) {
            (Some(m), Some(_)) => Some(lane::client::tls_config(m)?),
            _ => None,
        };
        let admission = match (&self.admission, &new.role) {
            (Some(_), RoleConfig::Exit(exit)) if material.is_some() || plan.sites.is_some() => {
                let sites = plan.sites.as_deref().unwrap_or(&exit.sites);
                Some(Admission::new(
                    site_set(sites),
                    material.unwrap_or(&self.material),
                )?)
            }
            _ => None,
        };
        Ok((client_tls, admission))
    }

    /// Applies a plan; fails only when the data path has stopped.
    async fn apply(
        &mut self,
        plan: &ReloadPlan,
        client_tls: Option<Arc<rustls::ClientConfig>>,
        admission: Option<Admission>,
    ) -> Result<(), ()> {
        let mut commands = Vec::new();
        if let Some(scheduler) = &plan.scheduler {
            commands.push(DriverCommand::Reschedule(scheduler.clone()));
        }
        if let Some(kbps) = plan.default_rate_kbps {
            commands.push(DriverCommand::DefaultRate(kbps));
        }
        if let Some(settings) = plan.background {
            commands.push(DriverCommand::Background(settings));
        }
        if let Some(allowed) = plan.site_to_site {
            commands.push(DriverCommand::SiteToSite(allowed));
        }
        if let Some((entry, settings)) = &plan.tiers {
            commands.push(DriverCommand::Tiers {
                entry: entry.clone().map(Box::new),
                settings: *settings,
            });
        }
        if let Some(sites) = &plan.sites {
            // The data path first: a lane of a new site that the new admission lets
            // in finds its site there, and one of a removed site is refused by both.
            commands.push(DriverCommand::ServeSites(sites.clone()));
            let ids: Vec<String> = sites.iter().map(|s| s.id.clone()).collect();
            self.pacing.serve_sites(&ids);
        }
        for command in commands {
            self.driver.send(command).await.map_err(|_| ())?;
        }
        let routes_changed = !plan.routes_added.is_empty() || !plan.routes_removed.is_empty();
        if routes_changed
            && let Err(e) =
                tun::change_routes(&self.tun, &plan.routes_added, &plan.routes_removed).await
        {
            warn!(error = format!("{e:#}"), "reload: routes");
        }
        if let Some(filter) = &plan.log_filter {
            crate::logging::set_filter(filter);
            info!(filter, "reload: log filter applied");
        }
        if let (Some(sender), Some(admission)) = (&self.admission, admission) {
            sender.send_replace(Arc::new(admission));
        }
        if let Some(dialers) = &mut self.dialers {
            if let Some(tls) = client_tls {
                dialers.set_tls(tls);
            }
            if let Some(entry) = &plan.entry {
                dialers.apply(entry);
            }
        }
        Ok(())
    }
}

async fn watch_signals(
    shutdown: CancellationToken,
    mut reloader: Reloader,
    notifier: Arc<Notifier>,
) {
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        error!("cannot install signal handlers; stop the daemon with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                notifier.reloading(crate::clock::monotonic_usec());
                reloader.reload().await;
                notifier.ready();
            }
            () = shutdown.cancelled() => return,
        }
    }
    info!("stopping");
    notifier.stopping();
    shutdown.cancel();
}
