//! What a reload (SIGHUP, `systemctl reload`) does with a new, valid configuration:
//! which changes apply at once, which a running gateway cannot take (named and kept),
//! and which this build applies only at the next restart (named too). New
//! certificate files are found by content, not by the configuration, so the shell
//! (`app.rs`) compares them itself.

use std::path::PathBuf;

use ipnet::IpNet;

use crate::config::{Config, EntryConfig, RoleConfig, SchedulerConfig, TunConfig};
use crate::core::background::BackgroundSettings;
use crate::core::engine::SiteSpec;
use crate::core::tiers::TierSettings;

/// The outcome of comparing the running configuration with a new one.
#[derive(Debug, Default, PartialEq)]
pub struct ReloadPlan {
    /// The scheduler settings, when they changed: applied at once.
    pub scheduler: Option<SchedulerConfig>,
    /// The entry's uplinks and exit, when they changed: lanes of removed or changed
    /// uplinks close, new ones start (all of them when the exit changed).
    pub entry: Option<EntryConfig>,
    /// The exit's sites, when they changed: new ones are admitted, the lanes of
    /// removed ones close and are refused from then on.
    pub sites: Option<Vec<SiteSpec>>,
    /// Prefixes sent into the tunnel from now on, and those no longer sent.
    pub routes_added: Vec<IpNet>,
    pub routes_removed: Vec<IpNet>,
    /// The exit's `site_to_site`, when it changed.
    pub site_to_site: Option<bool>,
    /// The entry's uplinks and `[tiers]`, when either changed (a changed uplink's
    /// lanes dial again too, their hello carrying its new tier and limits).
    pub tiers: Option<(Option<EntryConfig>, TierSettings)>,
    /// `pacing.default_rate_kbps`, when it changed.
    pub default_rate_kbps: Option<u64>,
    /// `pacing.background_method` and `pacing.background_interval_ms`, when either
    /// changed.
    pub background: Option<BackgroundSettings>,
    /// `pacing.state_file`, when it changed: tables are written there at once.
    pub state_file: Option<Option<PathBuf>>,
    /// `log.filter`, when it changed.
    pub log_filter: Option<String>,
    /// Keys that cannot change while the gateway runs; their running values stay.
    pub fixed: Vec<&'static str>,
    /// Keys that changed and take effect at the next restart in this build.
    pub at_restart: Vec<&'static str>,
}

impl ReloadPlan {
    /// Compares `running` with `new`.
    pub fn new(running: &Config, new: &Config) -> ReloadPlan {
        let mut plan = ReloadPlan::default();
        // Every key of [tun] is named here: a new one must say what a reload does
        // with it, or this stops compiling.
        let TunConfig {
            name,
            addresses,
            mtu,
            routes: _, // applied at once, below
            offload,
        } = &new.tun;
        mark(&mut plan.fixed, *name != running.tun.name, "tun.name");
        let listen_changed = new.admin.listen != running.admin.listen;
        mark(&mut plan.fixed, listen_changed, "admin.listen");
        match (&running.role, &new.role) {
            (RoleConfig::Entry(a), RoleConfig::Entry(b)) => {
                mark(&mut plan.fixed, a.site != b.site, "site");
                let lanes_changed = a.uplinks != b.uplinks || a.exits != b.exits;
                if lanes_changed && a.site == b.site {
                    plan.entry = Some(b.clone());
                }
            }
            (RoleConfig::Exit(a), RoleConfig::Exit(b)) => {
                mark(&mut plan.fixed, a.listen != b.listen, "listen");
                mark(
                    &mut plan.at_restart,
                    a.threads != b.threads,
                    "listen.threads",
                );
                if a.sites != b.sites {
                    plan.sites = Some(b.sites.clone());
                }
                if a.site_to_site != b.site_to_site {
                    plan.site_to_site = Some(b.site_to_site);
                }
            }
            _ => plan.fixed.push("role"),
        }
        if !plan.fixed.contains(&"role") {
            let (before, after) = (tunnel_routes(running), tunnel_routes(new));
            plan.routes_added = after
                .iter()
                .filter(|r| !before.contains(r))
                .copied()
                .collect();
            plan.routes_removed = before
                .iter()
                .filter(|r| !after.contains(r))
                .copied()
                .collect();
        }
        let tun_changed = *addresses != running.tun.addresses || *mtu != running.tun.mtu;
        mark(&mut plan.at_restart, tun_changed, "tun.address, tun.mtu");
        // The TUN device's offloads are negotiated when it opens.
        mark(
            &mut plan.at_restart,
            *offload != running.tun.offload,
            "tun.offload",
        );
        mark(&mut plan.at_restart, new.abe != running.abe, "abe");
        let token_changed = new.admin.token_file != running.admin.token_file;
        mark(&mut plan.at_restart, token_changed, "admin.token_file");
        if new.scheduler != running.scheduler {
            plan.scheduler = Some(new.scheduler.clone());
        }
        if (plan.entry.is_some() || new.tiers != running.tiers) && !plan.fixed.contains(&"role") {
            let entry = match &new.role {
                RoleConfig::Entry(e) => Some(e.clone()),
                RoleConfig::Exit(_) => None,
            };
            plan.tiers = Some((entry, new.tiers));
        }
        mark(
            &mut plan.at_restart,
            new.caps_state_file != running.caps_state_file,
            "caps.state_file",
        );
        if new.pacing.background != running.pacing.background {
            plan.background = Some(new.pacing.background);
        }
        if new.pacing.default_rate_kbps != running.pacing.default_rate_kbps {
            plan.default_rate_kbps = Some(new.pacing.default_rate_kbps);
        }
        if new.pacing.state_file != running.pacing.state_file {
            plan.state_file = Some(new.pacing.state_file.clone());
        }
        if new.log != running.log {
            plan.log_filter = Some(new.log.filter.clone());
        }
        plan
    }

