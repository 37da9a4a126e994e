//! The engine's tests, by part, all driving it through one harness ([`harness`]).

mod duplicate;
mod harness;
mod liveness;
mod queues;
mod quiet;
mod repair;
mod routing;
mod shaping;
mod steering;
mod tiers;
mod variation_report;
mod warm_up;
mod whole_path;
