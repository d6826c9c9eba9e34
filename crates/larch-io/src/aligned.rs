//! A heap buffer whose address is aligned for `O_DIRECT`.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// The alignment of every [`AlignedBuf`]: 4 KiB satisfies `O_DIRECT` on 512-byte and
/// 4 KiB-sector devices alike.
pub const BUF_ALIGN_BYTES: usize = 4096;

/// A fixed-size byte buffer aligned to [`BUF_ALIGN_BYTES`], zero-initialised unless made
/// by the unsafe [`AlignedBuf::uninit`] for a read that fills it.
///
/// `O_DIRECT` needs the memory address, the file offset and the length aligned; this type
/// takes care of the first. It dereferences to `[u8]`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only give out &[u8], like a Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `len` zero bytes. A zero length allocates nothing.
    pub fn zeroed(len: usize) -> Self {
        Self::allocate(len, true)
    }

    /// Allocates `len` bytes without initialising them, for a device read that fills them
    /// (saves zeroing memory the read overwrites).
    ///
    /// # Safety
    /// Nothing may read the buffer (through `Deref`, `DerefMut` or `AsRef`) before all
    /// `len` bytes are written through [`AlignedBuf::as_mut_ptr`]; a buffer whose read
    /// failed or came back short must only be dropped.
    pub unsafe fn uninit(len: usize) -> Self {
        Self::allocate(len, false)
    }

    fn allocate(len: usize, zeroed: bool) -> Self {
        if len == 0 {
            return Self {
                ptr: NonNull::dangling(),
                len: 0,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: layout has a non-zero size.
        let raw = unsafe {
            if zeroed {
                alloc_zeroed(layout)
            } else {
                alloc(layout)
            }
        };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }

    /// The address of the first byte, for a device read into the buffer. Unlike the
    /// slice's `as_mut_ptr` it makes no reference to the bytes (they may be
    /// uninitialised).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `bytes` into a new aligned buffer of `len` bytes (`len >= bytes.len()`),
    /// zero-filling the rest.
    pub fn from_slice_padded(bytes: &[u8], len: usize) -> Self {
        assert!(
            len >= bytes.len(),
            "padded length {len} < data {}",
            bytes.len()
        );
        let mut buf = Self::zeroed(len);
        buf[..bytes.len()].copy_from_slice(bytes);
        buf
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUF_ALIGN_BYTES).expect("buffer size overflows a Layout")
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `zeroed` with this same layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (zeroed, or filled as `uninit`
        // requires), or dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [1usize, 511, 4096, 70000] {
            let buf = AlignedBuf::zeroed(len);
            assert_eq!(buf.as_ptr() as usize % BUF_ALIGN_BYTES, 0, "len {len}");
            assert_eq!(buf.len(), len);
            assert!(buf.iter().all(|&b| b == 0));
        }
        let padded = AlignedBuf::from_slice_padded(b"abc", 8);
        assert_eq!(&padded[..], b"abc\0\0\0\0\0");
        assert!(AlignedBuf::zeroed(0).is_empty());
    }
}
