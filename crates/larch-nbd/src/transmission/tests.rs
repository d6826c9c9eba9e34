//! Request validation and reply encoding tests.

use proptest::prelude::*;

use super::*;

fn ctx() -> TransmissionContext {
    TransmissionContext {
        size_bytes: 1 << 20,
        features: Features::default(),
        block_sizes: BlockSizes::default(),
        structured_replies: true,
        base_allocation: true,
    }
}

fn hdr(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
    RequestHeader {
        flags,
        command,
        cookie: 0x1122_3344_5566_7788,
        offset,
        length,
    }
}

#[test]
fn header_round_trip_and_bad_magic() {
    let h = hdr(cmd::WRITE, cmd_flag::FUA, 4096, 512);
    let bytes = h.encode();
    assert_eq!(RequestHeader::parse(&bytes), Ok(h));
    assert_eq!(h.payload_len_bytes(), 512);
    assert_eq!(hdr(cmd::READ, 0, 0, 512).payload_len_bytes(), 0);
    let mut bad = bytes;
    bad[0] = 0;
    assert_eq!(
        RequestHeader::parse(&bad),
        Err(BadRequestMagic(0x0060_9513))
    );
}

#[test]
fn ranges_map_to_the_spec_errors() {
    let c = ctx();
    let end = c.size_bytes;
    assert_eq!(validate(&hdr(cmd::READ, 0, end, 1), &c), Err(Errno::Inval));
    assert_eq!(
        validate(&hdr(cmd::READ, 0, u64::MAX, 2), &c),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::WRITE, 0, end - 1, 2), &c),
        Err(Errno::NoSpc)
    );
    assert_eq!(
        validate(&hdr(cmd::WRITE_ZEROES, 0, end, 1), &c),
        Err(Errno::NoSpc)
    );
    assert_eq!(validate(&hdr(cmd::TRIM, 0, end, 1), &c), Err(Errno::Inval));
    assert_eq!(
        validate(&hdr(cmd::BLOCK_STATUS, 0, end, 1), &c),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::READ, 0, end, 0), &c),
        Ok(Request::Read {
            offset: end,
            length: 0,
            df: false
        })
    );
    assert_eq!(
        validate(&hdr(cmd::READ, 0, 0, (32 << 20) + 1), &c),
        Err(Errno::Inval)
    );
}

#[test]
fn flags_and_commands() {
    let c = ctx();
    assert_eq!(validate(&hdr(99, 0, 0, 0), &c), Err(Errno::Inval));
    assert_eq!(
        validate(&hdr(cmd::READ, 1 << 9, 0, 1), &c),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::WRITE, cmd_flag::DF, 0, 1), &c),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::READ, cmd_flag::REQ_ONE, 0, 1), &c),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::READ, cmd_flag::DF | cmd_flag::FUA, 0, 1), &c),
        Ok(Request::Read {
            offset: 0,
            length: 1,
            df: true
        })
    );
    let no_sr = TransmissionContext {
        structured_replies: false,
        base_allocation: false,
        ..c
    };
    assert_eq!(
        validate(&hdr(cmd::READ, cmd_flag::DF, 0, 1), &no_sr),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(&hdr(cmd::BLOCK_STATUS, 0, 0, 1), &no_sr),
        Err(Errno::Inval)
    );
    assert_eq!(
        validate(
            &hdr(
                cmd::WRITE_ZEROES,
                cmd_flag::NO_HOLE | cmd_flag::FAST_ZERO,
                0,
                8
            ),
            &c
        ),
        Ok(Request::WriteZeroes {
            offset: 0,
            length: 8,
            flags: ZeroFlags {
                may_trim: false,
                fast_only: true,
                fua: false
            }
        })
    );
    assert_eq!(validate(&hdr(cmd::FLUSH, 0, 1, 0), &c), Err(Errno::Inval));
    assert_eq!(
        validate(&hdr(cmd::FLUSH, cmd_flag::FUA, 0, 0), &c),
        Ok(Request::Flush)
    );
    assert_eq!(validate(&hdr(cmd::DISC, 0, 0, 0), &c), Ok(Request::Disc));
    assert_eq!(
        validate(&hdr(cmd::BLOCK_STATUS, 0, 0, 0), &c),
        Err(Errno::Inval)
    );
}

