//! What the rest of the gateway (the admin API, pacing control, reloads) asks of the
//! data path's driver: its own module, so that the control plane does not import the
//! driver.

use tokio::sync::{mpsc, oneshot};

use crate::config::{EntryConfig, SchedulerConfig};
use crate::core::background::BackgroundSettings;
use crate::core::engine::{SiteIdx, SiteSpec};
use crate::core::pacing_table::PacingTable;
use crate::core::tiers::TierSettings;

/// What the rest of the gateway asks of the data path.
pub enum DriverCommand {
    /// Replace a site's application table; `done` fires once packets are paced by it.
    ApplyPacing {
        site: SiteIdx,
        table: PacingTable,
        done: oneshot::Sender<()>,
    },
    /// Schedule with these settings from now on (a reload changed them).
    Reschedule(SchedulerConfig),
    /// Pace what no application matches at this rate (kbit/s) from now on.
    DefaultRate(u64),
    /// Search for background applications' spare capacity so from now on.
    Background(BackgroundSettings),
    /// Serve exactly these sites from now on (an exit's reload changed them).
    ServeSites(Vec<SiteSpec>),
    /// Forward between an exit's sites from now on, or refuse (a reload changed it).
    SiteToSite(bool),
    /// The entry's uplinks (their tiers and caps; none at an exit) and the tiers'
    /// timing, from now on (a reload changed them).
    Tiers {
        entry: Option<Box<EntryConfig>>,
        settings: TierSettings,
    },
    /// Publish the status now (`GET /v1/status`); each data-path thread answers on
    /// the channel once it has.
    PublishStatus(mpsc::Sender<()>),
}
