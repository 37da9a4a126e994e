//! The entry's data caps in the shell: counts each capped uplink's bytes on the wire
//! from its lanes, once a second; keeps the counts in `caps.state_file` (at most
//! [`SAVE_EVERY`] seconds of them lost to a power failure); logs and exports
//! warnings, the cap reached and the period's reset; and demotes an uplink at its
//! cap by handing the engine the configured tiers with that uplink cold at the last
//! tier, or off (`core::data_cap` decides).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use crate::config::EntryConfig;
use crate::control::metrics::Metrics;
use crate::core::data_cap::{CapAction, CapEvent, CapLedger, CapUsage, DataCap};
use crate::core::engine::{DataPath, UplinkTier};
use crate::core::tiers::TierSettings;

/// The counts are written at least this often (seconds) while they change, and at
/// once when a cap is reached or a period resets.
pub const SAVE_EVERY: u64 = 10;

/// The state file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    uplinks: BTreeMap<String, CapUsage>,
}

/// One capped uplink as `GET /v1/status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CapStatus {
    pub uplink: String,
    pub used_bytes: u64,
    pub cap_bytes: u64,
    /// When the current period began (Unix seconds, UTC).
    pub period_start: u64,
    /// `within`, or at the cap: `cold` or `off` until the period resets.
    pub state: String,
}

pub struct CapKeeper {
    site: String,
    /// The uplinks' tiers as configured, and `[tiers]`.
    tiers: Vec<UplinkTier>,
    settings: TierSettings,
    ledger: CapLedger,
    state_file: Option<PathBuf>,
    /// Each lane's uplink and wire bytes at the last count, by lane id.
    seen: Vec<Option<(String, u64)>>,
    saved_at: u64,
    dirty: bool,
    metrics: Arc<Metrics>,
}

impl CapKeeper {
    /// The keeper of `entry`'s caps, carrying on from the counts in `state_file`
    /// (a file that cannot be read is set aside, and the counts start at zero).
    pub fn new(
        entry: &EntryConfig,
        settings: TierSettings,
        state_file: Option<PathBuf>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let saved = state_file
            .as_deref()
            .map(|path| match load(path) {
                Ok(saved) => saved,
                Err(e) => {
                    let aside = path.with_extension("corrupt");
                    let _ = std::fs::rename(path, &aside);
                    error!(
                        "caps.state_file: {e:#}; counting from zero, the file is kept as {}",
                        aside.display()
                    );
                    Saved::default()
                }
            })
            .unwrap_or_default();
        let keeper = CapKeeper {
            site: entry.site.clone(),
            tiers: entry.uplinks.iter().map(|u| u.tier()).collect(),
            settings,
            ledger: CapLedger::new(caps_of(entry), &saved.uplinks),
            state_file,
            seen: Vec::new(),
            saved_at: 0,
            dirty: false,
            metrics,
        };
        keeper.export();
        keeper
    }

    /// The uplinks and caps of a reloaded configuration, when they changed, and its
    /// `[tiers]`; the counts carry on.
    pub fn reconfigure(&mut self, entry: Option<&EntryConfig>, settings: TierSettings) {
        self.settings = settings;
        if let Some(entry) = entry {
            self.tiers = entry.uplinks.iter().map(|u| u.tier()).collect();
            self.ledger.set_caps(caps_of(entry));
            self.export();
        }
    }

    pub fn settings(&self) -> TierSettings {
        self.settings
    }

    /// The tiers as they apply now: an uplink at its cap demoted to cold standby at
    /// the last tier, or off.
    pub fn tiers(&self) -> Vec<UplinkTier> {
        self.tiers
            .iter()
            .map(|t| match self.ledger.capped(&t.name) {
                None => t.clone(),
                Some(CapAction::Cold) => UplinkTier {
                    priority: u32::MAX,
                    cold: true,
                    ..t.clone()
                },
                Some(CapAction::Off) => UplinkTier {
                    off: true,
                    ..t.clone()
                },
            })
            .collect()
    }

