//! Progress of long operations (verify, listings, export, recover), reported to whoever asks:
//! the CLI draws a bar with it, a training job may log it. The library never prints.

/// What a [`Progress`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unit {
    /// Bytes of tensor data.
    Bytes,
    /// Tensors.
    Tensors,
    /// Bytes of an index read while listing (a TensorFlow checkpoint's `.index`, whose tensor
    /// count is not known until it has been read).
    IndexBytes,
}

/// Receives progress reports. Calls may come from several threads at once (verify checksums on
/// all cores), so implementations are `Sync` and must be cheap: they run on the hot path.
pub trait Progress: Sync {
    /// The work, or its next pass, is `total` units of `unit`; called before the pass's first
    /// [`Progress::advance`]. An operation of several passes (an export: its listing, then
    /// writing; a recovery: a check, then a copy) calls it once per pass, and each pass counts
    /// from zero.
    fn start(&self, total: u64, unit: Unit) {
        let _ = (total, unit);
    }
    /// `n` more units are done.
    fn advance(&self, n: u64) {
        let _ = n;
    }
}

/// Reports nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
