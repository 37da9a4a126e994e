//! What a reload (SIGHUP, `systemctl reload`) does with a new, valid configuration:
//! which changes apply at once, which a running gateway cannot take (named and kept),
//! and which this build applies only at the next restart (named too).

use crate::config::{Config, RoleConfig, SchedulerConfig, UplinkConfig};

/// The outcome of comparing the running configuration with a new one.
#[derive(Debug, Default, PartialEq)]
pub struct ReloadPlan {
    /// The scheduler settings, when they changed: applied at once.
    pub scheduler: Option<SchedulerConfig>,
    /// The entry's uplinks, when they changed: lanes of removed or changed uplinks
    /// close, new ones start.
    pub uplinks: Option<Vec<UplinkConfig>>,
    /// Keys that cannot change while the gateway runs; their running values stay.
    pub fixed: Vec<&'static str>,
    /// Keys that changed and take effect at the next restart in this build.
    pub at_restart: Vec<&'static str>,
}

impl ReloadPlan {
    /// Compares `running` with `new`.
    pub fn new(running: &Config, new: &Config) -> ReloadPlan {
        let mut fixed = Vec::new();
        let mut at_restart = Vec::new();
        let mut uplinks = None;
        mark(&mut fixed, new.tun.name != running.tun.name, "tun.name");
        mark(
            &mut fixed,
            new.admin.listen != running.admin.listen,
            "admin.listen",
        );
        match (&running.role, &new.role) {
            (RoleConfig::Entry(a), RoleConfig::Entry(b)) => {
                mark(&mut fixed, a.site != b.site, "site");
                if a.uplinks != b.uplinks {
                    uplinks = Some(b.uplinks.clone());
                }
                let exit_changed = a.exit_address != b.exit_address || a.exit_name != b.exit_name;
                mark(&mut at_restart, exit_changed, "exit");
            }
            (RoleConfig::Exit(a), RoleConfig::Exit(b)) => {
                mark(&mut fixed, a.listen != b.listen, "listen");
                mark(&mut at_restart, a.sites != b.sites, "sites");
            }
            _ => fixed.push("role"),
        }
        let tun_changed = new.tun.addresses != running.tun.addresses
            || new.tun.routes != running.tun.routes
            || new.tun.mtu != running.tun.mtu;
        mark(&mut at_restart, tun_changed, "tun");
        mark(&mut at_restart, new.tls != running.tls, "tls");
        mark(&mut at_restart, new.pacing != running.pacing, "pacing");
        mark(&mut at_restart, new.abe != running.abe, "abe");
        let token_changed = new.admin.token_file != running.admin.token_file;
        mark(&mut at_restart, token_changed, "admin.token_file");
        ReloadPlan {
            scheduler: (new.scheduler != running.scheduler).then(|| new.scheduler.clone()),
            uplinks,
            fixed,
            at_restart,
        }
    }

    /// The configuration that runs after the reload: `new`, with the keys that cannot
    /// change and those this build applies only at a restart kept as they run.
    pub fn running_after(&self, running: &Config, new: &Config) -> Config {
        let mut after = Config {
            scheduler: new.scheduler.clone(),
            ..running.clone()
        };
        if let (Some(uplinks), RoleConfig::Entry(entry)) = (&self.uplinks, &mut after.role) {
            entry.uplinks = uplinks.clone();
        }
        after
    }
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
    fn what_cannot_change_is_named_and_kept() {
        let dir = Dir::new();
        let running = dir.exit("braid0", "");
        let new = dir.exit(
            "braid9",
            "[[sites]]\nid = \"branch-02\"\nprefixes = [\"10.2.0.0/16\"]\n",
        );
        let plan = ReloadPlan::new(&running, &new);
        assert_eq!(plan.fixed, ["tun.name"]);
        assert_eq!(plan.at_restart, ["sites"]);
        assert_eq!(plan.scheduler, None);
        assert_eq!(plan.running_after(&running, &new), running);
    }
}
