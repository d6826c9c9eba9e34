//! Device specs as users type them on the command line, e.g. `140xhdd:mirror`,
//! `48xhdd:raidz2:46`, `readzilla`, `nvme:channels=16`, `s3:median_ms=20,p99_ms=120`.
//!
//! Grammar: `[COUNTx]MODEL[:LAYOUT[:N]][:KEY=VALUE,...]`.
//!
//! - `MODEL` is `hdd`, `ssd`, `readzilla`, `nvme`, `s3` (or `objectstore`) or `ram`.
//! - `COUNT` and `LAYOUT` apply to `hdd` only (cache devices are single devices): `stripe`
//!   (the default), `mirror` (`N` disks per mirror, default 2) or `raidz1`/`raidz`, `raidz2`,
//!   `raidz3` (`N` disks per vdev, default all of them). Disks left over are spares.
//! - Overrides come last. Sizes take K, M, G, T suffixes (binary: `4T` is 4 TiB) and may be
//!   fractional (`1.5T`, rounded to a byte). A key given twice takes its last value.
//!
//! Parsing never panics; errors name the field and the text that was wrong.

use std::fmt;
use std::str::FromStr;

use super::disk::{Hdd, HddParams, MAX_QUEUE_DEPTH};
use super::flash::{MAX_CHANNELS, Ram, RamParams, Ssd, SsdParams};
use super::object::{MAX_CONCURRENCY, ObjectStore, ObjectStoreParams};
use super::pool::{DEFAULT_CHUNK_BYTES, Layout, Pool};
use super::{Device, MIN_PIECE_BYTES};

/// Most disks one spec may build. Far above any real array, it stops a typing slip such as
/// `1400000xhdd` from allocating a model per disk until memory runs out.
pub const MAX_DISKS: u32 = 10_000;

/// A device spec that could not be parsed or built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The text was empty.
    #[error("empty device spec (for example hdd, 140xhdd:mirror, readzilla, nvme or s3)")]
    Empty,
    /// The model name is not one of the known models.
    #[error("unknown model {0:?} (one of: hdd, ssd, readzilla, nvme, s3, objectstore, ram)")]
    UnknownModel(String),
    /// An override key the model does not have.
    #[error("unknown field {field:?} for {model} (one of: {known})")]
    UnknownField {
        /// The model the override was for.
        model: &'static str,
        /// The key as given.
        field: String,
        /// The keys the model accepts.
        known: &'static str,
    },
    /// A field's value is malformed or out of range.
    #[error("{field}: expected {expected}, got {got:?}")]
    BadValue {
        /// The field (an override key, or `count`, `layout`, `width`, ...).
        field: &'static str,
        /// What the field accepts.
        expected: String,
        /// The value as given.
        got: String,
    },
}

impl SpecError {
    /// A [`SpecError::BadValue`].
    pub(crate) fn bad(
        field: &'static str,
        expected: impl Into<String>,
        got: impl ToString,
    ) -> Self {
        SpecError::BadValue {
            field,
            expected: expected.into(),
            got: got.to_string(),
        }
    }
}

/// Checks that a parameter is a finite number above zero.
pub(crate) fn check_positive(field: &'static str, value: f64) -> Result<(), SpecError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SpecError::bad(field, "a positive number", value))
    }
}

/// Checks that a parameter is a finite number, zero or above.
pub(crate) fn check_non_negative(field: &'static str, value: f64) -> Result<(), SpecError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(SpecError::bad(field, "a number, zero or more", value))
    }
}

/// The flash presets a spec may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashPreset {
    /// A generic SATA SSD ([`SsdParams::sata`]).
    Ssd,
    /// Seed 000's Readzilla ([`SsdParams::readzilla`]).
    Readzilla,
    /// Seed 002's NVMe drive ([`SsdParams::nvme`]).
    Nvme,
}

impl FlashPreset {
    /// The model name, as typed and as reported.
    pub fn name(self) -> &'static str {
        match self {
            FlashPreset::Ssd => "ssd",
            FlashPreset::Readzilla => "readzilla",
            FlashPreset::Nvme => "nvme",
        }
    }

    /// The preset's parameters.
    pub fn params(self) -> SsdParams {
        match self {
            FlashPreset::Ssd => SsdParams::sata(),
            FlashPreset::Readzilla => SsdParams::readzilla(),
            FlashPreset::Nvme => SsdParams::nvme(),
        }
    }
}

