//! Fuzz a whole NBD session through the codec: the byte stream a client would send is fed
//! to the handshake state machine, then split into requests (payloads skipped exactly as
//! the server does) and validated. Nothing may panic, and the stream position must always
//! advance.
#![no_main]

use larch_nbd::handshake::{ExportInfo, Negotiation, NegotiationLimits, Step};
use larch_nbd::proto::REQUEST_HEADER_LEN_BYTES;
use larch_nbd::transmission::{Request, RequestHeader, TransmissionContext, validate};
use larch_nbd::{BlockSizes, Features};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let exports = vec![ExportInfo {
        name: String::new(),
        description: "fuzz".into(),
        size_bytes: 1 << 24,
        features: Features::default(),
        block_sizes: BlockSizes::default(),
    }];
    let mut negotiation = Negotiation::new(&exports, NegotiationLimits::default());
    let mut pos = 0;
    let negotiated = loop {
        let mut out = Vec::new();
        match negotiation.step(&data[pos..], &mut out) {
            Ok(Step::Consumed(n)) => pos += n,
            Ok(Step::Done {
                consumed,
                negotiated,
            }) => {
                pos += consumed;
                break negotiated;
            }
            Ok(Step::StartTls { .. }) => panic!("STARTTLS accepted by a server without TLS"),
            Ok(Step::NeedMore(_)) | Ok(Step::Abort { .. }) | Err(_) => return,
        }
    };
    let info = &exports[negotiated.export_index];
    let ctx = TransmissionContext {
        size_bytes: info.size_bytes,
        features: info.features,
        block_sizes: info.block_sizes,
        structured_replies: negotiated.structured_replies,
        base_allocation: negotiated.base_allocation,
    };
    while let Some(head) = data.get(pos..pos + REQUEST_HEADER_LEN_BYTES) {
        let Ok(hdr) = RequestHeader::parse(head.try_into().unwrap()) else {
            return; // bad magic: the server disconnects
        };
        pos += REQUEST_HEADER_LEN_BYTES;
        let checked = validate(&hdr, &ctx);
        // The payload is consumed whether or not the request is valid.
        pos = pos.saturating_add(hdr.payload_len_bytes() as usize);
        if let Ok(Request::Disc) = checked {
            return;
        }
        if let Ok(Request::BlockStatus { .. }) = checked {
            assert!(negotiated.base_allocation);
        }
    }
});
