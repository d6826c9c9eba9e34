//! Fuzz request parsing, validation and reply encoding: arbitrary 28-byte headers
//! against an arbitrary connection context. Accepted requests must be in range and
//! aligned; replies built for them must have the lengths their headers announce.
#![no_main]

use arbitrary::Arbitrary;
use larch_nbd::transmission::{
    Request, RequestHeader, TransmissionContext, read_frame, validate, wire_extents,
};
use larch_nbd::{BlockSizes, Bytes, Extent, Features, ReadData, ReadSegment};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    header: [u8; 28],
    size_bytes: u64,
    min_shift: u8,
    read_only: bool,
    structured: bool,
    base_allocation: bool,
    segments: Vec<(bool, u16)>,
    extents: Vec<(u64, u32)>,
}

fuzz_target!(|input: Input| {
    let Ok(hdr) = RequestHeader::parse(&input.header) else {
        return;
    };
    assert_eq!(RequestHeader::parse(&hdr.encode()), Ok(hdr));
    let min = 1u32 << (input.min_shift % 13);
    let ctx = TransmissionContext {
        size_bytes: input.size_bytes,
        features: Features {
            read_only: input.read_only,
            ..Features::default()
        },
        block_sizes: BlockSizes {
            minimum_bytes: min,
            preferred_bytes: 4096.max(min),
            maximum_bytes: 32 << 20,
        },
        structured_replies: input.structured,
        base_allocation: input.base_allocation && input.structured,
    };
    let Ok(request) = validate(&hdr, &ctx) else {
        return;
    };
    match request {
        Request::Read { offset, length, df } => {
            assert!(offset + u64::from(length) <= ctx.size_bytes);
            assert_eq!(offset % u64::from(min), 0);
            // Any segmentation of the right total length encodes to a frame carrying it.
            let mut segments: Vec<ReadSegment> = Vec::new();
            let mut left = length.min(1 << 16);
            for (data, n) in &input.segments {
                let n = u32::from(*n).min(left);
                left -= n;
                segments.push(if *data {
                    ReadSegment::Data(Bytes::from(vec![0xa5; n as usize]))
                } else {
                    ReadSegment::Zeroes(n)
                });
            }
            if left > 0 {
                segments.push(ReadSegment::Zeroes(left));
            }
            let total: usize = segments.iter().map(ReadSegment::len_bytes).sum();
            let frame = read_frame(
                hdr.cookie,
                offset,
                ReadData { segments },
                ctx.structured_replies,
                df,
            );
            let overhead = frame.len_bytes() - total.min(frame.len_bytes());
            assert!(frame.len_bytes() >= 16, "a reply has at least a header");
            assert!(overhead < 1 << 20);
        }
        Request::BlockStatus {
            length, req_one, ..
        } => {
            let extents: Vec<Extent> = input
                .extents
                .iter()
                .map(|&(length_bytes, flags)| Extent {
                    length_bytes,
                    flags,
                })
                .collect();
            if let Some(wire) = wire_extents(&extents, length, req_one) {
                let sum: u64 = wire.iter().map(|&(l, _)| u64::from(l)).sum();
                assert!(sum <= u64::from(length) && sum > 0);
                assert!(!req_one || wire.len() == 1);
                assert!(wire.iter().all(|&(l, f)| l > 0 && f & !3 == 0));
            }
        }
        Request::Write { .. } | Request::Trim { .. } | Request::WriteZeroes { .. } => {
            assert!(!ctx.features.read_only);
        }
        Request::Disc | Request::Flush | Request::Cache { .. } => {}
    }
});