/// A parsed device spec: what [`DeviceSpec::build`] will construct. Its `Display` is the
/// canonical spec text (only fields that differ from the defaults), which parses back to an
/// equal spec.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceSpec {
    /// Hard disks: one disk (`count` 1, [`Layout::Stripe`]) or a [`Pool`] of vdevs.
    Disks {
        /// Disks in all, spares included (1 to [`MAX_DISKS`]).
        count: u32,
        /// How the disks group into vdevs.
        layout: Layout,
        /// Every disk's parameters.
        hdd: HddParams,
        /// The pool's striping chunk ([`DEFAULT_CHUNK_BYTES`] unless overridden).
        chunk_bytes: u64,
    },
    /// One flash device.
    Flash {
        /// The preset named.
        preset: FlashPreset,
        /// The preset's parameters with any overrides.
        params: SsdParams,
    },
    /// An object store.
    ObjectStore(ObjectStoreParams),
    /// RAM.
    Ram(RamParams),
}

/// Parses `text` and builds the device, its random sources seeded from `seed`.
pub fn parse_spec(text: &str, seed: u64) -> Result<Box<dyn Device>, SpecError> {
    DeviceSpec::parse(text)?.build(seed)
}

impl DeviceSpec {
    /// Parses a spec (see the module documentation for the grammar) and validates it.
    pub fn parse(text: &str) -> Result<DeviceSpec, SpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SpecError::Empty);
        }
        // The first segment always names the model; overrides, if any, are the last.
        let mut segments = text.split(':');
        let head = segments.next().unwrap_or_default();
        let mut layout: Vec<&str> = segments.collect();
        let overrides = match layout.last() {
            Some(last) if last.contains('=') => layout.pop(),
            _ => None,
        };
        if let Some(misplaced) = layout.iter().find(|s| s.contains('=')) {
            return Err(SpecError::bad(
                "overrides",
                "key=value pairs only in the last segment",
                misplaced,
            ));
        }
        let (count_text, model) = split_count(head);
        let mut spec = match model.to_ascii_lowercase().as_str() {
            "hdd" | "disk" => parse_disks(count_text, &layout)?,
            other => {
                let spec = single_device(other)
                    .ok_or_else(|| SpecError::UnknownModel(model.to_string()))?;
                reject_array_syntax(&spec, count_text, &layout)?;
                spec
            }
        };
        if let Some(overrides) = overrides {
            for pair in overrides.split(',') {
                let (key, value) = pair.split_once('=').ok_or_else(|| {
                    SpecError::bad("overrides", "key=value pairs separated by commas", pair)
                })?;
                spec.set(&key.trim().to_ascii_lowercase(), value.trim())?;
            }
        }
        spec.validate()?;
        Ok(spec)
    }

    /// Checks the spec's parameters and layout; the error names the first bad field.
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            DeviceSpec::Disks {
                count,
                layout,
                hdd,
                chunk_bytes,
            } => {
                validate_layout(*count, *layout)?;
                hdd.validate()?;
                // Every vdev holds at least one disk's capacity, so a chunk no larger than a
                // disk always fits, whatever the layout.
                if *chunk_bytes < MIN_PIECE_BYTES || *chunk_bytes > hdd.capacity_bytes {
                    return Err(SpecError::bad(
                        "chunk",
                        format!(
                            "a size from {MIN_PIECE_BYTES} bytes to the disk's capacity ({})",
                            hdd.capacity_bytes
                        ),
                        chunk_bytes,
                    ));
                }
                Ok(())
            }
            DeviceSpec::Flash { params, .. } => params.validate(),
            DeviceSpec::ObjectStore(params) => params.validate(),
            DeviceSpec::Ram(params) => params.validate(),
        }
    }

    /// Builds the device, its random sources seeded from `seed`.
    pub fn build(&self, seed: u64) -> Result<Box<dyn Device>, SpecError> {
        self.validate()?;
        Ok(match self {
            DeviceSpec::Disks {
                count: 1,
                layout: Layout::Stripe,
                hdd,
                ..
            } => Box::new(Hdd::new(hdd.clone(), seed)?),
            DeviceSpec::Disks {
                count,
                layout,
                hdd,
                chunk_bytes,
            } => Box::new(Pool::from_disks(
                *count,
                *layout,
                hdd.clone(),
                *chunk_bytes,
                seed,
            )?),
            DeviceSpec::Flash { preset, params } => {
                Box::new(Ssd::new(preset.name(), params.clone())?)
            }
            DeviceSpec::ObjectStore(params) => Box::new(ObjectStore::new(params.clone(), seed)?),
            DeviceSpec::Ram(params) => Box::new(Ram::new(params.clone())?),
        })
    }

    /// Applies one override.
    fn set(&mut self, key: &str, value: &str) -> Result<(), SpecError> {
        match self {
            DeviceSpec::Disks {
                hdd,
                chunk_bytes,
                layout,
                ..
            } => match key {
                "capacity" => hdd.capacity_bytes = parse_size("capacity", value)?,
                "rpm" => hdd.rpm = parse_positive("rpm", value)?,
                "settle_ms" => hdd.settle_ms = parse_non_negative("settle_ms", value)?,
                "full_stroke_ms" => hdd.full_stroke_ms = parse_positive("full_stroke_ms", value)?,
                "transfer_mb_s" => hdd.transfer_mb_s = parse_positive("transfer_mb_s", value)?,
                "chunk" => *chunk_bytes = parse_size("chunk", value)?,
                "sector" => hdd.sector_bytes = parse_size("sector", value)?,
                "queue_depth" => {
                    hdd.queue_depth = parse_whole("queue_depth", value, MAX_QUEUE_DEPTH)?;
                }
                "failed" => match layout {
                    Layout::RaidZ { failed, .. } => *failed = Some(parse_disk_index(value)?),
                    _ => {
                        return Err(SpecError::bad(
                            "failed",
                            "a raidz layout (a failed disk is modelled in RAID-Z only)",
                            value,
                        ));
                    }
                },
                _ => return Err(unknown_field("hdd", key, HDD_FIELDS)),
            },
            DeviceSpec::Flash { preset, params } => match key {
                "capacity" => params.capacity_bytes = parse_size("capacity", value)?,
                "channels" => {
                    params.channels = parse_whole("channels", value, MAX_CHANNELS)?;
                }
                "read_us" => params.read_us = parse_non_negative("read_us", value)?,
                "write_us" => params.write_us = parse_non_negative("write_us", value)?,
                "read_mb_s" => params.read_mb_s = parse_positive("read_mb_s", value)?,
                "write_mb_s" => params.write_mb_s = parse_positive("write_mb_s", value)?,
                "stripe" => params.stripe_bytes = parse_size_or_zero("stripe", value)?,
                _ => return Err(unknown_field(preset.name(), key, FLASH_FIELDS)),
            },
            DeviceSpec::ObjectStore(params) => match key {
                "capacity" => params.capacity_bytes = parse_size("capacity", value)?,
                "median_ms" => params.median_ms = parse_positive("median_ms", value)?,
                "p99_ms" => params.p99_ms = parse_positive("p99_ms", value)?,
                "throughput_mb_s" => {
                    params.throughput_mb_s = parse_positive("throughput_mb_s", value)?;
                }
                "concurrency" => {
                    params.concurrency = parse_whole("concurrency", value, MAX_CONCURRENCY)?;
                }
                _ => return Err(unknown_field("s3", key, OBJECT_FIELDS)),
            },
            DeviceSpec::Ram(params) => match key {
                "capacity" => params.capacity_bytes = parse_size("capacity", value)?,
                "latency_us" => params.latency_us = parse_non_negative("latency_us", value)?,
                _ => return Err(unknown_field("ram", key, RAM_FIELDS)),
            },
        }
        Ok(())
    }
}

