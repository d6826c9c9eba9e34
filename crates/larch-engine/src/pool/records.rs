//! The records the pool keeps in its state directory for the engine, through the sinks
//! the engine calls (`Engine::set_committed_txg_sink`, `set_distrust_sink`,
//! `set_replayed_sink`, `set_volume_failure_sink`): the committed TXG when the log device
//! cannot hold it, the cache devices to format rather than rebuild, and the volumes whose
//! backing store failed with the blocks they lost. Each is read at open and written
//! through [`write_state_file`] (atomic and durable) before the engine goes on.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::write_state_file;
use crate::volumes::VolumeFailure;

/// The file in a state directory that records the last committed TXG when the log
/// device could not (see `Engine::set_committed_txg_sink`).
pub const COMMITTED_TXG_FILE: &str = "committed-txg";

pub(super) fn read_committed_txg(state_dir: &Path) -> io::Result<u64> {
    match fs::read_to_string(state_dir.join(COMMITTED_TXG_FILE)) {
        Ok(text) => text
            .trim()
            .parse()
            .ok()
            .filter(|&txg| txg <= larch_format::zil::ZIL_COUNTER_MAX)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{COMMITTED_TXG_FILE}: {text:?} is not a TXG number"),
                )
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e),
    }
}

/// Writes the committed TXG durably ([`write_state_file`]).
pub(super) fn write_committed_txg(state_dir: &Path, txg: u64) -> io::Result<()> {
    write_state_file(state_dir, COMMITTED_TXG_FILE, format!("{txg}\n").as_bytes())
}

/// The file in a state directory that records the volumes whose backing store failed a
/// TXG, with the blocks whose acknowledged writes it lost: after a restart those volumes
/// still refuse writes and those blocks still read as errors, until the operator clears
/// the record (`larch volume clear`). Absent when no volume failed.
pub const FAILED_VOLUMES_FILE: &str = "failed-volumes.json";

/// One volume of [`FAILED_VOLUMES_FILE`]: its lost blocks as `[first, count]` runs.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailedVolume {
    guid: u64,
    why: String,
    lost: Vec<(u64, u64)>,
}

impl FailedVolume {
    fn of(failure: &VolumeFailure) -> FailedVolume {
        let mut lost: Vec<(u64, u64)> = Vec::new();
        for &block in &failure.lost {
            match lost.last_mut() {
                Some((first, count)) if first.checked_add(*count) == Some(block) => *count += 1,
                _ => lost.push((block, 1)),
            }
        }
        FailedVolume {
            guid: failure.guid,
            why: failure.why.clone(),
            lost,
        }
    }

    /// The record as the engine takes it; `Err` for runs that overflow or that hold more
    /// blocks than a volume can have.
    fn failure(&self) -> Result<VolumeFailure, String> {
        let mut lost = Vec::new();
        for &(first, count) in &self.lost {
            // Inclusive: a run may end at block 2^64 - 1.
            let last = first
                .checked_add(count.saturating_sub(1))
                .filter(|_| count > 0)
                .filter(|_| (lost.len() as u64).saturating_add(count) <= MAX_RECORDED_LOST)
                .ok_or_else(|| {
                    format!("volume {:#x}: run {first}+{count} is impossible", self.guid)
                })?;
            lost.extend(first..=last);
        }
        Ok(VolumeFailure {
            guid: self.guid,
            why: self.why.clone(),
            lost,
        })
    }
}

/// More lost blocks than any failure can record (each is a dirty block of a failed TXG,
/// and the dirty data is bounded far below this): a record above it is corrupt.
const MAX_RECORDED_LOST: u64 = 1 << 32;

/// The failures recorded in `state_dir` (none when the file is absent).
pub fn read_failed_volumes(state_dir: &Path) -> io::Result<Vec<VolumeFailure>> {
    let path = state_dir.join(FAILED_VOLUMES_FILE);
    let invalid = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: {why} (it records the volumes whose acknowledged writes were lost; \
                 deleting it accepts every loss it records)",
                path.display()
            ),
        )
    };
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let records: Vec<FailedVolume> =
        serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    records
        .iter()
        .map(FailedVolume::failure)
        .collect::<Result<_, _>>()
        .map_err(invalid)
}

/// Records `failures` in `state_dir` (removes the file when there are none).
fn write_failed_volumes(state_dir: &Path, failures: &[VolumeFailure]) -> io::Result<()> {
    if failures.is_empty() {
        return match fs::remove_file(state_dir.join(FAILED_VOLUMES_FILE)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => fs::File::open(state_dir).and_then(|dir| dir.sync_all()),
        };
    }
    let records: Vec<FailedVolume> = failures.iter().map(FailedVolume::of).collect();
    let text = serde_json::to_string_pretty(&records).map_err(io::Error::other)?;
    write_state_file(state_dir, FAILED_VOLUMES_FILE, text.as_bytes())
}

