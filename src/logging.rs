//! The daemon's log: to stderr (the journal under systemd), filtered by `BRAID_LOG`
//! if set, else by `log.filter`, which a reload may change.

use std::sync::OnceLock;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::config::DEFAULT_LOG_FILTER;

/// The environment variable whose filter wins over the configuration's at start.
const ENV_FILTER: &str = "BRAID_LOG";

static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Logs to stderr, filtered by `BRAID_LOG` or else at `info` until the configuration
/// is read ([`configure`]).
pub fn init() {
    let filter =
        EnvFilter::try_from_env(ENV_FILTER).unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    tracing_subscriber::registry().with(filter).with(fmt).init();
    let _ = FILTER.set(handle);
}

/// The configuration's filter, at start: unless `BRAID_LOG` set one.
pub fn configure(filter: &str) {
    if std::env::var_os(ENV_FILTER).is_none() {
        set_filter(filter);
    }
}

/// Filters by `filter` from now on (a reload changed `log.filter`; it was
/// validated with the configuration).
pub fn set_filter(filter: &str) {
    if let (Some(handle), Ok(filter)) = (FILTER.get(), EnvFilter::builder().parse(filter)) {
        let _ = handle.reload(filter);
    }
}
