//! Fuzz what an object-backed volume reads from the store: roots, map pages and block
//! records never panic; a root that decodes re-encodes and decodes to itself; inputs are
//! also sealed with a correct envelope checksum so the fuzzer reaches the body's checks.
#![no_main]

use larch_object::layout::{self, Kind, Root};
use libfuzzer_sys::fuzz_target;

fn root(bytes: &[u8]) {
    if let Ok(root) = Root::decode(bytes) {
        let again = Root::decode(&root.encode())
            .unwrap_or_else(|err| panic!("a decoded root re-encodes to bytes it refuses: {err}"));
        assert_eq!(again, root);
        // Geometry that decoded is usable without overflow.
        let _ = root.blocks_of(root.objects().saturating_sub(1));
    }
}

fuzz_target!(|data: &[u8]| {
    root(data);
    root(&layout::seal(Kind::Root, data));
    let page = layout::seal(Kind::MapPage, data);
    let _ = layout::decode_page(&page, layout::page_checksum(&page));
    let _ = layout::decode_page(data, 0);
    if let Some((&first, rest)) = data.split_first() {
        let block_bytes = 512usize << (first % 4);
        let _ = layout::verify_record(rest, block_bytes, 1, 2, 3);
    }
    let _ = layout::parse_name(&String::from_utf8_lossy(data));
});
