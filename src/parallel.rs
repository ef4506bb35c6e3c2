//! Checking tensor data checksums on several threads.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;
use crate::reader::TensorView;

/// Checks the CRC32C of every view, spreading the bytes over `threads` threads
/// (0 = available parallelism). Returns the bytes checked, or the first mismatch in name order.
pub(crate) fn check_crcs(views: &[TensorView<'_>], threads: usize) -> Result<u64> {
    let total: u64 = views.iter().map(|v| v.data().len() as u64).sum();
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(views.len().max(1));
    if threads <= 1 || total < (1 << 20) {
        for v in views {
            v.verify_crc()?;
        }
        return Ok(total);
    }
    // Work is handed out in chunks of views from a shared counter, so one huge tensor does
    // not leave other threads idle behind a static split.
    let next = AtomicUsize::new(0);
    let chunk = 16usize;
    let first_error = std::sync::Mutex::new(None::<(usize, crate::Error)>);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let start = next.fetch_add(chunk, Ordering::Relaxed);
                if start >= views.len() {
                    break;
                }
                for (i, v) in views[start..(start + chunk).min(views.len())]
                    .iter()
                    .enumerate()
                {
                    if let Err(e) = v.verify_crc() {
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        let idx = start + i;
                        if slot.as_ref().is_none_or(|(j, _)| idx < *j) {
                            *slot = Some((idx, e));
                        }
                    }
                }
            });
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(total),
    }
}
