//! Property tests: random operation sequences against every ARC variant, with the
//! invariant walk after each operation (see `larch_policy::testing`).

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_keep_invariants(ops in proptest::collection::vec(any::<u8>(), 0..3000)) {
        larch_policy::testing::run_ops(&ops);
    }
}
