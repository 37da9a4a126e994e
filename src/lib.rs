//! braid: a multipath tunnelling gateway. See README.md and docs/architecture.md.
//!
//! `core` is pure (no I/O, no clock); everything else is the I/O shell around it.
#![deny(unsafe_code)]

pub mod admin;
pub mod admin_client;
pub mod app;
pub mod app_stats;
pub mod cert;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
#[cfg(test)]
mod core_purity;
pub mod demo;
pub mod dispatch;
pub mod driver;
pub mod lane;
pub mod logging;
pub mod metrics;
pub mod notify;
pub mod pacing_control;
pub mod reload;
pub mod status;
pub mod sys;
pub mod testbed;
pub mod tun;
pub mod tun_writer;
