//! The ARC as a pure, deterministic state machine (no I/O, no clock, no threads).
