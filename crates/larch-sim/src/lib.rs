//! Trace readers and replay of the policy in virtual time.
