//! The control plane: the admin API and its client, pacing control, the status
//! document, applications' statistics, Prometheus metrics, and the commands they
//! send the data path.

pub mod admin;
pub mod admin_client;
pub mod app_stats;
pub mod caps;
pub mod command;
pub mod metrics;
pub mod pacing_control;
pub mod status;
