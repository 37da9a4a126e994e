//! An exit with several data-path threads: each new lane goes to the thread serving
//! its site, each command to the threads it concerns (a pacing table to its site's
//! thread, settings and the site list to all). Sites are spread over the threads by
//! their index in the engines ([`Shard::of`]), which this task follows as the engines
//! do: the configured sites in order, then every site a reload adds, appended.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::control::command::DriverCommand;
use crate::core::engine::{Shard, SiteIdx};
use crate::lane::LaneEvent;

/// Where one thread takes its lanes and commands.
pub struct ThreadInputs {
    pub events: mpsc::Sender<LaneEvent>,
    pub commands: mpsc::Sender<DriverCommand>,
}

/// Routes lanes and commands to `threads` until `shutdown`; `site_ids` are the sites
/// the engines start with, in order.
pub async fn run(
    mut events: mpsc::Receiver<LaneEvent>,
    mut commands: mpsc::Receiver<DriverCommand>,
    threads: Vec<ThreadInputs>,
    mut site_ids: Vec<String>,
    shutdown: CancellationToken,
) {
    let count = threads.len();
    // A thread that stopped has stopped the gateway: what it would have got is moot.
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(event) = events.recv() => {
                let thread = match &event {
                    // A site no engine knows goes to the first thread, which refuses it.
                    LaneEvent::Up(lane) => site_ids
                        .iter()
                        .position(|id| *id == lane.site)
                        .map_or(0, |i| Shard::of(SiteIdx(i as u32), count)),
                    LaneEvent::Refused { .. } => 0,
                };
                let _ = threads[thread].events.send(event).await;
            }
            Some(command) = commands.recv() => {
                for (thread, command) in route(command, count, &mut site_ids) {
                    let _ = threads[thread].commands.send(command).await;
                }
            }
            else => break,
        }
    }
    debug!("lane and command routing stopped");
}

/// The threads a command goes to, each with its copy.
fn route(
    command: DriverCommand,
    count: usize,
    site_ids: &mut Vec<String>,
) -> Vec<(usize, DriverCommand)> {
    let every = |make: &dyn Fn() -> DriverCommand| (0..count).map(|t| (t, make())).collect();
    match command {
        DriverCommand::ApplyPacing { site, table, done } => {
            let thread = Shard::of(site, count);
            vec![(thread, DriverCommand::ApplyPacing { site, table, done })]
        }
        DriverCommand::Reschedule(config) => every(&|| DriverCommand::Reschedule(config.clone())),
        DriverCommand::DefaultRate(kbps) => every(&|| DriverCommand::DefaultRate(kbps)),
        DriverCommand::Background(settings) => every(&|| DriverCommand::Background(settings)),
        DriverCommand::SiteToSite(allowed) => every(&|| DriverCommand::SiteToSite(allowed)),
        DriverCommand::Tiers { entry, settings } => every(&|| DriverCommand::Tiers {
            entry: entry.clone(),
            settings,
        }),
        DriverCommand::PublishStatus(done) => every(&|| DriverCommand::PublishStatus(done.clone())),
        DriverCommand::ServeSites(sites) => {
            for site in &sites {
                if !site_ids.contains(&site.id) {
                    site_ids.push(site.id.clone());
                }
            }
            every(&|| DriverCommand::ServeSites(sites.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::engine::{DataPath, EngineConfig, Role, SiteSpec};
    use crate::core::pacing_table::PacingTable;
    use crate::core::time::Instant;

    fn spec(id: &str) -> SiteSpec {
        SiteSpec {
            id: id.into(),
            prefixes: Vec::new(),
        }
    }

    #[test]
    fn a_pacing_table_goes_to_its_sites_thread_and_settings_to_every_thread() {
        let mut ids = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let (done, _) = tokio::sync::oneshot::channel();
        let pacing = DriverCommand::ApplyPacing {
            site: SiteIdx(2),
            table: PacingTable::default(),
            done,
        };
        let threads: Vec<usize> = route(pacing, 2, &mut ids).iter().map(|r| r.0).collect();
        assert_eq!(threads, [0]);
        let threads: Vec<usize> = route(DriverCommand::DefaultRate(5), 3, &mut ids)
            .iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(threads, [0, 1, 2]);
    }

    #[test]
    fn reloads_give_sites_the_indexes_the_engines_give_them() {
        let config = EngineConfig::builder()
            .role(Role::Exit)
            .sites(vec![spec("a"), spec("b")])
            .build();
        let mut engine = DataPath::new(config);
        let mut ids: Vec<String> = engine.sites().map(|(_, id)| id.to_string()).collect();
        // b removed and c added, then b back and d added: a site keeps its index,
        // a new one takes the next.
        for reload in [
            vec![spec("a"), spec("c")],
            vec![spec("b"), spec("d"), spec("c")],
        ] {
            let routed = route(DriverCommand::ServeSites(reload.clone()), 2, &mut ids);
            assert_eq!(routed.len(), 2, "every thread");
            engine.handle_sites(&reload, Instant::ZERO);
            let engine_ids: Vec<&str> = engine.sites().map(|(_, id)| id).collect();
            assert_eq!(ids, engine_ids);
        }
        assert_eq!(ids, ["a", "b", "c", "d"]);
    }
}
