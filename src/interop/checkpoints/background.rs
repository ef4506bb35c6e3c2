//! A [`CheckpointManager`]'s background saves: [`CheckpointManager::save_async`] captures the
//! tensors (one copy into a pooled buffer, [`capture_copy`], or tensors handed over by
//! [`CheckpointManager::save_async_owned`]), waits for a slot among the saves in flight, and
//! hands the save to the writer thread ([`background`]), which writes them one at a time in
//! the order they were captured and reports failures to the next call. Its own file because
//! the capture (buffer pool, parallel copy) and the thread's bookkeeping are apart from what
//! a save writes (`write.rs`) and from the directory's listing, state file and pruning.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::native::{Metadata, Tensor};

use super::{AsyncSaveReport, CheckpointManager, Dir, Inner, OwnedTensor};

/// The captured tensors of a background save.
enum Captured {
    Owned(Vec<OwnedTensor>),
    /// One buffer holding every tensor's bytes; the buffer goes back to the pool after.
    Copied {
        buf: Vec<u8>,
        items: Vec<CopiedItem>,
    },
}

struct CopiedItem {
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    range: std::ops::Range<usize>,
}

impl Captured {
    fn tensors(&self) -> Vec<(&[u8], Tensor<'_>)> {
        match self {
            Captured::Owned(v) => v.iter().map(|t| (&t.name[..], t.tensor())).collect(),
            Captured::Copied { buf, items } => items
                .iter()
                .map(|i| {
                    let t = Tensor::new(i.dtype, &i.shape, &buf[i.range.clone()]).with_lod(&i.lod);
                    (&i.name[..], t)
                })
                .collect(),
        }
    }
}

pub(super) struct Job {
    step: u64,
    tensors: Captured,
    metadata: Metadata,
}