impl FromStr for DeviceSpec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<DeviceSpec, SpecError> {
        DeviceSpec::parse(text)
    }
}

const HDD_FIELDS: &str =
    "capacity, rpm, settle_ms, full_stroke_ms, transfer_mb_s, chunk, sector, queue_depth, failed";
const FLASH_FIELDS: &str = "capacity, channels, read_us, write_us, read_mb_s, write_mb_s, stripe";
const OBJECT_FIELDS: &str = "capacity, median_ms, p99_ms, throughput_mb_s, concurrency";
const RAM_FIELDS: &str = "capacity, latency_us";

fn unknown_field(model: &'static str, key: &str, known: &'static str) -> SpecError {
    SpecError::UnknownField {
        model,
        field: key.to_string(),
        known,
    }
}

/// Splits `140xhdd` into `("140", "hdd")`; text not starting with a digit has no count.
fn split_count(head: &str) -> (Option<&str>, &str) {
    let head = head.trim();
    if !head.starts_with(|c: char| c.is_ascii_digit()) {
        return (None, head);
    }
    match head.find(['x', 'X']) {
        Some(at) => (Some(&head[..at]), &head[at + 1..]),
        None => (Some(head), ""),
    }
}

/// The spec of a single device with its defaults, or `None` for an unknown model.
fn single_device(model: &str) -> Option<DeviceSpec> {
    let flash = |preset: FlashPreset| DeviceSpec::Flash {
        preset,
        params: preset.params(),
    };
    match model {
        "ssd" => Some(flash(FlashPreset::Ssd)),
        "readzilla" => Some(flash(FlashPreset::Readzilla)),
        "nvme" => Some(flash(FlashPreset::Nvme)),
        "s3" | "objectstore" => Some(DeviceSpec::ObjectStore(ObjectStoreParams::default())),
        "ram" => Some(DeviceSpec::Ram(RamParams::default())),
        _ => None,
    }
}

