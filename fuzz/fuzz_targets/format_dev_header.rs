//! Fuzz `DevHeaderPhys::decode`: never panics, and whatever decodes re-encodes to the
//! same bytes. Inputs also get their checksum repaired so the fuzzer reaches the field
//! checks behind it.
#![no_main]

use larch_format::{DevHeaderPhys, checksum};
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    if let Ok(header) = DevHeaderPhys::decode(bytes) {
        assert_eq!(&header.encode()[..], &bytes[..DevHeaderPhys::SIZE]);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= DevHeaderPhys::SIZE {
        let mut fixed = data[..DevHeaderPhys::SIZE].to_vec();
        let sum = checksum(&fixed[..504]);
        fixed[504..].copy_from_slice(&sum.to_le_bytes());
        check(&fixed);
    }
});