    /// The configuration that runs after the reload: `new`, with the keys that cannot
    /// change and those this build applies only at a restart kept as they run.
    pub fn running_after(&self, running: &Config, new: &Config) -> Config {
        let mut after = running.clone();
        after.scheduler = new.scheduler.clone();
        after.pacing = new.pacing.clone();
        after.tls = new.tls.clone();
        after.log = new.log.clone();
        after.tiers = new.tiers;
        if !self.fixed.contains(&"role") {
            after.tun.routes.clone_from(&new.tun.routes);
        }
        match &mut after.role {
            RoleConfig::Entry(entry) => {
                if let Some(new) = &self.entry {
                    *entry = new.clone();
                }
            }
            RoleConfig::Exit(exit) => {
                if let Some(sites) = &self.sites {
                    exit.sites.clone_from(sites);
                }
                if let Some(allowed) = self.site_to_site {
                    exit.site_to_site = allowed;
                }
            }
        }
        after
    }
}

/// The prefixes a gateway sends into its TUN device: the configured routes, and at
/// an exit every site's prefixes.
pub fn tunnel_routes(config: &Config) -> Vec<IpNet> {
    let mut routes = Vec::new();
    if let RoleConfig::Exit(exit) = &config.role {
        routes.extend(exit.sites.iter().flat_map(|s| s.prefixes.iter().copied()));
    }
    routes.extend(config.tun.routes.iter().copied());
    routes
}