/// Single devices take neither a count nor a layout.
fn reject_array_syntax(
    spec: &DeviceSpec,
    count_text: Option<&str>,
    layout: &[&str],
) -> Result<(), SpecError> {
    let model = match spec {
        DeviceSpec::Flash { preset, .. } => preset.name(),
        DeviceSpec::ObjectStore(_) => "s3",
        _ => "ram",
    };
    if let Some(count) = count_text {
        return Err(SpecError::bad(
            "count",
            format!("no count: {model} is a single device (only hdd arrays are modelled)"),
            count,
        ));
    }
    if let Some(first) = layout.first() {
        return Err(SpecError::bad(
            "layout",
            format!("no layout: {model} is a single device"),
            first,
        ));
    }
    Ok(())
}

/// The disk part of a spec: the count and the layout segments.
fn parse_disks(count_text: Option<&str>, layout: &[&str]) -> Result<DeviceSpec, SpecError> {
    let count = match count_text {
        Some(text) => parse_whole("count", text, MAX_DISKS)?,
        None => 1,
    };
    let number = |field: &'static str| match layout.get(1) {
        Some(text) => parse_whole(field, text, MAX_DISKS).map(Some),
        None => Ok(None),
    };
    let word = layout.first().map(|w| w.trim().to_ascii_lowercase());
    let layout_kind = match word.as_deref() {
        None | Some("stripe") => {
            if let Some(extra) = layout.get(1) {
                return Err(SpecError::bad("layout", "no number after stripe", extra));
            }
            Layout::Stripe
        }
        Some("mirror") => Layout::Mirror {
            sides: number("sides")?.unwrap_or(2),
        },
        Some(raidz) if raidz.starts_with("raidz") => {
            let parity = match &raidz["raidz".len()..] {
                "" | "1" => 1,
                "2" => 2,
                "3" => 3,
                _ => {
                    return Err(SpecError::bad(
                        "layout",
                        "raidz1, raidz2 or raidz3",
                        layout[0],
                    ));
                }
            };
            Layout::RaidZ {
                parity,
                width: number("width")?.unwrap_or(count),
                failed: None,
            }
        }
        Some(_) => {
            return Err(SpecError::bad(
                "layout",
                "stripe, mirror, raidz1, raidz2 or raidz3",
                layout[0],
            ));
        }
    };
    if layout.len() > 2 {
        return Err(SpecError::bad(
            "layout",
            "a layout and at most one number",
            layout.join(":"),
        ));
    }
    Ok(DeviceSpec::Disks {
        count,
        layout: layout_kind,
        hdd: HddParams::default(),
        chunk_bytes: DEFAULT_CHUNK_BYTES,
    })
}

