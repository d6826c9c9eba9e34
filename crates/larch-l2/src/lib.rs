//! The L2ARC ring, its persistent log, and the rebuild reader.