/// Adds `key` to `keys` when it `changed`.
fn mark(keys: &mut Vec<&'static str>, changed: bool, key: &'static str) {
    if changed {
        keys.push(key);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::core::sched::Algorithm;

    /// A directory holding a CA and an exit's certificate, removed when dropped.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new() -> Dir {
            static RUN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let run = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("braid-reload-{}-{run}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("dir");
            crate::cert::init_ca(&dir).expect("ca");
            crate::cert::issue(&dir, "exit").expect("certificate");
            Dir(dir)
        }

        /// An exit's configuration with TUN device `tun` and `extra` appended.
        fn exit(&self, tun: &str, extra: &str) -> Config {
            let file = self.0.join(format!("{tun}-{}.toml", extra.len()));
            let text = format!(
                "role = \"exit\"\n[tls]\nca = \"ca.pem\"\ncert = \"exit.pem\"\n\
                 key = \"exit.key\"\n[[sites]]\nid = \"branch-01\"\n\
                 prefixes = [\"10.1.0.0/16\"]\n[listen]\naddress = \"127.0.0.1:4433\"\n\
                 [tun]\nname = \"{tun}\"\n{extra}"
            );
            std::fs::write(&file, text).expect("write");
            Config::load(Path::new(&file)).expect("valid")
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn scheduler_changes_apply_and_the_rest_is_named() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        assert_eq!(ReloadPlan::new(&running, &running), ReloadPlan::default());
        let new = dir.exit("braid0", "[scheduler]\nalgorithm = \"round-robin\"\n");
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(
            plan.scheduler.as_ref().map(|s| s.algorithm),
            Some(Algorithm::RoundRobin)
        );
        assert!(
            plan.fixed.is_empty() && plan.at_restart.is_empty(),
            "{plan:?}"
        );
        assert_eq!(plan.running_after(&running, &new), new);
    }

    #[test]
    fn site_to_site_applies_at_once() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let mut new = running.clone();
        if let RoleConfig::Exit(x) = &mut new.role {
            x.site_to_site = true;
        }
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(plan.site_to_site, Some(true));
        assert_eq!(plan.running_after(&running, &new), new);
    }

    #[test]
    fn tier_timing_applies_at_once() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let new = dir.exit("braid0", "[tiers]\nhold_ms = 2000\n");
        let plan = ReloadPlan::new(&running, &new);
        let settings = TierSettings {
            hold: std::time::Duration::from_secs(2),
            ..TierSettings::default()
        };
        assert_eq!(plan.tiers, Some((None, settings)));
        assert!(plan.fixed.is_empty() && plan.at_restart.is_empty());
        assert_eq!(plan.running_after(&running, &new), new);
    }

    #[test]
    fn what_cannot_change_is_named_and_kept() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let new = dir.exit("braid9", "address = [\"10.0.0.1/32\"]\n");
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(plan.fixed, ["tun.name"]);
        assert_eq!(plan.at_restart, ["tun.address, tun.mtu"]);
        assert_eq!((plan.scheduler.as_ref(), plan.sites.as_ref()), (None, None));
        assert_eq!(plan.running_after(&running, &new), running);
    }

    #[test]
    fn a_change_of_the_tun_offloads_is_named_for_the_next_restart() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let mut new = running.clone();
        new.tun.offload = !running.tun.offload;
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(plan.at_restart, ["tun.offload"]);
        assert!(plan.fixed.is_empty(), "{plan:?}");
        assert_eq!(plan.running_after(&running, &new), running);
    }

    #[test]
    fn the_exits_thread_count_applies_at_the_next_restart() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let mut new = running.clone();
        if let RoleConfig::Exit(exit) = &mut new.role {
            exit.threads = Some(2);
        }
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(plan.at_restart, ["listen.threads"]);
        assert!(plan.fixed.is_empty(), "{plan:?}");
        assert_eq!(plan.running_after(&running, &new), running);
    }

    #[test]
    fn sites_routes_and_pacing_apply() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "routes = [\"10.9.0.0/16\"]\n");
        let new = dir.exit(
            "braid0",
            "routes = [\"10.8.0.0/16\"]\n[[sites]]\nid = \"branch-02\"\n\
             prefixes = [\"10.2.0.0/16\"]\n[pacing]\ndefault_rate_kbps = 5000\n",
        );
        let plan = ReloadPlan::new(&running, &new);
        let RoleConfig::Exit(exit) = &new.role else {
            panic!("an exit")
        };
        assert_eq!(plan.sites.as_ref(), Some(&exit.sites));
        let net = |s: &str| s.parse::<IpNet>().expect("prefix");
        assert_eq!(plan.routes_added, [net("10.2.0.0/16"), net("10.8.0.0/16")]);
        assert_eq!(plan.routes_removed, [net("10.9.0.0/16")]);
        assert_eq!(plan.default_rate_kbps, Some(5000));
        assert!(
            plan.fixed.is_empty() && plan.at_restart.is_empty(),
            "{plan:?}"
        );
        assert_eq!(plan.running_after(&running, &new), new);
        // And back: the site's routes go, its lanes are closed by the data path.
        let back = ReloadPlan::new(&new, &running);
        assert_eq!(
            back.routes_removed,
            [net("10.2.0.0/16"), net("10.8.0.0/16")]
        );
        assert_eq!(back.default_rate_kbps, Some(0));
    }
}
