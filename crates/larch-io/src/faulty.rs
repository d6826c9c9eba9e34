//! A fault-injecting device: a volatile write cache that a "power cut" can drop or tear,
//! and I/O errors on chosen ranges.

use std::ops::Range;
use std::sync::Mutex;

use crate::{BlockDevice, IoError, SECTOR_BYTES, check_range};

/// What a power cut does to the writes that were not yet flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unflushed write is lost.
    DropAll,
    /// The first `n` unflushed writes (in issue order) reach the media; the rest are lost.
    Prefix(usize),
    /// Each unflushed write independently reaches the media whole, is lost, or is torn
    /// (a random subset of its sectors lands), decided by a generator seeded with the
    /// value. Devices may reorder cached writes, so no ordering among them is kept.
    Random(u64),
}

/// Counters of a [`FaultyDevice`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultyStats {
    /// Successful reads.
    pub reads: u64,
    /// Successful writes.
    pub writes: u64,
    /// Successful flushes.
    pub flushes: u64,
    /// Crashes so far.
    pub crashes: u64,
}

#[derive(Debug)]
struct State {
    durable: Vec<u8>,
    /// Writes a failed flush may have dropped, in issue order: reads still see them (as a
    /// page cache does), but no later flush makes them durable (Linux may have marked
    /// their pages clean after the failed fsync); a crash decides their fate as it does
    /// a pending write's. Older than every pending write.
    limbo: Vec<(u64, Vec<u8>)>,
    /// Unflushed writes in issue order.
    pending: Vec<(u64, Vec<u8>)>,
    read_errors: Vec<Range<u64>>,
    write_errors: Vec<Range<u64>>,
    fail_flush: bool,
    stats: FaultyStats,
}

/// An in-memory device with a volatile write cache and injectable faults.
///
/// Reads see the latest write (as a real drive's cache does). `flush` applies the
/// pending writes to the durable image; a flush that fails leaves them in limbo, where a
/// later flush that succeeds does not make them durable either (the fsync rule on Linux:
/// a retried fsync may succeed without the data); `crash` decides the fate of the
/// pending writes and those in limbo according to a [`CrashMode`] and empties the cache. Tearing happens at
/// [`SECTOR_BYTES`] granularity, which is the atomicity larch assumes of media.
#[derive(Debug)]
pub struct FaultyDevice {
    state: Mutex<State>,
}

