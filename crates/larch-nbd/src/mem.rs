//! A RAM-backed export (the `nbdkit memory` of larch), for tests and benchmarks.

use std::sync::RwLock;

use bytes::Bytes;

use crate::export::{Errno, Export, ExportResult, Features, ReadData, ZeroFlags};

/// An export whose bytes live in one vector behind a reader-writer lock. Writes are
/// "durable" as soon as they return, so flush is a no-op and multi-conn is safe.
#[derive(Debug)]
pub struct MemExport {
    data: RwLock<Vec<u8>>,
    read_only: bool,
}

impl MemExport {
    /// A zero-filled export of `size_bytes`.
    pub fn new(size_bytes: usize) -> MemExport {
        MemExport::from_vec(vec![0u8; size_bytes], false)
    }

    /// An export holding `data`.
    pub fn from_vec(data: Vec<u8>, read_only: bool) -> MemExport {
        MemExport {
            data: RwLock::new(data),
            read_only,
        }
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn range(offset: u64, length: u32) -> ExportResult<std::ops::Range<usize>> {
        let start = usize::try_from(offset).map_err(|_| Errno::Inval)?;
        Ok(start..start + length as usize)
    }
}

impl Export for MemExport {
    fn size_bytes(&self) -> u64 {
        self.data.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    fn features(&self) -> Features {
        Features {
            read_only: self.read_only,
            ..Features::default()
        }
    }

    async fn read(&self, offset: u64, length: u32) -> ExportResult<ReadData> {
        let range = Self::range(offset, length)?;
        let data = self.data.read().unwrap_or_else(|e| e.into_inner());
        let slice = data.get(range).ok_or(Errno::Inval)?;
        Ok(ReadData::from_bytes(Bytes::copy_from_slice(slice)))
    }

    async fn write(&self, offset: u64, data: Bytes, _fua: bool) -> ExportResult<()> {
        let range = Self::range(offset, data.len() as u32)?;
        let mut store = self.data.write().unwrap_or_else(|e| e.into_inner());
        store
            .get_mut(range)
            .ok_or(Errno::NoSpc)?
            .copy_from_slice(&data);
        Ok(())
    }

    async fn trim(&self, offset: u64, length: u32, _fua: bool) -> ExportResult<()> {
        self.write_zeroes(offset, length, ZeroFlags::default())
            .await
    }

    async fn write_zeroes(&self, offset: u64, length: u32, _flags: ZeroFlags) -> ExportResult<()> {
        let range = Self::range(offset, length)?;
        let mut store = self.data.write().unwrap_or_else(|e| e.into_inner());
        store.get_mut(range).ok_or(Errno::NoSpc)?.fill(0);
        Ok(())
    }
}
