//! On-device structures of a larch cache device: encode, decode, checksums (no I/O).
