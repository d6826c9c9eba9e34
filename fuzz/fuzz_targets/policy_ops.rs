//! Random operation sequences against the ARC: any byte string is a valid sequence of API
//! calls (see `larch_policy::testing`), and every invariant is checked after each one.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    larch_policy::testing::run_ops(data);
});
