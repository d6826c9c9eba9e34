//! A [`Volume`] served over NBD: the one place the engine meets `larch_nbd`. The NBD
//! server validates every request (range, alignment, read-only, flags) before it gets
//! here; errors map to the NBD errno a client understands.

use bytes::Bytes;
use larch_nbd::proto::{STATE_HOLE, STATE_ZERO};
use larch_nbd::{
    BlockSizes, Errno, Export, ExportResult, Extent, Features, ReadData, ReadSegment, ZeroFlags,
};

use crate::arc::is_shared_zeros;
use crate::backing::ZeroMode;
use crate::volume::{Volume, VolumeError};

impl From<VolumeError> for Errno {
    fn from(err: VolumeError) -> Errno {
        match err {
            VolumeError::Io(_) => Errno::Io,
            VolumeError::OutOfRange { .. } => Errno::Inval,
            VolumeError::ReadOnly => Errno::Perm,
        }
    }
}

/// The errno of a failed write: as [`Errno::from`], but a write past the end is out of
/// space, as the NBD spec asks (the server checks ranges against the size it told the
/// client; a connection made before a shrink gets here with writes past the new end).
fn write_errno(err: VolumeError) -> Errno {
    match err {
        VolumeError::OutOfRange { .. } => Errno::NoSpc,
        err => err.into(),
    }
}

impl Export for Volume {
    fn size_bytes(&self) -> u64 {
        self.info().size_bytes
    }

    fn block_sizes(&self) -> BlockSizes {
        BlockSizes {
            minimum_bytes: 1,
            preferred_bytes: self.info().block_bytes.max(4096),
            maximum_bytes: 32 << 20,
        }
    }

    fn features(&self) -> Features {
        Features {
            read_only: self.read_only(),
            flush: true,
            trim: true,
            write_zeroes: true,
            // Asked per request: a store that cannot zero in place refuses FAST_ZERO.
            fast_zero: true,
            cache: true,
            block_status: true,
            // A FLUSH makes every write the pool acknowledged durable (it commits the whole
            // intent log or syncs the open TXG), whichever connection sent it.
            multi_conn: true,
            rotational: false,
        }
    }

    async fn read(&self, offset: u64, length: u32) -> ExportResult<ReadData> {
        let pieces = Volume::read(self, offset, length).await?;
        // A zeroed block's bytes go as a run of zeros (a hole in a structured reply).
        let segment = |piece: Bytes| match is_shared_zeros(&piece) {
            true => ReadSegment::Zeroes(piece.len() as u32),
            false => ReadSegment::Data(piece),
        };
        Ok(ReadData {
            segments: pieces.into_iter().map(segment).collect(),
        })
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> ExportResult<()> {
        // The payload is copied into the blocks' own buffers: the request's buffer is
        // freed when this returns, whatever stays cached.
        Volume::write(self, offset, &data, fua)
            .await
            .map_err(write_errno)
    }

    fn idle_yield(&self) -> bool {
        self.idle_yield()
    }

    fn write_chunk_bytes(&self) -> u32 {
        self.info().block_bytes
    }

    async fn write_chunks(&self, offset: u64, chunks: Vec<Bytes>, fua: bool) -> ExportResult<()> {
        // One buffer per block from the server: whole blocks become their ARC buffers
        // with no copy; the pieces of partial ones are merged as in `write`.
        Volume::write_chunks(self, offset, &chunks, fua)
            .await
            .map_err(write_errno)
    }

    async fn flush(&self) -> ExportResult<()> {
        Ok(Volume::flush(self).await?)
    }

    async fn trim(&self, offset: u64, length: u32, fua: bool) -> ExportResult<()> {
        Ok(Volume::write_zeroes(self, offset, length, ZeroMode::Punch, fua).await?)
    }

    async fn write_zeroes(&self, offset: u64, length: u32, flags: ZeroFlags) -> ExportResult<()> {
        // FAST_ZERO: refused before anything is done when the store would be written.
        if flags.fast_only && !self.zeroes_fast() {
            return Err(Errno::NotSup);
        }
        let mode = if flags.may_trim {
            ZeroMode::Punch
        } else {
            ZeroMode::Allocate
        };
        Volume::write_zeroes(self, offset, length, mode, flags.fua)
            .await
            .map_err(write_errno)
    }

    async fn cache(&self, offset: u64, length: u32) -> ExportResult<()> {
        Ok(Volume::cache(self, offset, length).await?)
    }

    async fn block_status(&self, offset: u64, length: u32) -> ExportResult<Vec<Extent>> {
        let runs = Volume::allocation(self, offset, length).await?;
        Ok(runs
            .into_iter()
            .map(|run| Extent {
                length_bytes: run.length_bytes,
                flags: if run.hole { STATE_HOLE | STATE_ZERO } else { 0 },
            })
            .collect())
    }
}