impl CheckpointManager {
    /// Copies `tensors` into buffers of the manager (reused from save to save) and returns; a
    /// background thread writes them as step `step`, commits, points the state file at it and
    /// applies the keep policy. Blocks while [`ManagerOptions::max_in_flight`] saves are in
    /// flight. An earlier background save's error is returned here instead (this save is then
    /// not started), as [`Error::BackgroundSave`].
    ///
    /// [`ManagerOptions::max_in_flight`]: super::ManagerOptions::max_in_flight
    pub fn save_async<'t, N: AsRef<[u8]>>(
        &mut self,
        step: u64,
        tensors: impl IntoIterator<Item = (N, Tensor<'t>)>,
        metadata: Metadata,
    ) -> Result<AsyncSaveReport> {
        let blocked = self.wait_for_slot(step)?;
        let t0 = Instant::now();
        let list: Vec<(N, Tensor<'t>)> = tensors.into_iter().collect();
        let mut items = Vec::with_capacity(list.len());
        let mut total = 0usize;
        for (n, t) in &list {
            let start = total;
            total = total.checked_add(t.data.len()).ok_or_else(|| {
                self.d.release(step);
                Error::limit("bytes of one save", u64::MAX, usize::MAX as u64, None)
            })?;
            items.push(CopiedItem {
                name: n.as_ref().to_vec(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                lod: t.lod.to_vec(),
                range: start..total,
            });
        }
        let mut buf = self.take_buffer(total);
        capture_copy(&mut buf, list.iter().map(|(_, t)| t.data));
        let captured = t0.elapsed();
        self.enqueue(Job {
            step,
            tensors: Captured::Copied { buf, items },
            metadata,
        })?;
        Ok(AsyncSaveReport {
            blocked,
            captured,
            bytes: total as u64,
        })
    }

    /// [`CheckpointManager::save_async`] of tensors handed over: nothing is copied.
    pub fn save_async_owned(
        &mut self,
        step: u64,
        tensors: Vec<OwnedTensor>,
        metadata: Metadata,
    ) -> Result<AsyncSaveReport> {
        let blocked = self.wait_for_slot(step)?;
        let bytes = tensors.iter().map(|t| t.data.len() as u64).sum();
        self.enqueue(Job {
            step,
            tensors: Captured::Owned(tensors),
            metadata,
        })?;
        Ok(AsyncSaveReport {
            blocked,
            captured: Duration::ZERO,
            bytes,
        })
    }

    /// Waits until fewer than `max_in_flight` saves are in flight, reports an earlier failure
    /// (one that finished while waiting included), then claims `step`.
    fn wait_for_slot(&mut self, step: u64) -> Result<Duration> {
        let t0 = Instant::now();
        let max = self.d.opts.max_in_flight.max(1);
        {
            let sh = &self.d.shared;
            let mut g = sh.lock();
            while g.in_flight.len() >= max {
                g = sh.changed.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        let blocked = t0.elapsed();
        self.blocked_total += blocked;
        self.surface()?;
        self.d.claim(step)?;
        Ok(blocked)
    }

    /// Allocates a capture buffer of `bytes` bytes and touches every page of it, so that the
    /// first [`CheckpointManager::save_async`] of up to that many bytes copies into memory
    /// already mapped (as later ones do) instead of paying for page faults while the caller
    /// waits. Call it once before training, with the size of the tensors saved. Does nothing
    /// when [`ManagerOptions::max_in_flight`] buffers are kept already (the memory bound:
    /// never more buffers than saves in flight).
    ///
    /// [`ManagerOptions::max_in_flight`]: super::ManagerOptions::max_in_flight
    pub fn prepare_capture(&mut self, bytes: usize) {
        let max = self.d.opts.max_in_flight.max(1);
        let held = |g: &Inner| g.pool.len() + g.in_flight.len();
        if held(&self.d.shared.lock()) >= max {
            return;
        }
        let mut b = vec![0u8; bytes];
        // A write per page maps it (the values do not matter: a capture overwrites them).
        for x in b.iter_mut().step_by(4096) {
            *x = 1;
        }
        std::hint::black_box(&mut b);
        let mut g = self.d.shared.lock();
        if held(&g) < max {
            g.pool.push(b);
        }
    }

    /// A buffer of exactly `len` bytes (their values unspecified: they are all overwritten): a
    /// buffer of the pool with room for them, whose pages an earlier save already touched, else
    /// a new one (zeroed lazily by the system: its pages are mapped as the copy first writes
    /// them, which is what a first save pays for).
    fn take_buffer(&self, len: usize) -> Vec<u8> {
        let mut g = self.d.shared.lock();
        let i = g.pool.iter().position(|b| b.capacity() >= len);
        let b = i.map(|i| g.pool.swap_remove(i));
        drop(g);
        match b {
            Some(mut b) => {
                // Buffers go back to the pool full: shortening costs nothing; lengthening
                // within the capacity writes only the difference.
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    fn enqueue(&mut self, job: Job) -> Result<()> {
        let step = job.step;
        if self.worker.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let d = self.d.clone();
            let h = std::thread::Builder::new()
                .name("paramdex-ckpt".into())
                .spawn(move || background(&d, rx))
                .map_err(|e| Error::io("starting the checkpoint writer thread", e));
            match h {
                Ok(h) => self.worker = Some((tx, h)),
                Err(e) => {
                    self.d.release(step);
                    return Err(e);
                }
            }
        }
        let Some((tx, _)) = &self.worker else {
            unreachable!("the worker was started above")
        };
        if tx.send(job).is_err() {
            // The thread is gone (it never exits while the sender lives, unless it panicked).
            self.d.release(step);
            return Err(Error::Io {
                context: format!("saving step {step}"),
                source: std::io::Error::other("the checkpoint writer thread stopped"),
            });
        }
        Ok(())
    }
}

/// Below this many bytes a capture copies on the caller's thread alone.
const CAPTURE_PARALLEL_MIN: usize = 64 << 20;

/// Most threads a capture copies on (memory bandwidth, not cores, is the limit beyond).
const CAPTURE_THREADS: usize = 4;

/// A piece of a capture: source bytes and where they go (as long).
type CopyPiece<'s, 'd> = (&'s [u8], &'d mut [u8]);

/// Copies `sources`, one after the other, into `buf` (exactly as long as they are together):
/// the capture of a background save, the one copy of the tensors' bytes (the writer writes
/// from `buf`). A large capture is split into equal contiguous shares, one per thread (the
/// caller's included, up to [`CAPTURE_THREADS`] and the cores): two threads copied 2 GiB in
/// 0.4x to 0.85x the time of one on the 2-core benchmark machine, loaded or not (BENCHMARKS.md,
/// issue 31). Each share is copied a tensor (or the part of one inside the share) per
/// `memcpy`: large copies stay above glibc's non-temporal threshold (pieces of 16 MiB or less
/// were 1.5x slower, issue 16).
fn capture_copy<'a>(buf: &mut [u8], sources: impl Iterator<Item = &'a [u8]>) {
    let total = buf.len();
    let threads = if total < CAPTURE_PARALLEL_MIN {
        1
    } else {
        crate::parallel::resolve_threads(0).min(CAPTURE_THREADS)
    };
    let share = total.div_ceil(threads.max(1)).max(1);
    // (source piece, destination piece) per share; a source crossing a share's end is cut.
    let mut shares: Vec<std::sync::Mutex<Vec<CopyPiece<'_, '_>>>> = Vec::new();
    let mut current: Vec<CopyPiece<'_, '_>> = Vec::new();
    let mut room = share;
    let mut rest: &mut [u8] = buf;
    for mut src in sources {
        while !src.is_empty() {
            let n = src.len().min(room);
            let (s, s_rest) = src.split_at(n);
            let (d, d_rest) = std::mem::take(&mut rest).split_at_mut(n);
            current.push((s, d));
            (src, rest, room) = (s_rest, d_rest, room - n);
            if room == 0 {
                shares.push(std::sync::Mutex::new(std::mem::take(&mut current)));
                room = share;
            }
        }
    }
    if !current.is_empty() {
        shares.push(std::sync::Mutex::new(current));
    }
    // Copying cannot fail.
    let _ = crate::parallel::try_each(&shares, threads, |pieces| {
        for (s, d) in pieces.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
            d.copy_from_slice(s);
        }
        Ok(())
    });
}

/// The background writer: one save at a time, in the order they were captured.
fn background(d: &Dir, rx: mpsc::Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        let tensors = job.tensors.tensors();
        let r = d.run(job.step, &tensors, job.metadata);
        drop(tensors);
        let buf = match job.tensors {
            Captured::Copied { buf, .. } => Some(buf),
            Captured::Owned(_) => None,
        };
        let mut g = d.shared.lock();
        if let Err(e) = r {
            g.errors.push_back(Error::BackgroundSave {
                step: job.step,
                source: Box::new(e),
            });
        }
        if let Some(b) = buf {
            // Never more buffers than saves may be in flight.
            if g.pool.len() < d.opts.max_in_flight.max(1) {
                g.pool.push(b);
            }
        }
        g.in_flight.remove(&job.step);
        drop(g);
        d.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that differ from position to position and from source to source.
    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|k| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(seed) >> 29) as u8)
            .collect()
    }

    #[test]
    fn capture_copy_concatenates_its_sources_on_any_number_of_shares() {
        // Small (one thread), and past the parallel threshold with sources that straddle the
        // shares' ends, empty ones among them.
        for lens in [
            vec![0, 5, 0, 17],
            vec![],
            vec![
                CAPTURE_PARALLEL_MIN / 3 + 1,
                0,
                CAPTURE_PARALLEL_MIN / 2 + 7,
                3,
                CAPTURE_PARALLEL_MIN / 5,
            ],
        ] {
            let sources: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| bytes(n, i as u64))
                .collect();
            let want = sources.concat();
            let mut buf = vec![0xa5u8; want.len()];
            capture_copy(&mut buf, sources.iter().map(Vec::as_slice));
            assert!(buf == want, "lengths {lens:?}");
        }
    }
}
