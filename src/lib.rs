//! braid: a multipath tunnelling gateway. See README.md and docs/architecture.md.
//!
//! `core` is pure (no I/O, no clock); everything else is the I/O shell around it.
#![deny(unsafe_code)]

pub mod app;
pub mod cert;
pub mod cli;
pub mod clock;
pub mod config;
pub mod control;
pub mod controller;
pub mod core;
#[cfg(test)]
mod core_purity;
/// `braid demo`, and the namespace testbed that it and the integration tests drive:
/// public for those tests, not a library API.
#[doc(hidden)]
pub mod demo;
pub mod dispatch;
pub mod driver;
pub mod lane;
pub mod loadgen;
pub mod logging;
pub mod notify;
pub mod reload;
pub mod sys;
pub mod tun;
pub mod tun_writer;
