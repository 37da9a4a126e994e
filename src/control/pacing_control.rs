//! The controller's side of per-application pacing: tables received through the
//! admin API, checked, persisted to `pacing.state_file` and handed to the data path.
//!
//! A table takes effect in this order: validated (400 otherwise), version checked
//! against the current one (409), written to the state file (temporary file, fsync,
//! rename, fsync of the directory), applied by the driver, and only then answered
//! 200. A failure at any step leaves the previous table in force, in memory and on
//! disk.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::control::command::DriverCommand;
use anyhow::Context;
use tokio::sync::{mpsc, oneshot};

use crate::control::app_stats::SiteReport;
use crate::core::engine::SiteIdx;
use crate::core::pacing_table::PacingTable;

/// The tables of every site as the state file holds them: site id -> table.
pub type Tables = BTreeMap<String, PacingTable>;

/// Reads the state file; a missing file means no table yet. Tables of sites this
/// gateway does not serve are ignored with a warning.
pub fn load_state(path: &Path, sites: &[String]) -> anyhow::Result<Tables> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Tables::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let raw: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a pacing state file", path.display()))?;
    let mut tables = Tables::new();
    for (site, value) in raw {
        if !sites.contains(&site) {
            tracing::warn!(site, file = %path.display(), "pacing table of a site this gateway does not serve; ignored");
            continue;
        }
        let json = serde_json::to_vec(&value)?;
        let table = PacingTable::parse(&json)
            .map_err(|e| anyhow::anyhow!("{}: site {site}: {e}", path.display()))?;
        tables.insert(site, table);
    }
    Ok(tables)
}

/// Reads the state file at start. One that cannot be read or is not a state file
/// must not keep the gateway from carrying traffic: it starts without tables (the
/// controller's next PUT brings them back), says so, and renames the file to
/// `NAME.corrupt`, where it stays for a look and the next table cannot overwrite it.
/// The flag says whether it had to (`braid_pacing_state_set_aside_total`).
pub fn load_state_or_set_aside(path: &Path, sites: &[String]) -> (Tables, bool) {
    let error = match load_state(path, sites) {
        Ok(tables) => return (tables, false),
        Err(e) => e,
    };
    let mut aside = path.as_os_str().to_os_string();
    aside.push(".corrupt");
    let aside = PathBuf::from(aside);
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::error!(
            "pacing.state_file: {error:#}; starting without pacing tables, the file is kept as {}",
            aside.display()
        ),
        Err(e) => tracing::error!(
            "pacing.state_file: {error:#}; starting without pacing tables (it cannot be set aside either: {e})"
        ),
    }
    (Tables::new(), true)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over
/// `path` and syncs the directory (created if missing): a crash at any moment leaves
/// the old file or the new one, whole.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        // A full disk keeps nothing half-written: the next attempt needs the room.
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("writing {}", path.display()))
    })
}

/// Why a table was not taken.
#[derive(Debug)]
pub enum PutError {
    /// The site is not served here (404).
    UnknownSite,
    /// The table is older than the current one (409).
    Stale { current: u64 },
    /// The table replaces a version that is no longer in force (409): another
    /// controller's table came first.
    NotReplacing { current: u64, replaces: u64 },
    /// Persisting or applying failed (500); the previous table stays.
    Failed(String),
}

/// The controller's side: current tables, persistence, and the way to the driver.
pub struct PacingControl {
    /// Site ids by `SiteIdx`, each with whether it is served (a reload may remove
    /// sites; their indexes stay, as in the engine).
    sites: Mutex<Vec<(String, bool)>>,
    tables: tokio::sync::Mutex<Tables>,
    /// Where tables are persisted; a reload may move it.
    state_file: Mutex<Option<PathBuf>>,
    commands: mpsc::Sender<DriverCommand>,
    report: Arc<Mutex<Vec<SiteReport>>>,
}

