//! Fuzz the NBD handshake: any byte stream fed to `Negotiation::step` must never panic,
//! never consume past its input, and only ever write well-formed option replies (or the
//! 10/134-byte `EXPORT_NAME` answer that ends negotiation).
#![no_main]

use larch_nbd::handshake::{ExportInfo, Negotiation, NegotiationLimits, Step};
use larch_nbd::proto::OPTION_REPLY_MAGIC;
use larch_nbd::{BlockSizes, Features};
use libfuzzer_sys::fuzz_target;

fn exports() -> Vec<ExportInfo> {
    vec![
        ExportInfo {
            name: "disk".into(),
            description: "fuzz disk".into(),
            size_bytes: 1 << 30,
            features: Features::default(),
            block_sizes: BlockSizes::default(),
        },
        ExportInfo {
            name: String::new(),
            description: String::new(),
            size_bytes: 512,
            features: Features {
                read_only: true,
                ..Features::default()
            },
            block_sizes: BlockSizes {
                minimum_bytes: 512,
                preferred_bytes: 4096,
                maximum_bytes: 1 << 20,
            },
        },
    ]
}

/// Checks that `out` is a sequence of whole option replies; returns false otherwise.
fn option_replies_well_formed(mut out: &[u8]) -> bool {
    while !out.is_empty() {
        if out.len() < 20 || out[0..8] != OPTION_REPLY_MAGIC.to_be_bytes() {
            return false;
        }
        let len = u32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
        if out.len() < 20 + len {
            return false;
        }
        out = &out[20 + len..];
    }
    true
}

fuzz_target!(|data: &[u8]| {
    let exports = exports();
    let mut negotiation = Negotiation::new(
        &exports,
        NegotiationLimits {
            max_option_bytes: 8192,
        },
    );
    let mut pos = 0;
    loop {
        let mut out = Vec::new();
        let step = negotiation.step(&data[pos..], &mut out);
        match step {
            Ok(Step::Consumed(n)) => {
                assert!(
                    n > 0 && pos + n <= data.len(),
                    "consumed {n} at {pos} of {}",
                    data.len()
                );
                assert!(option_replies_well_formed(&out), "bad replies {out:?}");
                pos += n;
            }
            Ok(Step::NeedMore(total)) => {
                assert!(total > data.len() - pos);
                assert!(out.is_empty());
                return;
            }
            Ok(Step::Done { consumed, .. }) => {
                assert!(pos + consumed <= data.len());
                // Either GO (option replies) or EXPORT_NAME (size + flags [+ zeroes]).
                assert!(
                    option_replies_well_formed(&out) || out.len() == 10 || out.len() == 134,
                    "bad final answer {out:?}"
                );
                return;
            }
            Ok(Step::Abort { consumed }) => {
                assert!(pos + consumed <= data.len());
                assert!(option_replies_well_formed(&out));
                return;
            }
            Ok(Step::StartTls { .. }) => panic!("STARTTLS accepted by a server without TLS"),
            Err(_) => {
                assert!(out.is_empty(), "errors close without replying");
                return;
            }
        }
    }
});
