//! The checks every decoder makes, each with the [`FormatError`] it returns, so that the
//! cache device's and the log device's structures refuse bad bytes in the same words.

use crate::layout::{FieldLayout, bytes, get};
use crate::{FormatError, checksum};

/// The first `need_bytes` of `buf`, or [`FormatError::TooShort`] when it holds fewer.
pub(crate) fn prefix<'a>(
    what: &'static str,
    buf: &'a [u8],
    need_bytes: usize,
) -> Result<&'a [u8], FormatError> {
    too_short(what, need_bytes, buf.len())?;
    Ok(&buf[..need_bytes])
}

/// [`FormatError::TooShort`] when `got_bytes` is less than `need_bytes`.
pub(crate) fn too_short(
    what: &'static str,
    need_bytes: usize,
    got_bytes: usize,
) -> Result<(), FormatError> {
    if got_bytes < need_bytes {
        Err(FormatError::TooShort {
            what,
            need_bytes,
            got_bytes,
        })
    } else {
        Ok(())
    }
}

/// [`FormatError::BadMagic`] unless field `f` of `buf` holds `magic`.
pub(crate) fn magic(
    buf: &[u8],
    what: &'static str,
    f: FieldLayout,
    magic: u64,
) -> Result<(), FormatError> {
    let found = get(buf, f);
    if found == magic {
        Ok(())
    } else {
        Err(FormatError::BadMagic { what, found })
    }
}

/// [`FormatError::BadChecksum`] unless field `sum` of `buf` holds the checksum of every
/// byte before it.
pub(crate) fn sealed(buf: &[u8], what: &'static str, sum: FieldLayout) -> Result<(), FormatError> {
    let stored = get(buf, sum);
    let computed = checksum(&buf[..sum.offset]);
    if stored == computed {
        Ok(())
    } else {
        Err(FormatError::BadChecksum {
            what,
            stored,
            computed,
        })
    }
}

/// [`FormatError::ReservedNotZero`] unless every byte of field `f` of `buf` is zero.
#[inline]
pub(crate) fn reserved_zero(
    buf: &[u8],
    what: &'static str,
    f: FieldLayout,
) -> Result<(), FormatError> {
    if bytes(buf, f).iter().all(|&b| b == 0) {
        Ok(())
    } else {
        Err(FormatError::ReservedNotZero {
            what,
            field: f.name,
        })
    }
}

/// A [`FormatError::BadField`].
pub(crate) fn bad(what: &'static str, field: &'static str, value: u64) -> FormatError {
    FormatError::BadField { what, field, value }
}