/// Records (or updates) one volume's failure in `state_dir`.
pub(super) fn record_failed_volume(state_dir: &Path, failure: &VolumeFailure) -> io::Result<()> {
    let mut failures = read_failed_volumes(state_dir)?;
    failures.retain(|f| f.guid != failure.guid);
    failures.push(failure.clone());
    write_failed_volumes(state_dir, &failures)
}

/// Drops the recorded failure of the volume `guid`; returns it, if there was one. The
/// caller holds the pool's lock (no daemon serves it).
pub fn clear_failed_volume(state_dir: &Path, guid: u64) -> io::Result<Option<VolumeFailure>> {
    let mut failures = read_failed_volumes(state_dir)?;
    let Some(at) = failures.iter().position(|f| f.guid == guid) else {
        return Ok(None);
    };
    let cleared = failures.remove(at);
    write_failed_volumes(state_dir, &failures)?;
    Ok(Some(cleared))
}

/// The file in a state directory that lists the cache devices (by guid) whose logs must
/// not be rebuilt: the engine could not empty them when their tombstones could not be
/// written, a start could not open them, or an intent-log replay applied records. The
/// pool formats each the next time it adds it (at open, or when the device is back while
/// the pool runs) and then takes it off the list.
pub const DISTRUSTED_FILE: &str = "l2-format";

pub(super) fn read_distrusted(state_dir: &Path) -> io::Result<Vec<u64>> {
    match fs::read_to_string(state_dir.join(DISTRUSTED_FILE)) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{DISTRUSTED_FILE}: {e}"),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

pub(super) fn write_distrusted(state_dir: &Path, guids: &[u64]) -> io::Result<()> {
    let text = serde_json::to_string(guids).map_err(io::Error::other)?;
    write_state_file(state_dir, DISTRUSTED_FILE, text.as_bytes())
}

/// Held across every read-modify-write of [`DISTRUSTED_FILE`] in this process (the pool
/// lock keeps other processes out): the engine's sinks add guids from its threads while
/// the pool takes formatted devices off the record, at open and when a device comes back
/// at runtime, and neither may write back a list that lost the other's change (a guid
/// lost from the record lets a log that missed writes be rebuilt).
static DISTRUSTED_LOCK: Mutex<()> = Mutex::new(());

/// Changes the record of [`DISTRUSTED_FILE`]: `change` edits the guids read, and the
/// record is written (durably) if they changed.
pub(super) fn update_distrusted(
    state_dir: &Path,
    change: impl FnOnce(&mut Vec<u64>),
) -> io::Result<()> {
    let _held = DISTRUSTED_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut guids = read_distrusted(state_dir)?;
    let before = guids.clone();
    change(&mut guids);
    if guids == before {
        return Ok(());
    }
    write_distrusted(state_dir, &guids)
}

/// Adds `guids` to a list of guids, each once.
pub(super) fn add_guids(list: &mut Vec<u64>, guids: &[u64]) {
    for &guid in guids {
        if !list.contains(&guid) {
            list.push(guid);
        }
    }
}

/// What adding the cache devices of `pool.json` changes in the record of devices to
/// format ([`DISTRUSTED_FILE`]).
#[derive(Default)]
pub(super) struct RecordChanges {
    /// Devices on the record that were formatted: off it.
    formatted: Vec<u64>,
    /// Devices that could not be added: the pool goes on without them, and its writes
    /// from now on tombstone none of their copies, so their logs must not be rebuilt
    /// when they come back.
    missed: Vec<u64>,
}

impl RecordChanges {
    /// Notes whether adding device `guid` (on the record if `distrust`) succeeded.
    pub(super) fn note(&mut self, guid: u64, distrust: bool, added: bool) {
        match (added, distrust) {
            (true, true) => self.formatted.push(guid),
            (false, false) => self.missed.push(guid),
            _ => {}
        }
    }

    /// Writes the changes to the record, if any.
    pub(super) fn record(&self, state_dir: &Path) -> io::Result<()> {
        if self.formatted.is_empty() && self.missed.is_empty() {
            return Ok(());
        }
        update_distrusted(state_dir, |guids| {
            guids.retain(|g| !self.formatted.contains(g));
            add_guids(guids, &self.missed);
        })
    }
}

/// The file in a state directory that records, per cache device guid, the header
/// sequence the pool has seen that device reach: exactly at a clean close, and at least
/// every minute while the daemon runs ([`crate::Pool::record_l2_sequences`]). A device
/// whose newest header is older than its record is an older image of itself (restored
/// from a snapshot or a copy): its log lacks the tombstones of later overwrites, so it is
/// formatted, never rebuilt. Each value is at most what the device really reached, so the
/// record never condemns a current device.
pub const L2_SEQUENCES_FILE: &str = "l2-sequences.json";

/// The sequences recorded in `state_dir`, by device guid (none when the file is absent).
pub(super) fn read_l2_sequences(state_dir: &Path) -> io::Result<BTreeMap<u64, u64>> {
    match fs::read_to_string(state_dir.join(L2_SEQUENCES_FILE)) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{L2_SEQUENCES_FILE}: {e}"),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(e),
    }
}

