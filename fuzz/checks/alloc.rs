//! A counting global allocator: the system allocator, and how many bytes it has handed out in
//! all (a reallocation that grows counts its growth). A check that must stay in memory
//! proportional to its input (`pickle.rs`) measures itself with it; the crate that runs the
//! check (the fuzz target, `tests/alloc_bounds.rs`) installs it as its `#[global_allocator]`.
//! Counting every byte ever allocated, not the peak, also bounds the work done: a reader that
//! makes and drops a copy per path of a shared value is caught as surely as one that keeps
//! them.
#![allow(dead_code)] // each crate that includes it uses only some of it

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting.
pub struct Counting {
    allocated: AtomicU64,
}

impl Counting {
    /// A counter at zero.
    pub const fn new() -> Counting {
        Counting {
            allocated: AtomicU64::new(0),
        }
    }

    /// Bytes allocated so far by every thread (subtract two readings to measure a call made
    /// while no other thread allocates).
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    fn count(&self, n: usize) {
        self.allocated.fetch_add(n as u64, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` with the caller's arguments unchanged; the
// counter is a side effect that touches no memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size());
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count(new_size.saturating_sub(layout.size()));
        // SAFETY: the caller's contract for `realloc` is `System.realloc`'s.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