    /// Counts what each capped uplink's lanes carried since the last count, at `now`
    /// (Unix seconds); true when an uplink reached its cap or got it back.
    pub fn account(&mut self, engine: &DataPath, now: u64) -> bool {
        let mut carried: BTreeMap<&str, u64> = self
            .ledger
            .usage()
            .keys()
            .map(|u| (u.as_str(), 0))
            .collect();
        for id in engine.lane_ids() {
            let Some(lane) = engine.lane(id) else {
                continue;
            };
            let slot = id.0 as usize;
            if self.seen.len() <= slot {
                self.seen.resize(slot + 1, None);
            }
            let bytes = lane.counters.wire_bytes;
            // A lane new in its slot (or of another uplink) counts from zero.
            let before = match &self.seen[slot] {
                Some((uplink, b)) if uplink == lane.uplink && *b <= bytes => *b,
                _ => 0,
            };
            if let Some(sum) = carried.get_mut(lane.uplink) {
                *sum += bytes - before;
            }
            self.seen[slot] = Some((lane.uplink.to_string(), bytes));
        }
        let carried: Vec<(String, u64)> = carried
            .into_iter()
            .map(|(u, b)| (u.to_string(), b))
            .collect();
        let mut changed = false;
        let mut save_now = false;
        for (uplink, bytes) in carried {
            self.dirty |= bytes > 0;
            for event in self.ledger.account(&uplink, bytes, now) {
                changed |= !matches!(event, CapEvent::Warn { .. });
                save_now = true;
                self.tell(&event);
            }
        }
        self.export();
        if self.dirty && (save_now || now >= self.saved_at + SAVE_EVERY) {
            self.save(now);
        }
        changed
    }

    fn tell(&self, event: &CapEvent) {
        match event {
            CapEvent::Warn {
                uplink,
                fraction,
                used,
            } => {
                let percent = (fraction * 100.0).round() as u32;
                warn!(
                    uplink,
                    percent,
                    used_bytes = used,
                    "uplink at {percent} % of its data cap"
                );
                self.metrics.uplink_cap_warned(&self.site, uplink, percent);
            }
            CapEvent::Reached { uplink, used } => {
                let action = self.ledger.capped(uplink).map_or("", |a| match a {
                    CapAction::Cold => "cold standby",
                    CapAction::Off => "off",
                });
                warn!(
                    uplink,
                    used_bytes = used,
                    "uplink at its data cap: {action} until the period resets"
                );
            }
            CapEvent::Reset { uplink, was } => {
                info!(
                    uplink,
                    last_period_bytes = was,
                    "uplink's data cap period reset: counting from zero"
                );
            }
        }
    }

    fn export(&self) {
        for (uplink, usage) in self.ledger.usage() {
            let [cap, used, capped] = self.metrics.uplink_cap(&self.site, uplink);
            let bytes = self.ledger.cap(uplink).map_or(0, |c| c.bytes);
            cap.set(i64::try_from(bytes).unwrap_or(i64::MAX));
            used.set(i64::try_from(usage.used_bytes).unwrap_or(i64::MAX));
            capped.set(i64::from(self.ledger.capped(uplink).is_some()));
        }
    }

    /// Writes the counts, off the data path's thread (a disk's sync takes
    /// milliseconds).
    fn save(&mut self, now: u64) {
        self.saved_at = now;
        self.dirty = false;
        if let Some((path, bytes)) = self.to_save() {
            tokio::task::spawn_blocking(move || write(&path, &bytes));
        }
    }

    /// Writes the counts now, as the gateway stops.
    pub fn flush(&mut self) {
        if let Some((path, bytes)) = self.to_save() {
            write(&path, &bytes);
        }
    }

    fn to_save(&self) -> Option<(PathBuf, Vec<u8>)> {
        let path = self.state_file.clone()?;
        let saved = Saved {
            uplinks: self.ledger.usage().clone(),
        };
        Some((path, serde_json::to_vec_pretty(&saved).ok()?))
    }

    /// Every capped uplink's count, for the status.
    pub fn status(&self) -> Vec<CapStatus> {
        self.ledger
            .usage()
            .iter()
            .map(|(uplink, usage)| CapStatus {
                uplink: uplink.clone(),
                used_bytes: usage.used_bytes,
                cap_bytes: self.ledger.cap(uplink).map_or(0, |c| c.bytes),
                period_start: usage.period_start,
                state: match self.ledger.capped(uplink) {
                    None => "within",
                    Some(CapAction::Cold) => "cold",
                    Some(CapAction::Off) => "off",
                }
                .to_string(),
            })
            .collect()
    }
}

fn caps_of(entry: &EntryConfig) -> BTreeMap<String, DataCap> {
    entry
        .uplinks
        .iter()
        .filter_map(|u| Some((u.name.clone(), u.cap.clone()?)))
        .collect()
}

fn write(path: &std::path::Path, bytes: &[u8]) {
    if let Err(e) = crate::control::pacing_control::write_atomically(path, bytes) {
        warn!("caps.state_file: {e:#}");
    }
}

fn load(path: &std::path::Path) -> anyhow::Result<Saved> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .with_context(|| format!("{}: not a caps state file", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Saved::default()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}
