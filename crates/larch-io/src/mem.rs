//! An in-memory device: every write is durable at once.

use std::sync::RwLock;

use crate::{BlockDevice, IoError, check_range};

/// A device backed by a byte vector. Writes are immediately "durable"; use
/// [`crate::FaultyDevice`] to model a volatile write cache.
#[derive(Debug)]
pub struct MemDevice {
    bytes: RwLock<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `len_bytes`.
    pub fn new(len_bytes: u64) -> Self {
        let len = usize::try_from(len_bytes).expect("memory device larger than the address space");
        Self {
            bytes: RwLock::new(vec![0; len]),
        }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self {
            bytes: RwLock::new(bytes),
        }
    }

    /// A copy of the whole device.
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().expect("lock poisoned").clone()
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> Result<(), IoError> {
        let bytes = self.bytes.read().expect("lock poisoned");
        check_range("read", offset_bytes, buf.len(), bytes.len() as u64)?;
        let start = offset_bytes as usize;
        buf.copy_from_slice(&bytes[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> Result<(), IoError> {
        let mut bytes = self.bytes.write().expect("lock poisoned");
        check_range("write", offset_bytes, buf.len(), bytes.len() as u64)?;
        let start = offset_bytes as usize;
        bytes[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> Result<(), IoError> {
        Ok(())
    }

    fn len_bytes(&self) -> u64 {
        self.bytes.read().expect("lock poisoned").len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_and_range_errors() {
        let dev = MemDevice::new(4096);
        dev.write_at(b"hello", 100).unwrap();
        let mut buf = [0u8; 7];
        dev.read_at(&mut buf, 99).unwrap();
        assert_eq!(&buf, b"\0hello\0");
        assert!(matches!(
            dev.read_at(&mut buf, 4090),
            Err(IoError::OutOfRange { .. })
        ));
        assert!(matches!(
            dev.write_at(b"x", u64::MAX),
            Err(IoError::OutOfRange { .. })
        ));
        assert_eq!(dev.len_bytes(), 4096);
    }
}
