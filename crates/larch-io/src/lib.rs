//! BlockDevice trait with file, memory and fault-injecting implementations.
