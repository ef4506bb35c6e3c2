//! Progress of long operations (verify, convert, export, recover), reported to whoever asks:
//! the CLI draws a bar with it, a training job may log it. The library never prints.

/// What a [`Progress`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unit {
    /// Bytes of tensor data.
    Bytes,
    /// Tensors.
    Tensors,
}

/// Receives progress reports. Calls may come from several threads at once (verify checksums on
/// all cores), so implementations are `Sync` and must be cheap: they run on the hot path.
pub trait Progress: Sync {
    /// The work is `total` units of `unit`; called once, before the first [`Progress::advance`].
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
