//! The daemon's HTTP API as both ends know it: the token header and the JSON answers of
//! the requests the CLI makes. The server ([`crate::http`]) builds these types and the
//! client ([`crate::client`]) parses them, so the two cannot drift apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The header that carries the token of `daemon.json` on management requests.
pub const TOKEN_HEADER: &str = "X-Larch-Token";

/// The answer to `GET /admin/ping`: who answers, so that the CLI can tell the daemon
/// `daemon.json` records from another process that took its address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// The daemon's process id.
    pub pid: u32,
    /// The name of the pool it serves.
    pub pool: String,
    /// The guid of the pool it serves.
    pub pool_guid: u64,
}

/// The answer to `GET /admin/tunables`: every tunable's value in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunablesAnswer {
    /// The daemon's process id.
    pub pid: u32,
    /// Tunable values by name.
    pub tunables: BTreeMap<String, u64>,
}

/// The answer to `GET /api/v1/events[?after=N]`: the pool's events, what `larch events`
/// prints (and follows, asking again after the newest it saw).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventsAnswer {
    /// Format of the answer.
    pub version: u32,
    /// The pool's name.
    pub pool: String,
    /// The number of the pool's newest event (0: none yet).
    pub newest: u64,
    /// The events kept whose number is above `after` (all of them without it), oldest
    /// first.
    pub events: Vec<larch_engine::Event>,
}

/// The answer to `GET /admin/volume/get`: a volume's properties as `larch get VOLUME`
/// shows them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumePropertiesAnswer {
    /// The daemon's process id.
    pub pid: u32,
    /// The properties asked for, in order.
    pub properties: Vec<larch_engine::manage::VolumeProperty>,
}
