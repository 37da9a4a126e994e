//! The pure core of braid: packet parsing, scheduling and the data path state machine.
//!
//! Nothing in here performs I/O, reads a clock or the environment, spawns tasks or
//! threads, talks to quinn or depends on the iteration order of a randomly seeded
//! hash map; time comes in as [`time::Instant`] arguments. `src/core_purity.rs`
//! enforces the boundary on every file below this one.

pub mod allocation;
pub mod app_pacing;
pub mod aqm;
pub mod background;
pub mod classify;
pub mod cutoff;
pub mod data_cap;
pub mod deadline;
pub mod dsd;
pub mod duplicate_budget;
pub mod engine;
pub mod exit_choice;
pub mod field_error;
pub mod flow;
pub mod handshake_limit;
pub mod hash;
pub mod icmp;
pub mod lane;
pub mod lane_cc;
pub mod link_state;
pub mod offload;
pub mod pacer;
pub mod pacing_table;
pub mod packet;
pub mod redial;
pub mod reseq;
pub mod retry;
pub mod route;
pub mod sched;
pub mod seen;
pub mod shaper;
pub mod site;
pub mod stats;
pub mod tiers;
pub mod time;
pub mod wire;
