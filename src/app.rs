//! Runtime wiring of a gateway: TLS, lanes, the TUN device and the driver, plus the
//! signals (TERM and INT stop cleanly, HUP reloads the configuration: `reload.rs`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::admin::{self, Admin};
use crate::app_stats::AppStats;
use crate::cert::TlsMaterial;
use crate::clock::Clock;
use crate::config::{Config, RoleConfig};
use crate::core::engine::{
    DataPath, EngineConfig, LANE_QUEUE_LIMIT, LANE_STALL, Role, SiteIdx, SiteSpec,
};
use crate::core::time::Instant;
use crate::driver::{Driver, DriverCommand, DriverParts};
use crate::lane::{self, client::Dialers};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::pacing_control::{self, PacingControl};
use crate::reload::ReloadPlan;
use crate::status::Status;
use crate::tun::Tun;

/// How long lanes get to close after the data path stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Runs a gateway until SIGTERM or SIGINT.
pub async fn run(config: Config, config_path: PathBuf) -> anyhow::Result<()> {
    let material = TlsMaterial::load(&config.tls)?;
    let site_ids: Vec<String> = match &config.role {
        RoleConfig::Entry(entry) => vec![entry.site.clone()],
        RoleConfig::Exit(exit) => exit.sites.iter().map(|s| s.id.clone()).collect(),
    };
    // The controller's last tables: a restart must not lose them.
    let tables = match &config.pacing.state_file {
        Some(path) => pacing_control::load_state(path, &site_ids)
            .map_err(|e| anyhow::anyhow!("pacing.state_file: {e:#}"))?,
        None => pacing_control::Tables::new(),
    };
    let token = config
        .admin
        .token_file
        .as_deref()
        .map(admin::read_token)
        .transpose()?;
    let metrics = Arc::new(Metrics::new()?);
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
    let (role, sites, tun_routes) = match &config.role {
        RoleConfig::Entry(entry) => {
            let tls = lane::client::tls_config(&material)?;
            let mut d = Dialers::new(
                tls,
                events_tx.clone(),
                clock,
                shutdown.clone(),
                dialer_tasks.clone(),
            );
            d.apply(entry);
            dialers = Some(d);
            let site = SiteSpec {
                id: entry.site.clone(),
                prefixes: Vec::new(),
            };
            (Role::Entry, vec![site], config.tun.routes.clone())
        }
        RoleConfig::Exit(exit) => {
            let listener = lane::server::bind(exit.listen, &material)
                .with_context(|| format!("listening on {}", exit.listen))?;
            info!(listen = %exit.listen, "accepting lanes");
            let ids: HashSet<String> = exit.sites.iter().map(|s| s.id.clone()).collect();
            tasks.spawn(lane::server::run(
                listener,
                Arc::new(ids),
                events_tx.clone(),
                shutdown.clone(),
            ));
            let sites = exit.sites.clone();
            let mut routes: Vec<_> = sites.iter().flat_map(|s| s.prefixes.clone()).collect();
            routes.extend(config.tun.routes.iter().copied());
            (Role::Exit, sites, routes)
        }
    };
    drop(events_tx);
    let tun = match Tun::open(&config.tun, &tun_routes).await {
        Ok(tun) => tun,
        Err(e) => {
            shutdown.cancel();
            return Err(e);
        }
    };
    let mut engine = DataPath::new(EngineConfig {
        role,
        sites,
        tun_mtu: config.tun.mtu as usize,
        algorithm: config.scheduler.algorithm,
        flow_idle_timeout: config.scheduler.flow_idle_timeout,
        max_flows: config.scheduler.max_flows,
        default_rate_kbps: Some(config.pacing.default_rate_kbps),
        lane_stall: LANE_STALL,
        lane_queue_limit: LANE_QUEUE_LIMIT,
    });
    for (site, table) in &tables {
        if let Some(i) = site_ids.iter().position(|s| s == site) {
            engine.handle_pacing_table(SiteIdx(i as u32), table.clone(), Instant::ZERO);
            info!(
                site,
                version = table.version,
                apps = table.apps.len(),
                "pacing table restored"
            );
        }
    }
    let report = Arc::new(Mutex::new(Vec::new()));
    let app_stats = AppStats::new(metrics.clone(), &engine, report.clone());
    let (commands_tx, commands_rx) = mpsc::channel(16);
    let status = Arc::new(Mutex::new(Status::default()));
    let control = PacingControl::new(
        site_ids,
        tables,
        config.pacing.state_file.clone(),
        commands_tx.clone(),
        report,
    );
    let notifier = Arc::new(Notifier::from_env());
    tasks.spawn(watch_signals(
        shutdown.clone(),
        Reloader {
            path: config_path,
            running: config.clone(),
            driver: commands_tx,
            dialers,
        },
        notifier.clone(),
    ));
    tasks.spawn(admin::serve(
        admin_listener,
        Arc::new(Admin {
            metrics: metrics.clone(),
            pacing: Arc::new(control),
            token,
            status: status.clone(),
        }),
        shutdown.clone(),
    ));
    let driver = Driver::new(DriverParts {
        engine,
        app_stats,
        metrics,
        clock,
        tun,
        tun_mtu: config.tun.mtu as usize,
        events: events_rx,
        commands: commands_rx,
        status,
        notifier,
    });
    driver.run(shutdown.clone()).await;
    shutdown.cancel();
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
    Ok(())
}

/// What a reload needs: the file, the configuration running, and the data path.
struct Reloader {
    path: PathBuf,
    running: Config,
    driver: mpsc::Sender<DriverCommand>,
    /// The entry's dialers (none at an exit).
    dialers: Option<Dialers>,
}

impl Reloader {
    /// Re-reads and validates the file and applies what can change while running;
    /// an invalid file changes nothing.
    async fn reload(&mut self) {
        let new = match Config::load(&self.path) {
            Ok(new) => new,
            Err(e) => {
                warn!(error = %e, "reload: the configuration is invalid; nothing changed");
                return;
            }
        };
        let plan = ReloadPlan::new(&self.running, &new);
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
        if let Some(scheduler) = plan.scheduler.clone()
            && self
                .driver
                .send(DriverCommand::Reschedule(scheduler))
                .await
                .is_err()
        {
            return; // The data path has stopped.
        }
        self.running = plan.running_after(&self.running, &new);
        if plan.uplinks.is_some()
            && let (Some(dialers), RoleConfig::Entry(entry)) =
                (&mut self.dialers, &self.running.role)
        {
            dialers.apply(entry);
        }
        info!("reload: done");
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