impl FaultyDevice {
    /// A zero-filled device of `len_bytes`.
    pub fn new(len_bytes: u64) -> Self {
        let len = usize::try_from(len_bytes).expect("device larger than the address space");
        Self {
            state: Mutex::new(State {
                durable: vec![0; len],
                limbo: Vec::new(),
                pending: Vec::new(),
                read_errors: Vec::new(),
                write_errors: Vec::new(),
                fail_flush: false,
                stats: FaultyStats::default(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("faulty device lock poisoned")
    }

    /// Reads that touch `range` fail from now on.
    pub fn fail_reads(&self, range: Range<u64>) {
        self.lock().read_errors.push(range);
    }

    /// Writes that touch `range` fail from now on (and change nothing).
    pub fn fail_writes(&self, range: Range<u64>) {
        self.lock().write_errors.push(range);
    }

    /// Makes every later flush fail (`true`) or succeed (`false`).
    pub fn fail_flushes(&self, fail: bool) {
        self.lock().fail_flush = fail;
    }

    /// Removes every injected error.
    pub fn clear_faults(&self) {
        let mut state = self.lock();
        state.read_errors.clear();
        state.write_errors.clear();
        state.fail_flush = false;
    }

    /// Number of writes issued since the last flush or crash.
    pub fn pending_writes(&self) -> usize {
        self.lock().pending.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> FaultyStats {
        self.lock().stats
    }

    /// A power cut: decides the fate of each unflushed write according to `mode`, then
    /// empties the write cache. The device stays usable, as after a reboot.
    pub fn crash(&self, mode: CrashMode) {
        let mut state = self.lock();
        let mut pending = std::mem::take(&mut state.limbo);
        pending.append(&mut state.pending);
        state.stats.crashes += 1;
        match mode {
            CrashMode::DropAll => {}
            CrashMode::Prefix(n) => {
                for (offset, bytes) in pending.into_iter().take(n) {
                    apply(&mut state.durable, offset, &bytes);
                }
            }
            CrashMode::Random(seed) => {
                let mut rng = SplitMix64(seed);
                for (offset, bytes) in pending {
                    match rng.next() % 3 {
                        0 => {}
                        1 => apply(&mut state.durable, offset, &bytes),
                        _ => tear(&mut state.durable, offset, &bytes, &mut rng),
                    }
                }
            }
        }
    }

    /// The durable image (what would survive a power cut that drops every pending write).
    pub fn durable_snapshot(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// Changes one durable byte, bypassing the cache (to model media corruption).
    pub fn corrupt_byte(&self, offset_bytes: u64, xor_mask: u8) {
        let mut state = self.lock();
        let index = usize::try_from(offset_bytes).expect("offset fits usize");
        state.durable[index] ^= xor_mask;
        // Keep reads consistent with the corruption: drop it from any cached write.
        let State { limbo, pending, .. } = &mut *state;
        for (offset, bytes) in limbo.iter_mut().chain(pending.iter_mut()) {
            if let Some(rel) = offset_bytes.checked_sub(*offset)
                && (rel as usize) < bytes.len()
            {
                bytes[rel as usize] ^= xor_mask;
            }
        }
    }
}

/// The injected error of an `op` of `len` bytes at `offset_bytes` that overlaps one of
/// `ranges`.
fn injected(
    ranges: &[Range<u64>],
    op: &'static str,
    offset_bytes: u64,
    len: usize,
) -> Result<(), IoError> {
    let end = offset_bytes.saturating_add(len as u64);
    if ranges.iter().any(|r| r.start < end && offset_bytes < r.end) {
        return Err(IoError::Injected {
            op,
            offset_bytes,
            len_bytes: len as u64,
        });
    }
    Ok(())
}

fn apply(durable: &mut [u8], offset_bytes: u64, bytes: &[u8]) {
    let start = offset_bytes as usize;
    durable[start..start + bytes.len()].copy_from_slice(bytes);
}

/// Applies a random subset of the write's sectors: a torn write.
fn tear(durable: &mut [u8], offset_bytes: u64, bytes: &[u8], rng: &mut SplitMix64) {
    let sector = SECTOR_BYTES as usize;
    for (i, chunk) in bytes.chunks(sector).enumerate() {
        if rng.next().is_multiple_of(2) {
            apply(durable, offset_bytes + (i * sector) as u64, chunk);
        }
    }
}

/// A tiny deterministic generator, so crash outcomes are reproducible from a seed
/// without a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl BlockDevice for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        let mut state = self.lock();
        check_range("read", offset_bytes, buf.len(), state.durable.len() as u64)?;
        injected(&state.read_errors, "read", offset_bytes, buf.len())?;
        let start = offset_bytes as usize;
        buf.copy_from_slice(&state.durable[start..start + buf.len()]);
        // Later cached writes shadow earlier ones and the durable image.
        let end = offset_bytes + buf.len() as u64;
        for (w_offset, w_bytes) in state.limbo.iter().chain(&state.pending) {
            let w_end = w_offset + w_bytes.len() as u64;
            let lo = offset_bytes.max(*w_offset);
            let hi = end.min(w_end);
            if lo < hi {
                let dst = (lo - offset_bytes) as usize;
                let src = (lo - w_offset) as usize;
                let n = (hi - lo) as usize;
                buf[dst..dst + n].copy_from_slice(&w_bytes[src..src + n]);
            }
        }
        state.stats.reads += 1;
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        let mut state = self.lock();
        check_range("write", offset_bytes, buf.len(), state.durable.len() as u64)?;
        injected(&state.write_errors, "write", offset_bytes, buf.len())?;
        state.pending.push((offset_bytes, buf.to_vec()));
        state.stats.writes += 1;
        Ok(())
    }

    fn flush(&self) -> Result<(), IoError> {
        let mut state = self.lock();
        if state.fail_flush {
            let failed = std::mem::take(&mut state.pending);
            state.limbo.extend(failed);
            return Err(IoError::Injected {
                op: "flush",
                offset_bytes: 0,
                len_bytes: 0,
            });
        }
        let pending = std::mem::take(&mut state.pending);
        for (offset, bytes) in pending {
            apply(&mut state.durable, offset, &bytes);
        }
        state.stats.flushes += 1;
        Ok(())
    }

    fn len_bytes(&self) -> u64 {
        self.lock().durable.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dev: &FaultyDevice, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        dev.read_at(&mut buf, offset).unwrap();
        buf
    }

    #[test]
    fn unflushed_writes_are_visible_then_lost_on_crash() {
        let dev = FaultyDevice::new(4096);
        dev.write_at(&[1; 512], 0).unwrap();
        dev.flush().unwrap();
        dev.write_at(&[2; 512], 0).unwrap();
        dev.write_at(&[3; 100], 600).unwrap();
        assert_eq!(read(&dev, 0, 1), [2], "reads see the cache");
        assert_eq!(dev.pending_writes(), 2);
        dev.crash(CrashMode::DropAll);
        assert_eq!(read(&dev, 0, 1), [1], "flushed write survives");
        assert_eq!(read(&dev, 600, 1), [0], "unflushed write is gone");
        assert_eq!(dev.stats().crashes, 1);
    }

    #[test]
    fn prefix_crash_keeps_issue_order() {
        let dev = FaultyDevice::new(4096);
        for i in 0..4u8 {
            dev.write_at(&[i + 1; 512], u64::from(i) * 512).unwrap();
        }
        dev.crash(CrashMode::Prefix(2));
        assert_eq!(read(&dev, 0, 1), [1]);
        assert_eq!(read(&dev, 512, 1), [2]);
        assert_eq!(read(&dev, 1024, 1), [0]);
        assert_eq!(read(&dev, 1536, 1), [0]);
    }

    #[test]
    fn random_crash_tears_only_at_sector_boundaries() {
        let mut saw_torn = false;
        for seed in 0..64 {
            let dev = FaultyDevice::new(8192);
            dev.write_at(&[7; 8192], 0).unwrap();
            dev.crash(CrashMode::Random(seed));
            let image = dev.durable_snapshot();
            for sector in image.chunks(512) {
                assert!(
                    sector.iter().all(|&b| b == sector[0]),
                    "seed {seed}: a sector was split"
                );
            }
            let landed = image.chunks(512).filter(|s| s[0] == 7).count();
            saw_torn |= landed > 0 && landed < 16;
        }
        assert!(saw_torn, "64 seeds never produced a torn write");
    }

    #[test]
    fn injected_errors_and_corruption() {
        let dev = FaultyDevice::new(4096);
        dev.fail_reads(1000..1001);
        dev.fail_writes(2000..2100);
        let mut buf = [0u8; 10];
        assert!(matches!(
            dev.read_at(&mut buf, 995),
            Err(IoError::Injected { .. })
        ));
        dev.read_at(&mut buf, 1001).unwrap();
        assert!(dev.write_at(&[1; 10], 2095).is_err());
        dev.write_at(&[1; 10], 2100).unwrap();
        dev.fail_flushes(true);
        assert!(dev.flush().is_err());
        dev.clear_faults();
        dev.flush().unwrap();
        dev.corrupt_byte(2100, 0xff);
        assert_eq!(read(&dev, 2100, 2), [0xfe, 1]);
    }

    /// A write a failed flush held stays readable, but a flush that succeeds afterwards
    /// does not make it durable (a retried fsync proves nothing about it); a crash
    /// decides its fate with the writes still pending.
    #[test]
    fn a_retried_flush_does_not_make_the_writes_of_a_failed_one_durable() {
        let dev = FaultyDevice::new(4096);
        dev.write_at(&[1; 8], 0).unwrap();
        dev.fail_flushes(true);
        assert!(dev.flush().is_err());
        dev.fail_flushes(false);
        dev.write_at(&[2; 8], 512).unwrap();
        dev.flush().unwrap();
        assert_eq!(read(&dev, 0, 1), [1], "still readable");
        let durable = dev.durable_snapshot();
        assert_eq!(durable[0], 0, "the retried flush made it durable");
        assert_eq!(durable[512], 2, "the later write is durable");
        dev.crash(CrashMode::DropAll);
        assert_eq!(read(&dev, 0, 1), [0], "a crash may drop it");
    }
}
