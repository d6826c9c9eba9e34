//! The simulator's trace side: streaming trace readers ([`trace`]), replay of traces through
//! any [`larch_policy::Policy`] ([`replay`]), and synthetic workloads ([`workload`]).
//!
//! The replay runs the production policy code in virtual time: the policy never reads a
//! clock, so a replay gives the same answer on every run.

pub mod replay;
pub mod trace;
pub mod workload;

pub use replay::{ReplayConfig, ReplayCounts, Replayer, WriteMode};
pub use trace::{Extent, Format, Op, Record, TraceError, TraceReader};
pub use workload::{SplitMix64, Zipf};