/// Held across every read-modify-write of [`L2_SEQUENCES_FILE`] in this process. The
/// periodic record takes the devices' sequences under it too: a device formatted at
/// runtime has its record reset under it, after the format, so a record of the device
/// before its format cannot be written over the reset.
static L2_SEQUENCES_LOCK: Mutex<()> = Mutex::new(());

/// Changes the record of [`L2_SEQUENCES_FILE`]: `change` edits the sequences read (it runs
/// under [`L2_SEQUENCES_LOCK`]), and the record is written (durably) if they changed.
pub(super) fn update_l2_sequences(
    state_dir: &Path,
    change: impl FnOnce(&mut BTreeMap<u64, u64>),
) -> io::Result<()> {
    let _held = L2_SEQUENCES_LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut sequences = read_l2_sequences(state_dir)?;
    let before = sequences.clone();
    change(&mut sequences);
    if sequences == before {
        return Ok(());
    }
    let text = serde_json::to_string_pretty(&sequences).map_err(io::Error::other)?;
    write_state_file(state_dir, L2_SEQUENCES_FILE, text.as_bytes())
}

/// Sets the record of each device of `reached` (guid, sequence reached; `None`: nothing
/// known of it, its record is dropped).
pub(super) fn set_sequences(sequences: &mut BTreeMap<u64, u64>, reached: &[(u64, Option<u64>)]) {
    for &(guid, sequence) in reached {
        match sequence {
            Some(sequence) => sequences.insert(guid, sequence),
            None => sequences.remove(&guid),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record of failed volumes reads back as written (lost blocks kept as runs), is
    /// removed when the last volume is cleared, and a damaged one is an error naming the
    /// file, never a panic or a silently empty record.
    #[test]
    fn failed_volumes_are_recorded_read_back_and_cleared() {
        let dir = std::env::temp_dir().join(format!("larch-failed-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert!(read_failed_volumes(&dir).unwrap().is_empty());
        let a = VolumeFailure {
            guid: 7,
            why: "backing store failed".into(),
            lost: vec![0, 1, 2, 9, u64::MAX - 1, u64::MAX],
        };
        let b = VolumeFailure {
            guid: 8,
            why: "flush failed".into(),
            lost: vec![],
        };
        record_failed_volume(&dir, &a).unwrap();
        record_failed_volume(&dir, &b).unwrap();
        let text = fs::read_to_string(dir.join(FAILED_VOLUMES_FILE)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            json[0]["lost"],
            serde_json::json!([[0, 3], [9, 1], [u64::MAX - 1, 2]]),
            "kept as runs: {text}"
        );
        assert_eq!(
            read_failed_volumes(&dir).unwrap(),
            vec![a.clone(), b.clone()]
        );
        // A later failure of the same volume replaces its record.
        let a2 = VolumeFailure {
            lost: vec![3],
            ..a.clone()
        };
        record_failed_volume(&dir, &a2).unwrap();
        assert_eq!(
            read_failed_volumes(&dir).unwrap(),
            vec![b.clone(), a2.clone()]
        );
        assert_eq!(clear_failed_volume(&dir, 99).unwrap(), None);
        assert_eq!(clear_failed_volume(&dir, 8).unwrap(), Some(b));
        assert_eq!(clear_failed_volume(&dir, 7).unwrap(), Some(a2));
        assert!(!dir.join(FAILED_VOLUMES_FILE).exists());
        for bad in [
            "not json",
            r#"[{"guid": 1, "why": "x", "lost": [[18446744073709551615, 2]]}]"#,
            r#"[{"guid": 1, "why": "x", "lost": [[0, 18446744073709551615]]}]"#,
            r#"[{"guid": 1, "why": "x", "lost": [[5, 0]]}]"#,
            r#"[{"guid": 1, "why": "x", "lost": [], "extra": 1}]"#,
        ] {
            fs::write(dir.join(FAILED_VOLUMES_FILE), bad).unwrap();
            let err = read_failed_volumes(&dir).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{bad}");
            assert!(err.to_string().contains(FAILED_VOLUMES_FILE), "{err}");
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
