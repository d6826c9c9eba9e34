//! The engine's errors as the parts raise them.

/// An I/O error naming the device (`path`) it came from.
pub(crate) fn device_error(path: &std::path::Path, e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("{}: {e}", path.display()))
}
