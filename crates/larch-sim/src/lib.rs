//! The simulator: streaming trace readers ([`trace`]), replay of traces through any
//! [`larch_policy::Policy`] ([`replay`]), synthetic workloads ([`workload`]), models of
//! storage devices in virtual time ([`device`]), and the discrete-event simulation of a
//! whole pool ([`sim`]: `larch sim run` and `larch size`).
//!
//! Everything runs the production policy code in virtual time: the policy never reads a
//! clock, so a replay or a simulation gives the same answer on every run.

pub mod device;
pub mod replay;
pub mod sim;
pub mod trace;
pub mod workload;

pub use replay::{ReplayConfig, ReplayCounts, Replayer, WriteMode};
pub use trace::{Extent, Format, Op, Record, TraceError, TraceReader};
pub use workload::{SplitMix64, Zipf};