#[test]
fn read_only_and_alignment() {
    let mut c = ctx();
    c.features.read_only = true;
    assert_eq!(validate(&hdr(cmd::WRITE, 0, 0, 1), &c), Err(Errno::Perm));
    assert_eq!(validate(&hdr(cmd::TRIM, 0, 0, 1), &c), Err(Errno::Perm));
    assert!(validate(&hdr(cmd::READ, 0, 0, 1), &c).is_ok());
    let mut c = ctx();
    c.block_sizes.minimum_bytes = 512;
    assert_eq!(validate(&hdr(cmd::READ, 0, 1, 512), &c), Err(Errno::Inval));
    assert_eq!(
        validate(&hdr(cmd::WRITE, 0, 512, 100), &c),
        Err(Errno::Inval)
    );
    assert!(validate(&hdr(cmd::WRITE, 0, 512, 1024), &c).is_ok());
}

#[test]
fn simple_read_reply_bytes() {
    let f = read_frame(7, 0, ReadData::from_bytes(vec![1u8, 2, 3]), false, false);
    let wire: Vec<u8> = f.parts.concat();
    assert_eq!(&wire[0..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(&wire[4..8], &[0, 0, 0, 0]);
    assert_eq!(&wire[8..16], &7u64.to_be_bytes());
    assert_eq!(&wire[16..], &[1, 2, 3]);
}

#[test]
fn structured_read_reply_uses_holes_unless_df() {
    let data = ReadData {
        segments: vec![
            ReadSegment::Data(Bytes::from_static(b"ab")),
            ReadSegment::Zeroes(4),
            ReadSegment::Data(Bytes::from_static(b"c")),
        ],
    };
    let wire: Vec<u8> = read_frame(9, 100, data.clone(), true, false).parts.concat();
    // chunk 1: OFFSET_DATA at 100, "ab"
    assert_eq!(&wire[4..6], &0u16.to_be_bytes());
    assert_eq!(&wire[6..8], &chunk::OFFSET_DATA.to_be_bytes());
    assert_eq!(&wire[16..20], &10u32.to_be_bytes());
    assert_eq!(&wire[20..28], &100u64.to_be_bytes());
    assert_eq!(&wire[28..30], b"ab");
    // chunk 2: OFFSET_HOLE at 102, length 4
    let c2 = &wire[30..];
    assert_eq!(&c2[6..8], &chunk::OFFSET_HOLE.to_be_bytes());
    assert_eq!(&c2[20..28], &102u64.to_be_bytes());
    assert_eq!(&c2[28..32], &4u32.to_be_bytes());
    // chunk 3: OFFSET_DATA at 106, "c", DONE
    let c3 = &c2[32..];
    assert_eq!(&c3[4..6], &chunk::FLAG_DONE.to_be_bytes());
    assert_eq!(&c3[20..28], &106u64.to_be_bytes());
    assert_eq!(&c3[28..], b"c");

    let df: Vec<u8> = read_frame(9, 100, data, true, true).parts.concat();
    assert_eq!(&df[4..6], &chunk::FLAG_DONE.to_be_bytes());
    assert_eq!(&df[16..20], &(8u32 + 7).to_be_bytes());
    assert_eq!(&df[28..], b"ab\0\0\0\0c");
}

/// Neighbouring data segments (an export's blocks) go out as one chunk, holes between
/// them split it: the spec asks servers to keep chunks few.
#[test]
fn structured_read_reply_joins_neighbouring_data() {
    let data = ReadData {
        segments: vec![
            ReadSegment::Data(Bytes::from_static(b"ab")),
            ReadSegment::Data(Bytes::from_static(b"cd")),
            ReadSegment::Data(Bytes::from_static(b"e")),
            ReadSegment::Zeroes(3),
            ReadSegment::Data(Bytes::from_static(b"f")),
            ReadSegment::Data(Bytes::from_static(b"g")),
        ],
    };
    let wire: Vec<u8> = read_frame(9, 100, data, true, false).parts.concat();
    // chunk 1: OFFSET_DATA at 100, "abcde"
    assert_eq!(&wire[4..6], &0u16.to_be_bytes());
    assert_eq!(&wire[6..8], &chunk::OFFSET_DATA.to_be_bytes());
    assert_eq!(&wire[16..20], &(8u32 + 5).to_be_bytes());
    assert_eq!(&wire[20..28], &100u64.to_be_bytes());
    assert_eq!(&wire[28..33], b"abcde");
    // chunk 2: OFFSET_HOLE at 105, length 3
    let c2 = &wire[33..];
    assert_eq!(&c2[6..8], &chunk::OFFSET_HOLE.to_be_bytes());
    assert_eq!(&c2[20..28], &105u64.to_be_bytes());
    assert_eq!(&c2[28..32], &3u32.to_be_bytes());
    // chunk 3: OFFSET_DATA at 108, "fg", DONE, and nothing after it
    let c3 = &c2[32..];
    assert_eq!(&c3[4..6], &chunk::FLAG_DONE.to_be_bytes());
    assert_eq!(&c3[6..8], &chunk::OFFSET_DATA.to_be_bytes());
    assert_eq!(&c3[20..28], &108u64.to_be_bytes());
    assert_eq!(&c3[28..], b"fg");
}

#[test]
fn empty_structured_read_is_a_none_chunk() {
    let wire: Vec<u8> = read_frame(1, 0, ReadData::default(), true, false)
        .parts
        .concat();
    assert_eq!(wire.len(), CHUNK_HEADER_LEN_BYTES);
    assert_eq!(&wire[4..6], &chunk::FLAG_DONE.to_be_bytes());
    assert_eq!(&wire[6..8], &chunk::NONE.to_be_bytes());
}

#[test]
fn error_replies() {
    let s: Vec<u8> = error_frame(3, Errno::Io, false).parts.concat();
    assert_eq!(s, simple_reply(3, 5).to_vec());
    let c: Vec<u8> = error_frame(3, Errno::Inval, true).parts.concat();
    assert_eq!(&c[6..8], &chunk::ERROR.to_be_bytes());
    assert_eq!(&c[16..20], &6u32.to_be_bytes());
    assert_eq!(&c[20..24], &22u32.to_be_bytes());
}

#[test]
fn extents_are_merged_clipped_and_limited() {
    let e = |length_bytes, flags| Extent {
        length_bytes,
        flags,
    };
    let ex = [e(10, 0), e(5, 0), e(0, 3), e(100, 3 | 0x80), e(1 << 40, 0)];
    assert_eq!(wire_extents(&ex, 50, false), Some(vec![(15, 0), (35, 3)]));
    assert_eq!(wire_extents(&ex, 50, true), Some(vec![(15, 0)]));
    assert_eq!(
        wire_extents(&ex, u32::MAX, false).unwrap().last(),
        Some(&(u32::MAX - 115, 0))
    );
    assert_eq!(wire_extents(&[e(0, 0)], 50, false), None);
    let many: Vec<Extent> = (0..5000).map(|i| e(1, i % 2)).collect();
    assert_eq!(
        wire_extents(&many, 5000, false).unwrap().len(),
        MAX_EXTENTS_PER_REPLY
    );
    let f: Vec<u8> = block_status_frame(4, 1, &[(15, 0), (35, 3)]).parts.concat();
    assert_eq!(&f[16..20], &20u32.to_be_bytes());
    assert_eq!(&f[20..24], &1u32.to_be_bytes());
    assert_eq!(
        &f[24..],
        &[0, 0, 0, 15, 0, 0, 0, 0, 0, 0, 0, 35, 0, 0, 0, 3]
    );
}

proptest! {
    /// Validation never panics and accepted requests are always in range and aligned.
    #[test]
    fn validation_accepts_only_sane_requests(
        command in 0u16..10, flags in any::<u16>(), offset in any::<u64>(), length in any::<u32>(),
        min_shift in 0u32..13, read_only in any::<bool>(), sr in any::<bool>(),
    ) {
        let mut c = ctx();
        c.block_sizes.minimum_bytes = 1 << min_shift;
        c.features.read_only = read_only;
        c.structured_replies = sr;
        c.base_allocation = sr;
        let h = hdr(command, flags, offset % (2 << 20), length % (4 << 20));
        if let Ok(req) = validate(&h, &c) {
            let (off, len) = match req {
                Request::Read { offset, length, .. }
                | Request::Write { offset, length, .. }
                | Request::Trim { offset, length, .. }
                | Request::WriteZeroes { offset, length, .. }
                | Request::Cache { offset, length }
                | Request::BlockStatus { offset, length, .. } => (offset, length),
                Request::Disc | Request::Flush => return Ok(()),
            };
            prop_assert!(off + u64::from(len) <= c.size_bytes);
            prop_assert_eq!(off % u64::from(c.block_sizes.minimum_bytes), 0);
            let reads_only = matches!(
                req,
                Request::Read { .. } | Request::Cache { .. } | Request::BlockStatus { .. }
            );
            prop_assert!(!read_only || reads_only);
        }
    }

    /// Every read frame carries exactly the requested bytes, whatever the segmentation.
    #[test]
    fn read_frames_carry_the_data(
        segs in proptest::collection::vec((any::<bool>(), 0u32..300), 0..8), sr in any::<bool>(), df in any::<bool>(),
    ) {
        let mut expect = Vec::new();
        let segments: Vec<ReadSegment> = segs.iter().enumerate().map(|(i, (data, n))| {
            if *data {
                let bytes = vec![i as u8 + 1; *n as usize];
                expect.extend_from_slice(&bytes);
                ReadSegment::Data(Bytes::from(bytes))
            } else {
                expect.extend(std::iter::repeat_n(0u8, *n as usize));
                ReadSegment::Zeroes(*n)
            }
        }).collect();
        let wire: Vec<u8> = read_frame(5, 1000, ReadData { segments }, sr, df).parts.concat();
        let got = decode_read(&wire, sr, 1000, expect.len());
        prop_assert_eq!(got, expect);
    }
}

/// A minimal client-side decoder for read replies, for the property above.
fn decode_read(mut wire: &[u8], structured: bool, offset: u64, len: usize) -> Vec<u8> {
    if !structured {
        assert_eq!(&wire[0..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
        return wire[16..].to_vec();
    }
    let mut buf = vec![0xeeu8; len];
    loop {
        let flags = u16::from_be_bytes([wire[4], wire[5]]);
        let ty = u16::from_be_bytes([wire[6], wire[7]]);
        let clen = u32::from_be_bytes([wire[16], wire[17], wire[18], wire[19]]) as usize;
        let body = &wire[20..20 + clen];
        match ty {
            chunk::OFFSET_DATA => {
                let at = (u64::from_be_bytes(body[0..8].try_into().unwrap()) - offset) as usize;
                buf[at..at + clen - 8].copy_from_slice(&body[8..]);
            }
            chunk::OFFSET_HOLE => {
                let at = (u64::from_be_bytes(body[0..8].try_into().unwrap()) - offset) as usize;
                let n = u32::from_be_bytes(body[8..12].try_into().unwrap()) as usize;
                buf[at..at + n].fill(0);
            }
            chunk::NONE => {}
            other => panic!("unexpected chunk type {other}"),
        }
        wire = &wire[20 + clen..];
        if flags & chunk::FLAG_DONE != 0 {
            assert!(wire.is_empty());
            return buf;
        }
    }
}
