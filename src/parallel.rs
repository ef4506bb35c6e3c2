//! The crate's one way to spread work over threads: scoped threads that claim items from a
//! shared counter, so no pool outlives a call and no dependency is needed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// The number of threads `threads` asks for (0 = available parallelism).
pub(crate) fn resolve_threads(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Runs `f` on every item on up to `threads` threads (0 = all cores); returns the error of the
/// lowest-numbered failing item.
pub(crate) fn try_each<T: Sync>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<()> + Sync,
) -> Result<()> {
    let threads = resolve_threads(threads).min(items.len().max(1));
    if threads <= 1 {
        return items.iter().try_for_each(f);
    }
    let next = AtomicUsize::new(0);
    let first: Mutex<Option<(usize, Error)>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                if let Err(e) = f(item) {
                    let mut slot = first.lock().unwrap_or_else(|p| p.into_inner());
                    if slot.as_ref().is_none_or(|(j, _)| i < *j) {
                        *slot = Some((i, e));
                    }
                }
            });
        }
    });
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}