impl PacingControl {
    pub fn new(
        sites: Vec<String>,
        tables: Tables,
        state_file: Option<PathBuf>,
        commands: mpsc::Sender<DriverCommand>,
        report: Arc<Mutex<Vec<SiteReport>>>,
    ) -> PacingControl {
        PacingControl {
            sites: Mutex::new(sites.into_iter().map(|id| (id, true)).collect()),
            tables: tokio::sync::Mutex::new(tables),
            state_file: Mutex::new(state_file),
            commands,
            report,
        }
    }

    /// The ids of the sites served.
    pub fn sites(&self) -> Vec<String> {
        self.lock_sites()
            .iter()
            .filter(|(_, served)| *served)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Serves exactly `ids` from now on, indexed as the engine's
    /// [`DataPath::handle_sites`](crate::core::engine::DataPath::handle_sites) does.
    pub fn serve_sites(&self, ids: &[String]) {
        let mut sites = self.lock_sites();
        for (id, served) in sites.iter_mut() {
            *served = ids.contains(id);
        }
        for id in ids {
            if !sites.iter().any(|(known, _)| known == id) {
                sites.push((id.clone(), true));
            }
        }
    }

    fn lock_sites(&self) -> std::sync::MutexGuard<'_, Vec<(String, bool)>> {
        self.sites.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn site_index(&self, site: &str) -> Option<SiteIdx> {
        self.lock_sites()
            .iter()
            .position(|(id, served)| id == site && *served)
            .map(|i| SiteIdx(i as u32))
    }

    /// The site's current table (version 0 and no applications before the first).
    pub async fn get(&self, site: &str) -> Option<PacingTable> {
        self.site_index(site)?;
        Some(
            self.tables
                .lock()
                .await
                .get(site)
                .cloned()
                .unwrap_or_default(),
        )
    }

    /// Takes a validated table: version check, persistence, then the driver.
    pub async fn put(&self, site: &str, table: PacingTable) -> Result<(), PutError> {
        let idx = self.site_index(site).ok_or(PutError::UnknownSite)?;
        // Held to the end: tables of one gateway are taken one at a time, so the
        // version check, the file and the driver always agree.
        let mut tables = self.tables.lock().await;
        let current = tables.get(site).map_or(0, |t| t.version);
        if table.version < current {
            return Err(PutError::Stale { current });
        }
        if let Some(replaces) = table.replaces
            && replaces != current
        {
            return Err(PutError::NotReplacing { current, replaces });
        }
        let previous = tables.insert(site.to_string(), table.clone());
        // A table that changes only its version and writer (a controller renewing
        // it) leaves the data path as it is: flows keep their pacers and deadlines.
        let same_apps = previous
            .as_ref()
            .is_some_and(|p| p.same_applications(&table));
        let mut persisted = false;
        let outcome = async {
            self.persist(&tables).await?;
            persisted = true;
            if same_apps {
                return Ok(());
            }
            let (done, applied) = oneshot::channel();
            let command = DriverCommand::ApplyPacing {
                site: idx,
                table,
                done,
            };
            if self.commands.send(command).await.is_err() || applied.await.is_err() {
                return Err(PutError::Failed("the data path is stopping".into()));
            }
            Ok(())
        }
        .await;
        if outcome.is_err() {
            // The previous table stays in force: in memory, and on disk if the new
            // one was already written there.
            match previous {
                Some(old) => tables.insert(site.to_string(), old),
                None => tables.remove(site),
            };
            if persisted && let Err(e) = self.persist(&tables).await {
                tracing::error!(error = ?e, "restoring the pacing state file");
            }
        }
        outcome
    }

    /// Persists the tables to `path` from now on (a reload changed
    /// `pacing.state_file`), once they are written there; if they cannot be, the
    /// previous file stays in use.
    pub async fn move_state_file(&self, path: Option<PathBuf>) -> Result<(), PutError> {
        let tables = self.tables.lock().await;
        write_tables(path.clone(), &tables).await?;
        *self.state_file.lock().unwrap_or_else(|e| e.into_inner()) = path;
        Ok(())
    }

    /// Writes every site's table to the state file, if there is one.
    async fn persist(&self, tables: &Tables) -> Result<(), PutError> {
        let state_file = self
            .state_file
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        write_tables(state_file, tables).await
    }

    /// The last per-application report of a site.
    pub fn report(&self, site: &str) -> Option<SiteReport> {
        let idx = self.site_index(site)?;
        let report = self.report.lock().unwrap_or_else(|e| e.into_inner());
        report.get(idx.0 as usize).cloned()
    }
}

/// Writes every site's table to `path`, if there is one.
async fn write_tables(path: Option<PathBuf>, tables: &Tables) -> Result<(), PutError> {
    let Some(path) = path else {
        return Ok(());
    };
    let json = serde_json::to_vec_pretty(tables).map_err(|e| PutError::Failed(e.to_string()))?;
    tokio::task::spawn_blocking(move || write_atomically(&path, &json))
        .await
        .map_err(|e| PutError::Failed(e.to_string()))?
        .map_err(|e| PutError::Failed(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn table(version: u64) -> PacingTable {
        let rate = version * 10;
        let json = format!(
            r#"{{"version": {version}, "apps": [{{"name": "a", "rate_up_kbps": {rate}}}]}}"#
        );
        PacingTable::parse(json.as_bytes()).expect("valid")
    }

    #[test]
    fn the_state_file_round_trips_and_is_replaced_whole() {
        let dir = temp_dir("state");
        let path = dir.join("state").join("pacing.json"); // the directory is created
        let sites = vec!["site1".to_string()];
        assert!(
            load_state(&path, &sites)
                .expect("missing is empty")
                .is_empty()
        );
        let mut tables = Tables::new();
        tables.insert("site1".into(), table(4));
        tables.insert("gone".into(), table(4));
        let json = serde_json::to_vec_pretty(&tables).expect("serialise");
        write_atomically(&path, &json).expect("save");
        let loaded = load_state(&path, &sites).expect("load");
        assert_eq!(loaded.get("site1"), Some(&table(4)));
        assert!(!loaded.contains_key("gone"), "sites not served are ignored");
        assert!(!dir.join("state").join("pacing.json.tmp").exists());
        std::fs::write(&path, b"{\"site1\": {\"version\": \"x\"}}").expect("write");
        let e = load_state(&path, &sites).expect_err("corrupt");
        assert!(
            format!("{e:#}").contains("site site1: version: invalid type"),
            "{e:#}"
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_corrupt_state_file_is_set_aside_and_the_gateway_starts_without_tables() {
        let dir = temp_dir("corrupt");
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("pacing.json");
        let sites = vec!["site1".to_string()];
        let mut tables = Tables::new();
        tables.insert("site1".into(), table(4));
        write_atomically(&path, &serde_json::to_vec(&tables).expect("json")).expect("save");
        assert_eq!(
            load_state_or_set_aside(&path, &sites),
            (tables, false),
            "a good file loads"
        );
        for garbage in [
            &b"\x00\xffnot json"[..],
            b"{\"site1\": {\"version\": -1}}",
            b"",
        ] {
            std::fs::write(&path, garbage).expect("write");
            let (tables, set_aside) = load_state_or_set_aside(&path, &sites);
            assert!(tables.is_empty() && set_aside);
            assert!(!path.exists(), "set aside");
            let aside = dir.join("pacing.json.corrupt");
            assert_eq!(std::fs::read(&aside).expect("kept"), garbage);
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[tokio::test]
    async fn a_state_file_that_cannot_be_written_leaves_the_previous_one_in_use() {
        let dir = temp_dir("move");
        let old = dir.join("old.json");
        let (commands, mut driver) = mpsc::channel(1);
        let mut tables = Tables::new();
        tables.insert("site1".into(), table(3));
        let control = PacingControl::new(
            vec!["site1".into()],
            tables,
            Some(old.clone()),
            commands,
            Arc::default(),
        );
        // Under a regular file no directory can be made.
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("file"), b"").expect("file");
        let unwritable = dir.join("file").join("new.json");
        assert!(
            control
                .move_state_file(Some(unwritable.clone()))
                .await
                .is_err()
        );
        tokio::spawn(async move {
            if let Some(DriverCommand::ApplyPacing { done, .. }) = driver.recv().await {
                let _ = done.send(());
            }
        });
        control.put("site1", table(4)).await.expect("taken");
        let kept = load_state(&old, &["site1".to_string()]).expect("the previous file");
        assert_eq!(kept.get("site1"), Some(&table(4)));
        let new = dir.join("new.json");
        control
            .move_state_file(Some(new.clone()))
            .await
            .expect("writable");
        let moved = load_state(&new, &["site1".to_string()]).expect("the new file");
        assert_eq!(moved.get("site1"), Some(&table(4)), "written at once");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[tokio::test]
    async fn a_renewed_table_is_kept_without_disturbing_the_data_path() {
        let (commands, mut driver) = mpsc::channel(1);
        let mut tables = Tables::new();
        tables.insert("site1".into(), table(3));
        let control =
            PacingControl::new(vec!["site1".into()], tables, None, commands, Arc::default());
        let mut renewed = table(3);
        renewed.version = 4;
        renewed.replaces = Some(3);
        renewed.controller = Some("ctl-b".into());
        control.put("site1", renewed).await.expect("taken");
        assert!(driver.try_recv().is_err(), "nothing for the data path");
        let now = control.get("site1").await.expect("site1");
        assert_eq!((now.version, now.controller.as_deref()), (4, Some("ctl-b")));
        // A change of the applications goes to the data path as ever.
        let applier = tokio::spawn(async move {
            match driver.recv().await {
                Some(DriverCommand::ApplyPacing { done, .. }) => done.send(()).is_ok(),
                _ => false,
            }
        });
        control.put("site1", table(5)).await.expect("taken");
        assert!(applier.await.expect("applier"), "applied");
    }

    #[tokio::test]
    async fn a_table_the_data_path_did_not_take_leaves_the_previous_one_everywhere() {
        let dir = temp_dir("put");
        let path = dir.join("pacing.json");
        let sites = vec!["site1".to_string()];
        let (commands, mut driver) = mpsc::channel(1);
        let control = PacingControl::new(
            sites.clone(),
            Tables::new(),
            Some(path.clone()),
            commands,
            Arc::default(),
        );
        // A data path that applies one table, then stops.
        let applier = tokio::spawn(async move {
            if let Some(DriverCommand::ApplyPacing { done, .. }) = driver.recv().await {
                let _ = done.send(());
            }
        });
        control.put("site1", table(3)).await.expect("taken");
        applier.await.expect("applier");
        assert!(matches!(
            control.put("site1", table(2)).await,
            Err(PutError::Stale { current: 3 })
        ));
        assert!(matches!(
            control.put("site9", table(9)).await,
            Err(PutError::UnknownSite)
        ));
        // A table that replaces a version no longer in force (another controller's
        // came first) is refused, and the check comes before the data path.
        let mut late = table(5);
        late.replaces = Some(2);
        assert!(matches!(
            control.put("site1", late).await,
            Err(PutError::NotReplacing {
                current: 3,
                replaces: 2
            })
        ));
        // The data path is gone: version 4 is refused, and version 3 stays in memory
        // and in the state file (which had already been written with version 4).
        assert!(matches!(
            control.put("site1", table(4)).await,
            Err(PutError::Failed(_))
        ));
        assert_eq!(control.get("site1").await.map(|t| t.version), Some(3));
        let on_disk = load_state(&path, &sites).expect("load");
        assert_eq!(on_disk.get("site1").map(|t| t.version), Some(3));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
