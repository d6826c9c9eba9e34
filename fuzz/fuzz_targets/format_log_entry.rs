//! Fuzz `LogEntryPhys::decode`: never panics, and whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use larch_format::LogEntryPhys;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(entry) = LogEntryPhys::decode(data) {
        assert_eq!(&entry.encode()[..], &data[..LogEntryPhys::SIZE]);
    }
});