/// Checks that `count` disks can form at least one vdev of `layout`.
fn validate_layout(count: u32, layout: Layout) -> Result<(), SpecError> {
    if !(1..=MAX_DISKS).contains(&count) {
        return Err(SpecError::bad(
            "count",
            format!("a whole number from 1 to {MAX_DISKS}"),
            count,
        ));
    }
    match layout {
        Layout::Stripe => Ok(()),
        Layout::Mirror { sides } => {
            if !(2..=MAX_DISKS).contains(&sides) {
                return Err(SpecError::bad(
                    "sides",
                    "at least 2 disks per mirror",
                    sides,
                ));
            }
            if count < sides {
                return Err(SpecError::bad(
                    "count",
                    format!("at least {sides} disks for a {sides}-way mirror"),
                    count,
                ));
            }
            Ok(())
        }
        Layout::RaidZ {
            parity,
            width,
            failed,
        } => {
            if !(1..=3).contains(&parity) {
                return Err(SpecError::bad("parity", "1, 2 or 3", parity));
            }
            if width <= parity {
                return Err(SpecError::bad(
                    "width",
                    format!("more than {parity} disks for raidz{parity}"),
                    width,
                ));
            }
            if count < width {
                return Err(SpecError::bad(
                    "count",
                    format!("at least {width} disks for a {width}-wide raidz{parity}"),
                    count,
                ));
            }
            if let Some(disk) = failed.filter(|&disk| disk >= width) {
                return Err(SpecError::bad(
                    "failed",
                    format!("a disk of the vdev, 0 to {}", width - 1),
                    disk,
                ));
            }
            Ok(())
        }
    }
}

pub(crate) fn parse_positive(field: &'static str, text: &str) -> Result<f64, SpecError> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(SpecError::bad(field, "a positive number", text)),
    }
}

pub(crate) fn parse_non_negative(field: &'static str, text: &str) -> Result<f64, SpecError> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err(SpecError::bad(field, "a number, zero or more", text)),
    }
}

/// A disk's index within its vdev, from 0.
fn parse_disk_index(text: &str) -> Result<u32, SpecError> {
    match text.trim().parse::<u32>() {
        Ok(value) if value < MAX_DISKS => Ok(value),
        _ => Err(SpecError::bad(
            "failed",
            format!("a disk's index from 0 to {}", MAX_DISKS - 1),
            text,
        )),
    }
}

pub(crate) fn parse_whole(field: &'static str, text: &str, max: u32) -> Result<u32, SpecError> {
    match text.trim().parse::<u32>() {
        Ok(value) if (1..=max).contains(&value) => Ok(value),
        _ => Err(SpecError::bad(
            field,
            format!("a whole number from 1 to {max}"),
            text,
        )),
    }
}

/// A size in bytes, above zero.
fn parse_size(field: &'static str, text: &str) -> Result<u64, SpecError> {
    match size_bytes(text) {
        Some(bytes) if bytes > 0 => Ok(bytes),
        _ => Err(SpecError::bad(
            field,
            "a positive size in bytes with an optional K, M, G or T suffix",
            text,
        )),
    }
}

/// A size in bytes, zero allowed.
fn parse_size_or_zero(field: &'static str, text: &str) -> Result<u64, SpecError> {
    size_bytes(text).ok_or_else(|| {
        SpecError::bad(
            field,
            "a size in bytes with an optional K, M, G or T suffix, or 0",
            text,
        )
    })
}

/// `512`, `8K`, `1.5T`, `4TiB`: a size as every larch size is read
/// ([`larch_policy::units::parse_size`]); `None` if the text is not one.
fn size_bytes(text: &str) -> Option<u64> {
    larch_policy::units::parse_size(text).ok()
}

/// A size as a spec would give it: the largest binary suffix that divides it exactly.
fn format_size(bytes: u64) -> String {
    larch_policy::units::format_size_exact(bytes)
}

/// The overrides a spec's text lists: the fields whose values print otherwise than the
/// model's defaults do.
#[derive(Default)]
struct Overrides(Vec<String>);

impl Overrides {
    /// `key=value` unless `value` prints as `default` does.
    fn number(&mut self, key: &str, value: impl fmt::Display, default: impl fmt::Display) {
        let (value, default) = (value.to_string(), default.to_string());
        if value != default {
            self.0.push(format!("{key}={value}"));
        }
    }

