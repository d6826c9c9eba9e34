//! Fuzz `LogBlockPtrPhys::decode`: never panics, and whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use larch_format::LogBlockPtrPhys;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(ptr) = LogBlockPtrPhys::decode(data) {
        assert_eq!(&ptr.encode()[..], &data[..LogBlockPtrPhys::SIZE]);
    }
});
