//! NBD protocol codec (no I/O) and async server.