    /// A size, as a spec would give it.
    fn size(&mut self, key: &str, value_bytes: u64, default_bytes: u64) {
        self.number(key, format_size(value_bytes), format_size(default_bytes));
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut o = Overrides::default();
        match self {
            DeviceSpec::Disks {
                count,
                layout,
                hdd,
                chunk_bytes,
            } => {
                match layout {
                    Layout::Stripe if *count == 1 => write!(f, "hdd")?,
                    Layout::Stripe => write!(f, "{count}xhdd")?,
                    Layout::Mirror { sides: 2 } => write!(f, "{count}xhdd:mirror")?,
                    Layout::Mirror { sides } => write!(f, "{count}xhdd:mirror:{sides}")?,
                    Layout::RaidZ { parity, width, .. } => {
                        write!(f, "{count}xhdd:raidz{parity}:{width}")?
                    }
                }
                let d = HddParams::default();
                o.size("capacity", hdd.capacity_bytes, d.capacity_bytes);
                o.number("rpm", hdd.rpm, d.rpm);
                o.number("settle_ms", hdd.settle_ms, d.settle_ms);
                o.number("full_stroke_ms", hdd.full_stroke_ms, d.full_stroke_ms);
                o.number("transfer_mb_s", hdd.transfer_mb_s, d.transfer_mb_s);
                o.size("chunk", *chunk_bytes, DEFAULT_CHUNK_BYTES);
                o.size("sector", hdd.sector_bytes, d.sector_bytes);
                o.number("queue_depth", hdd.queue_depth, d.queue_depth);
                if let Layout::RaidZ {
                    failed: Some(disk), ..
                } = layout
                {
                    o.0.push(format!("failed={disk}"));
                }
            }
            DeviceSpec::Flash { preset, params: p } => {
                write!(f, "{}", preset.name())?;
                let d = preset.params();
                o.size("capacity", p.capacity_bytes, d.capacity_bytes);
                o.number("channels", p.channels, d.channels);
                o.number("read_us", p.read_us, d.read_us);
                o.number("write_us", p.write_us, d.write_us);
                o.number("read_mb_s", p.read_mb_s, d.read_mb_s);
                o.number("write_mb_s", p.write_mb_s, d.write_mb_s);
                o.size("stripe", p.stripe_bytes, d.stripe_bytes);
            }
            DeviceSpec::ObjectStore(p) => {
                write!(f, "s3")?;
                let d = ObjectStoreParams::default();
                o.size("capacity", p.capacity_bytes, d.capacity_bytes);
                o.number("median_ms", p.median_ms, d.median_ms);
                o.number("p99_ms", p.p99_ms, d.p99_ms);
                o.number("throughput_mb_s", p.throughput_mb_s, d.throughput_mb_s);
                o.number("concurrency", p.concurrency, d.concurrency);
            }
            DeviceSpec::Ram(p) => {
                write!(f, "ram")?;
                let d = RamParams::default();
                o.size("capacity", p.capacity_bytes, d.capacity_bytes);
                o.number("latency_us", p.latency_us, d.latency_us);
            }
        }
        if !o.0.is_empty() {
            write!(f, ":{}", o.0.join(","))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(size_bytes("512"), Some(512));
        assert_eq!(size_bytes("8K"), Some(8192));
        assert_eq!(size_bytes("4TiB"), Some(4 << 40));
        assert_eq!(size_bytes("1.5k"), Some(1536));
        assert_eq!(size_bytes("0"), Some(0));
        assert_eq!(size_bytes("-1"), None);
        assert_eq!(size_bytes("1Q"), None);
        assert_eq!(size_bytes("99999999999T"), None);
        assert_eq!(size_bytes("1e400"), None);
        assert_eq!(format_size(4 << 40), "4T");
        assert_eq!(format_size(1_000_000_000_000), "976562500K");
        assert_eq!(format_size(1_000_000_000_001), "1000000000001");
    }

    #[test]
    fn counts_split_from_models() {
        assert_eq!(split_count("140xhdd"), (Some("140"), "hdd"));
        assert_eq!(split_count("hdd"), (None, "hdd"));
        assert_eq!(split_count("12"), (Some("12"), ""));
    }
}
