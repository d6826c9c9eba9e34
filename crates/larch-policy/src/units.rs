//! Parsing and printing of byte sizes as users type them: `512`, `8K`, `16M`, `1.5G`, `2TiB`.
//! Suffixes are binary (K = 1024), as in `zfs` and `fio`. The one size parser: the
//! engine's tunables and the CLI's flags (through `larch_engine::units`) and the
//! simulator's device specs all read sizes here.

use std::fmt;

/// A size that did not parse, with the text and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    text: String,
    reason: &'static str,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size {:?}: {} (expected a number of bytes with an optional K, M, G or T suffix, e.g. 64M)",
            self.text, self.reason
        )
    }
}

impl std::error::Error for SizeError {}

/// Parses a byte count with an optional binary suffix (K, M, G, T; `KiB`, `KB` and `k` also accepted).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError {
        text: text.to_string(),
        reason,
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, suffix) = trimmed.split_at(split);
    if number.is_empty() {
        return Err(err("no number"));
    }
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(err("unknown suffix")),
    };
    let multiplier = 1u64 << shift;
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(multiplier)
            .ok_or_else(|| err("too large"));
    }
    let value: f64 = number.parse().map_err(|_| err("not a number"))?;
    let bytes = value * multiplier as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(err("too large"));
    }
    // A fraction of a suffix rounds to the nearest byte (`1.2T` is not a whole number of
    // bytes, and nobody typing it means a fraction of one); a fraction of a byte is refused.
    if shift == 0 && bytes.fract() != 0.0 {
        return Err(err("not a whole number of bytes"));
    }
    Ok(bytes.round() as u64)
}

/// Formats a byte count with the largest binary suffix that keeps it readable, e.g. `16.0M`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes}")
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

/// Formats a byte count exactly, as users type it: the largest binary suffix that
/// divides it (`96K`, `1G`), else the plain number (`1048577`).
pub fn format_size_exact(bytes: u64) -> String {
    if bytes > 0 {
        for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
            if bytes.trailing_zeros() >= shift {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("8K"), Ok(8192));
        assert_eq!(parse_size("8k"), Ok(8192));
        assert_eq!(parse_size("16M"), Ok(16 << 20));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        // Fractions of a suffix round to the nearest byte (a tester's finding: "1.2T", in
        // docs/simulator.md's own example, was refused).
        assert_eq!(parse_size("1.2T"), Ok(1_319_413_953_331));
        assert_eq!(parse_size("1.1K"), Ok(1126));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "M",
            "12Q",
            "1.2.3",
            "-5",
            "0.3",
            "99999999999999999999T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_size(100), "100");
        assert_eq!(format_size(16 << 20), "16.0M");
        assert_eq!(format_size_exact(0), "0");
        assert_eq!(format_size_exact(96 << 10), "96K");
        assert_eq!(format_size_exact(3 << 40), "3T");
        assert_eq!(format_size_exact((1 << 20) + 1), "1048577");
    }
}
