//! Writing an object by multipart upload (issue 15): [`ObjectUpload`] is the
//! [`WriteDestination`] a [`Writer`] writes a native file through when its output is an
//! `s3://` URL ([`create_writer`]), and what [`upload_file`] copies a local file through.
//!
//! The bytes are cut into parts of [`UploadOptions::part_size`] (every part but the last the
//! same size, as some stores require) and each part is uploaded as soon as it is full, while
//! the writer goes on, with at most [`UploadOptions::concurrency`] parts in flight: memory
//! stays bounded by a few parts whatever the object's size. Parts may go out in any order
//! (`MultipartStore::put_part` takes the part's number), which is what lets the writer go back
//! and patch a record's checksum field: it announces the field before writing it
//! ([`WriteBackend::will_patch`]), and the part (or two parts) holding it stay in memory,
//! not uploaded, until the patch arrives; parts after it upload meanwhile. A seek anywhere
//! else than the end or an announced field is an error, never a silent corruption.
//!
//! Nothing is visible under the object's name until [`WriteDestination::commit`] completes
//! the upload (S3 makes a multipart object appear at once on completion, replacing an object
//! of the same name then, not before). Dropping an upload that was not committed, or any
//! failure (a write, a part, the completion), aborts the multipart upload: no object appears,
//! an object that was there stays intact, and the store frees the parts; so does
//! [`abort_uploads_in_flight`], for every upload of the process at once (an interrupt, a
//! shutdown), since a process that exits leaves its open uploads stored. An object that fits
//! in one part is sent as one plain PUT at commit (one request, equally atomic). There is no
//! `fsync` here: [`WriteBackend::sync`] does nothing; the object is durable as the store makes
//! it once the upload completes.
//!
//! Requests run on the runtime of the object's [`ObjectLocation`], driven by one thread per
//! upload (`paramdex-upload`) that holds the parts in flight; the writer's thread only fills
//! parts and hands them over (blocking when `concurrency` parts are in flight and one more is
//! queued).

use std::collections::BTreeMap;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use futures_util::future::Either;

use object_store::multipart::PartId;
use object_store::{ObjectStoreExt, PutOptions, PutPayload};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use crate::error::{Error, IoContext, RemoteProblem, Result};
use crate::native::{WriteBackend, WriteDestination, Writer, WriterOptions};
use crate::remote::is_url;
use crate::remote::object::remote_error;
use crate::remote::url::{resolve, ObjectLocation};

/// The smallest part size: S3 refuses parts under 5 MiB (except the last).
pub const MIN_PART_SIZE: usize = 5 << 20;

/// The largest part size S3 accepts (5 GiB).
pub const MAX_PART_SIZE: u64 = 5 << 30;

/// The most parts one upload may have (S3's limit): an object is at most this many times
/// [`UploadOptions::part_size`] bytes.
pub const MAX_PARTS: u64 = 10_000;

/// Default [`UploadOptions::part_size`]: 16 MiB (objects up to 156 GiB; `benches/remote_upload.rs`
/// measured it against 8 and 32 MiB).
pub const DEFAULT_PART_SIZE: usize = 16 << 20;

/// Default [`UploadOptions::concurrency`] (`benches/remote_upload.rs`).
pub const DEFAULT_UPLOAD_CONCURRENCY: usize = 8;

/// How an object is uploaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadOptions {
    /// Bytes of every part but the last ([`MIN_PART_SIZE`]..=[`MAX_PART_SIZE`]). The object
    /// may have at most [`MAX_PARTS`] parts.
    pub part_size: usize,
    /// Most parts being uploaded at once (at least 1). Memory held is about
    /// `(concurrency + 2) * part_size`, plus the parts kept for a checksum patch (two at most
    /// per tensor being streamed).
    pub concurrency: usize,
}

impl Default for UploadOptions {
    fn default() -> Self {
        UploadOptions {
            part_size: DEFAULT_PART_SIZE,
            concurrency: DEFAULT_UPLOAD_CONCURRENCY,
        }
    }
}

impl UploadOptions {
    /// Refuses a part size outside [`MIN_PART_SIZE`]..=[`MAX_PART_SIZE`] and a concurrency of 0.
    pub fn validate(&self) -> Result<()> {
        if self.part_size < MIN_PART_SIZE || self.part_size as u64 > MAX_PART_SIZE {
            return Err(Error::InvalidArgument(format!(
                "upload part size {} is outside {MIN_PART_SIZE}..={MAX_PART_SIZE} bytes (S3's \
                 limits)",
                self.part_size
            )));
        }
        if self.concurrency == 0 {
            return Err(Error::InvalidArgument(
                "upload concurrency must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// What an upload has done so far ([`UploadCounters::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Requests made: the upload's creation, each part, its completion or abort, or the one
    /// plain PUT of an object that fits in a part.
    pub requests: u64,
    /// Parts uploaded (0 when the object went as one plain PUT).
    pub parts: u64,
    /// Bytes uploaded (in parts or in the plain PUT).
    pub bytes: u64,
    /// Multipart uploads aborted (0 or 1).
    pub aborted: u64,
    /// Uploads completed, or plain PUTs made (0 or 1).
    pub completed: u64,
    /// The most bytes held in memory at once: parts being filled, kept for a patch, queued
    /// or in flight.
    pub peak_buffered: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    parts: AtomicU64,
    bytes: AtomicU64,
    aborted: AtomicU64,
    completed: AtomicU64,
    buffered: AtomicU64,
    peak_buffered: AtomicU64,
}

impl Counters {
    fn hold(&self, n: u64) {
        let now = self.buffered.fetch_add(n, Ordering::Relaxed) + n;
        self.peak_buffered.fetch_max(now, Ordering::Relaxed);
    }

    fn release(&self, n: u64) {
        self.buffered.fetch_sub(n, Ordering::Relaxed);
    }

    fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

/// A handle on an upload's counters that outlives it (the [`Writer`] owns the upload).
#[derive(Clone, Debug)]
pub struct UploadCounters(Arc<Counters>);

impl UploadCounters {
    /// The counts so far.
    pub fn stats(&self) -> UploadStats {
        let c = &self.0;
        UploadStats {
            requests: c.requests.load(Ordering::Relaxed),
            parts: c.parts.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            aborted: c.aborted.load(Ordering::Relaxed),
            completed: c.completed.load(Ordering::Relaxed),
            peak_buffered: c.peak_buffered.load(Ordering::Relaxed),
        }
    }
}

/// What the writer's thread hands the upload's thread.
enum Command {
    /// Part number (from 0) and its bytes.
    Part(u64, Vec<u8>),
    /// Every part was handed over: wait for them and complete the upload.
    Finish,
}

/// The thread that runs the multipart upload's requests.
struct Driver {
    tx: mpsc::Sender<Command>,
    thread: JoinHandle<Result<()>>,
}

/// One object written by multipart upload; see the module documentation. Made by
/// [`ObjectUpload::new`]; written through `std::io::Write` (and [`Writer`]).
pub struct ObjectUpload {
    loc: ObjectLocation,
    part_size: usize,
    concurrency: usize,
    /// Parts not handed over yet, by number: the one being filled, and full ones kept for an
    /// announced patch.
    parts: BTreeMap<u64, Vec<u8>>,
    /// Offsets of the 4-byte fields announced by `will_patch` and not yet rewritten.
    pins: Vec<u64>,
    /// Bytes written (the object's length so far).
    end: u64,
    /// Where the next write goes: `end`, or inside an announced field.
    pos: u64,
    driver: Option<Driver>,
    counters: Arc<Counters>,
    /// Why the upload failed, once it did: every later call fails, nothing is committed.
    failed: Option<String>,
    committed: bool,
}

impl std::fmt::Debug for ObjectUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectUpload")
            .field("url", &self.loc.url)
            .field("part_size", &self.part_size)
            .field("end", &self.end)
            .field("held_parts", &self.parts.len())
            .field("pins", &self.pins)
            .finish_non_exhaustive()
    }
}

/// Adds what was being done to a remote error's detail.
fn doing(mut e: Error, what: &str) -> Error {
    if let Error::Remote { detail, .. } = &mut e {
        *detail = format!("{what}: {detail}");
    }
    e
}

impl ObjectUpload {
    /// Starts an upload to `loc` (no request yet: the multipart upload is created when the
    /// first part is full; an object smaller than a part is one PUT at commit).
    pub fn new(loc: ObjectLocation, opts: &UploadOptions) -> Result<ObjectUpload> {
        opts.validate()?;
        Ok(ObjectUpload {
            loc,
            part_size: opts.part_size,
            concurrency: opts.concurrency,
            parts: BTreeMap::new(),
            pins: Vec::new(),
            end: 0,
            pos: 0,
            driver: None,
            counters: Arc::new(Counters::default()),
            failed: None,
            committed: false,
        })
    }

    /// A handle on this upload's counters, usable after the upload is moved into a writer.
    pub fn counters(&self) -> UploadCounters {
        UploadCounters(self.counters.clone())
    }

    /// The object's URL.
    pub fn url(&self) -> &str {
        &self.loc.url
    }

    fn part_len(&self) -> u64 {
        self.part_size as u64
    }

    /// Marks the upload failed with `e` and returns it.
    fn fail(&mut self, e: io::Error) -> io::Error {
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
        }
        e
    }

    fn refuse(&mut self, kind: io::ErrorKind, msg: String) -> io::Error {
        let e = io::Error::new(kind, format!("{}: {msg}", self.loc.url));
        self.fail(e)
    }

    fn check_usable(&self) -> io::Result<()> {
        match &self.failed {
            Some(why) => Err(io::Error::other(format!(
                "{}: the upload failed earlier ({why})",
                self.loc.url
            ))),
            None if self.committed => Err(io::Error::other(format!(
                "{}: the upload is already complete",
                self.loc.url
            ))),
            None => Ok(()),
        }
    }

    /// Whether an announced field overlaps part `k`.
    fn pinned(&self, k: u64) -> bool {
        let (start, end) = (k * self.part_len(), (k + 1) * self.part_len());
        self.pins.iter().any(|&off| off < end && off + 4 > start)
    }

    /// Hands part `k` over if it is full and holds no announced field.
    fn release(&mut self, k: u64) -> io::Result<()> {
        let full = self
            .parts
            .get(&k)
            .is_some_and(|p| p.len() == self.part_size);
        if full && !self.pinned(k) {
            let data = self.parts.remove(&k).expect("the part was just looked up");
            self.send(Command::Part(k, data))?;
        }
        Ok(())
    }

    /// Hands `cmd` to the upload's thread (started at the first part), waiting while it has
    /// `concurrency` parts in flight and one queued.
    fn send(&mut self, cmd: Command) -> io::Result<()> {
        if self.driver.is_none() {
            self.start_driver()?;
        }
        let driver = self.driver.as_ref().expect("started above");
        if driver.tx.blocking_send(cmd).is_ok() {
            return Ok(());
        }
        // The upload's thread stopped early: only a failure does that, and it says which.
        let e = match self.stop_driver() {
            Err(e) => e,
            Ok(()) => Error::remote(
                self.loc.url.clone(),
                RemoteProblem::Request,
                "the upload stopped before every part was handed over",
            ),
        };
        Err(self.fail(io::Error::other(e)))
    }

    fn start_driver(&mut self) -> io::Result<()> {
        let (tx, rx) = mpsc::channel(1);
        let (loc, concurrency, counters) =
            (self.loc.clone(), self.concurrency, self.counters.clone());
        let thread = std::thread::Builder::new()
            .name("paramdex-upload".into())
            .spawn(move || {
                let runtime = loc.runtime.clone();
                runtime.block_on(drive(loc, rx, concurrency, counters))
            })
            .map_err(|e| self.fail(e))?;
        self.driver = Some(Driver { tx, thread });
        Ok(())
    }

    /// Closes the channel to the upload's thread and waits for it: its result (an upload not
    /// told to finish is aborted).
    fn stop_driver(&mut self) -> Result<()> {
        let Some(Driver { tx, thread }) = self.driver.take() else {
            return Ok(());
        };
        drop(tx);
        thread.join().unwrap_or_else(|_| {
            Err(Error::remote(
                self.loc.url.clone(),
                RemoteProblem::Request,
                "the upload's thread panicked",
            ))
        })
    }

    /// Appends `buf` at the end, handing over every part it fills.
    fn append(&mut self, mut buf: &[u8]) -> io::Result<()> {
        let p = self.part_len();
        while !buf.is_empty() {
            let k = self.end / p;
            if k >= MAX_PARTS {
                return Err(self.refuse(
                    io::ErrorKind::FileTooLarge,
                    format!(
                        "the object outgrows {MAX_PARTS} parts of {} bytes (S3's limit); \
                         upload it with a larger part size",
                        self.part_size
                    ),
                ));
            }
            let within = usize::try_from(self.end % p).expect("below the part size");
            let n = (self.part_size - within).min(buf.len());
            let part_size = self.part_size;
            let part = self
                .parts
                .entry(k)
                .or_insert_with(|| Vec::with_capacity(part_size));
            part.extend_from_slice(&buf[..n]);
            self.counters.hold(n as u64);
            self.end += n as u64;
            self.pos = self.end;
            buf = &buf[n..];
            self.release(k)?;
        }
        Ok(())
    }

    /// Rewrites `buf` at `pos` (before the end): only inside an announced field, whose parts
    /// are still held; a field rewritten whole is released, and so are its parts if full.
    fn overwrite(&mut self, buf: &[u8]) -> io::Result<()> {
        let (start, len) = (self.pos, buf.len() as u64);
        let stop = start.checked_add(len).filter(|&s| s <= self.end);
        let pin = stop.and_then(|stop| {
            self.pins
                .iter()
                .position(|&off| off <= start && stop <= off + 4)
        });
        let Some(i) = pin else {
            return Err(self.refuse(
                io::ErrorKind::Unsupported,
                format!(
                    "cannot rewrite {len} bytes at offset {start} of {} written: an upload in \
                     parts rewrites only a checksum field announced before it was written",
                    self.end
                ),
            ));
        };
        let p = self.part_len();
        let mut at = start;
        for &b in buf {
            let part = self
                .parts
                .get_mut(&(at / p))
                .expect("the parts of an announced field are held until it is rewritten");
            part[usize::try_from(at % p).expect("below the part size")] = b;
            at += 1;
        }
        self.pos = at;
        let off = self.pins[i];
        if start == off && len == 4 {
            self.pins.swap_remove(i);
            for k in off / p..=(off + 3) / p {
                self.release(k)?;
            }
        }
        Ok(())
    }

    /// The object so far in one buffer, when no part was handed over (it fits in one part).
    fn take_single(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        for (_, part) in std::mem::take(&mut self.parts) {
            if all.is_empty() {
                all = part;
            } else {
                all.extend_from_slice(&part);
            }
        }
        all
    }

    fn commit_inner(&mut self) -> Result<()> {
        if let Some(&off) = self.pins.first() {
            return Err(Error::InvalidArgument(format!(
                "{}: bytes {off}..{} were announced for a rewrite that never came; the upload \
                 is abandoned",
                self.loc.url,
                off + 4
            )));
        }
        if self.driver.is_none() {
            // Nothing handed over: the object fits in one part; one plain PUT.
            let data = self.take_single();
            let n = data.len() as u64;
            let loc = &self.loc;
            let r = loc.runtime.block_on(loc.store.put_opts(
                &loc.path,
                PutPayload::from(data),
                PutOptions::default(),
            ));
            self.counters.request();
            self.counters.release(n);
            r.map_err(|e| doing(remote_error(&loc.url, e), "uploading the object"))?;
            self.counters.bytes.fetch_add(n, Ordering::Relaxed);
            self.counters.completed.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let rest: Vec<u64> = self.parts.keys().copied().collect();
        for k in rest {
            let data = self.parts.remove(&k).expect("listed above");
            self.send(Command::Part(k, data))
                .map_err(|e| Error::io(format!("uploading {}", self.loc.url), e))?;
        }
        self.send(Command::Finish)
            .map_err(|e| Error::io(format!("uploading {}", self.loc.url), e))?;
        self.stop_driver()
    }
}

impl Write for ObjectUpload {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check_usable()?;
        if self.pos < self.end {
            self.overwrite(buf)?;
        } else {
            self.append(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        // Parts go out when full; the last one at commit.
        self.check_usable()
    }
}

impl Seek for ObjectUpload {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.check_usable()?;
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
            SeekFrom::End(d) => self.end.checked_add_signed(d),
        };
        let ok = target.filter(|&t| {
            t == self.end || (t < self.end && self.pins.iter().any(|&off| off <= t && t < off + 4))
        });
        match ok {
            Some(t) => {
                self.pos = t;
                Ok(t)
            }
            None => Err(self.refuse(
                io::ErrorKind::Unsupported,
                format!(
                    "an upload in parts cannot seek to {pos:?} ({} bytes written): only to \
                     the end or to a checksum field announced before it was written",
                    self.end
                ),
            )),
        }
    }
}

impl WriteBackend for ObjectUpload {
    /// Nothing to do: an object has no durability before its upload completes, and is as
    /// durable as the store makes it after.
    fn sync(&mut self) -> io::Result<()> {
        self.check_usable()
    }

    fn will_patch(&mut self, offset: u64) -> io::Result<()> {
        self.check_usable()?;
        let p = self.part_len();
        let Some(last) = offset.checked_add(3) else {
            return Err(self.refuse(
                io::ErrorKind::InvalidInput,
                format!("no field of 4 bytes at offset {offset}"),
            ));
        };
        // Every part the field touches must still be here (or not started).
        let gone =
            (offset / p..=last / p).any(|k| k * p < self.end && !self.parts.contains_key(&k));
        if gone {
            return Err(self.refuse(
                io::ErrorKind::Unsupported,
                format!(
                    "bytes {offset}..{} are already uploaded and cannot be rewritten",
                    offset + 4
                ),
            ));
        }
        self.pins.push(offset);
        Ok(())
    }
}

impl WriteDestination for ObjectUpload {
    fn name(&self) -> &str {
        &self.loc.url
    }

    fn commit(&mut self) -> Result<()> {
        if let Err(e) = self.check_usable() {
            return Err(Error::io(format!("uploading {}", self.loc.url), e));
        }
        match self.commit_inner() {
            Ok(()) => {
                self.committed = true;
                Ok(())
            }
            Err(e) => {
                if self.failed.is_none() {
                    self.failed = Some(e.to_string());
                }
                // Aborts a multipart upload that is still open.
                let _ = self.stop_driver();
                Err(e)
            }
        }
    }
}

impl Drop for ObjectUpload {
    fn drop(&mut self) {
        // Not committed: closing the channel makes the upload's thread abort the multipart
        // upload; wait for it, so that nothing is left open when the writer is gone.
        let _ = self.stop_driver();
        let held: u64 = self.parts.values().map(|p| p.len() as u64).sum();
        self.counters.release(held);
    }
}

/// The upload's thread: creates the multipart upload, uploads the parts it is handed with at
/// most `concurrency` in flight, and completes the upload on [`Command::Finish`]; aborts it
/// on any failure and when the channel closes without `Finish`.
async fn drive(
    loc: ObjectLocation,
    mut rx: mpsc::Receiver<Command>,
    concurrency: usize,
    counters: Arc<Counters>,
) -> Result<()> {
    let Some(multipart) = loc.multipart.clone() else {
        return Err(Error::Unsupported(format!(
            "{}: the store takes no multipart uploads",
            loc.url
        )));
    };
    // Registered before the upload is created, so that an interrupt while it is being
    // created still aborts it: the creation is waited for (its id is what an abort needs).
    let (cancel_tx, mut cancel_rx) = oneshot::channel();
    let _registered = Registered::new(&loc.url, cancel_tx);
    let created = multipart.create_multipart(&loc.path).await;
    counters.request();
    let id = match created {
        Ok(id) => id,
        Err(e) => {
            // Whatever was handed over is dropped with the channel.
            return Err(doing(
                remote_error(&loc.url, e),
                "starting the multipart upload",
            ));
        }
    };
    let mut tasks: JoinSet<(u64, u64, object_store::Result<PartId>)> = JoinSet::new();
    let mut done: BTreeMap<u64, PartId> = BTreeMap::new();
    let mut handed = 0u64;
    let record = |r: std::result::Result<(u64, u64, object_store::Result<PartId>), _>,
                  done: &mut BTreeMap<u64, PartId>|
     -> Result<()> {
        match r {
            Ok((k, n, Ok(id))) => {
                counters.parts.fetch_add(1, Ordering::Relaxed);
                counters.bytes.fetch_add(n, Ordering::Relaxed);
                done.insert(k, id);
                Ok(())
            }
            Ok((k, _, Err(e))) => Err(doing(
                remote_error(&loc.url, e),
                &format!("uploading part {k}"),
            )),
            Err(e) => Err(Error::remote(
                loc.url.clone(),
                RemoteProblem::Request,
                format!("a part's upload stopped: {e}"),
            )),
        }
    };
    let work = async {
        loop {
            while let Some(r) = tasks.try_join_next() {
                record(r, &mut done)?;
            }
            while tasks.len() >= concurrency {
                if let Some(r) = tasks.join_next().await {
                    record(r, &mut done)?;
                }
            }
            match rx.recv().await {
                Some(Command::Part(k, data)) => {
                    handed += 1;
                    let (mp, path, id, c) = (
                        multipart.clone(),
                        loc.path.clone(),
                        id.clone(),
                        counters.clone(),
                    );
                    let idx = usize::try_from(k).expect("part numbers are below MAX_PARTS");
                    tasks.spawn(async move {
                        let n = data.len() as u64;
                        let r = mp.put_part(&path, &id, idx, PutPayload::from(data)).await;
                        c.request();
                        c.release(n);
                        (k, n, r)
                    });
                }
                Some(Command::Finish) => {
                    while let Some(r) = tasks.join_next().await {
                        record(r, &mut done)?;
                    }
                    // Parts 0..n, each once (the writer hands each number over once).
                    let complete =
                        done.len() as u64 == handed && done.keys().copied().eq(0..handed);
                    if !complete {
                        return Err(Error::remote(
                            loc.url.clone(),
                            RemoteProblem::Request,
                            format!(
                                "parts {:?} uploaded, not 0..{handed}",
                                done.keys().collect::<Vec<_>>()
                            ),
                        ));
                    }
                    let parts = std::mem::take(&mut done).into_values().collect();
                    let r = multipart.complete_multipart(&loc.path, &id, parts).await;
                    counters.request();
                    r.map_err(|e| doing(remote_error(&loc.url, e), "completing the upload"))?;
                    counters.completed.fetch_add(1, Ordering::Relaxed);
                    return Ok(true);
                }
                None => return Ok(false),
            }
        }
    };
    // The work, until it ends or abort_uploads_in_flight cancels it (then whatever is under
    // way stops: parts in flight, even the completion).
    let cancelled = async {
        match (&mut cancel_rx).await {
            Ok(reply) => reply,
            // No longer registered, so never cancelled.
            Err(_) => std::future::pending().await,
        }
    };
    let (outcome, reply) = {
        let (work, cancelled) = (std::pin::pin!(work), std::pin::pin!(cancelled));
        match futures_util::future::select(work, cancelled).await {
            Either::Left((outcome, _)) => (outcome, None),
            Either::Right((reply, _)) => (Err(cancelled_error(&loc.url)), Some(reply)),
        }
    };
    if let Ok(true) = outcome {
        return Ok(());
    }
    // A cancel that came while the upload failed on its own is answered too.
    let reply = reply.or_else(|| cancel_rx.try_recv().ok());
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let aborted = multipart.abort_multipart(&loc.path, &id).await;
    counters.request();
    if aborted.is_ok() {
        counters.aborted.fetch_add(1, Ordering::Relaxed);
    }
    let (abort_note, abort_outcome) = match aborted {
        Ok(()) => (String::new(), AbortOutcome::Aborted),
        Err(e) => {
            let e = doing(
                remote_error(&loc.url, e),
                &format!("aborting the multipart upload {id}"),
            );
            (
                format!(
                    "; {e}: its parts stay stored, invisible, until the bucket's lifecycle \
                     rule removes them"
                ),
                AbortOutcome::Failed(e),
            )
        }
    };
    if let Some(reply) = reply {
        // The caller may have stopped waiting (its time ran out): nothing to tell then.
        let _ = reply.send(abort_outcome);
    }
    match outcome {
        Err(mut e) => {
            if let Error::Remote { detail, .. } = &mut e {
                detail.push_str(&abort_note);
            }
            Err(e)
        }
        _ => Err(Error::remote(
            loc.url.clone(),
            RemoteProblem::Request,
            format!("the upload was abandoned before it completed{abort_note}"),
        )),
    }
}

/// The error of an upload cancelled by [`abort_uploads_in_flight`].
fn cancelled_error(url: &str) -> Error {
    Error::remote(
        url,
        RemoteProblem::Aborted,
        "the multipart upload was aborted (abort_uploads_in_flight: the program is being \
         interrupted or shut down)",
    )
}

/// What the upload's thread is sent to cancel it: where to say how its abort went.
type CancelReply = std::sync::mpsc::Sender<AbortOutcome>;

/// One multipart upload of this process that is open (being created, or created and not yet
/// completed or aborted), as [`abort_uploads_in_flight`] finds it.
struct InFlight {
    key: u64,
    url: String,
    cancel: oneshot::Sender<CancelReply>,
}

/// The open multipart uploads of this process.
static IN_FLIGHT: Mutex<Vec<InFlight>> = Mutex::new(Vec::new());

fn in_flight() -> std::sync::MutexGuard<'static, Vec<InFlight>> {
    // A panic while the list was held leaves it whole (pushes and removals only).
    IN_FLIGHT.lock().unwrap_or_else(|p| p.into_inner())
}

/// An upload's entry in [`IN_FLIGHT`], removed when the upload's thread ends, however.
struct Registered(u64);

impl Registered {
    fn new(url: &str, cancel: oneshot::Sender<CancelReply>) -> Registered {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        in_flight().push(InFlight {
            key,
            url: url.to_string(),
            cancel,
        });
        Registered(key)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        in_flight().retain(|f| f.key != self.0);
    }
}

/// How [`abort_uploads_in_flight`] left one upload.
#[derive(Debug)]
#[non_exhaustive]
pub enum AbortOutcome {
    /// Aborted: the store keeps none of its parts, and nothing appears under its name.
    Aborted,
    /// It ended before the abort reached it: it completed (the object is in place), or it
    /// failed and was aborted by its own writer.
    Finished,
    /// The store refused the abort, or did not answer: the parts already uploaded stay
    /// stored, invisible, until the bucket's lifecycle rule removes them.
    Failed(Error),
    /// The abort did not finish in the time given: it may still, if the process lives on.
    TimedOut,
}

/// One upload [`abort_uploads_in_flight`] found open, and what became of it.
#[derive(Debug)]
pub struct AbortedUpload {
    /// The object being written (its URL).
    pub url: String,
    /// What the abort did.
    pub outcome: AbortOutcome,
}

/// Aborts every multipart upload of this process that is in flight (created and neither
/// completed nor aborted yet, or being created), waiting at most `timeout` for the store to
/// confirm, and says what became of each.
///
/// This is for a program being interrupted or shut down: the `paramdex` command calls it on
/// SIGINT and SIGTERM, before it exits; an embedder (a Python program, a server) calls it
/// from its own signal handler or shutdown hook. An upload the process leaves open when it
/// exits is never completed, so its object never appears, but the store keeps (and an S3
/// provider bills) its parts until the upload is aborted; `aws s3 ls` does not show them.
///
/// Each upload stops at once: its parts in flight are dropped, the multipart upload is
/// aborted (one request), and its writer fails from then on with an [`Error::Remote`] of
/// [`RemoteProblem::Aborted`], so a [`Writer`] on it never commits. The uploads are aborted
/// together, so `timeout` bounds the whole call (a few seconds is plenty for a store that
/// answers; an upload still being created is aborted once its creation returns). Uploads
/// started after this call are not affected. An object small enough to go as one PUT has no
/// upload to abort: a PUT cut short leaves nothing.
pub fn abort_uploads_in_flight(timeout: std::time::Duration) -> Vec<AbortedUpload> {
    let deadline = std::time::Instant::now() + timeout;
    let taken = std::mem::take(&mut *in_flight());
    let mut waiting = Vec::with_capacity(taken.len());
    let mut report = Vec::with_capacity(taken.len());
    // Every upload is told before any answer is waited for: they abort together.
    for f in taken {
        let (tx, rx) = std::sync::mpsc::channel();
        match f.cancel.send(tx) {
            Ok(()) => waiting.push((f.url, rx)),
            // Its thread is ending: it no longer listens.
            Err(_) => report.push(AbortedUpload {
                url: f.url,
                outcome: AbortOutcome::Finished,
            }),
        }
    }
    for (url, rx) in waiting {
        use std::sync::mpsc::RecvTimeoutError;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let outcome = match rx.recv_timeout(left) {
            Ok(o) => o,
            Err(RecvTimeoutError::Timeout) => AbortOutcome::TimedOut,
            // Ended without aborting: it completed meanwhile.
            Err(RecvTimeoutError::Disconnected) => AbortOutcome::Finished,
        };
        report.push(AbortedUpload { url, outcome });
    }
    report
}

/// Starts a native file that appears at `target` when [`Writer::finish`] succeeds:
/// `s3://bucket/key` is written by multipart upload ([`ObjectUpload`], default
/// [`UploadOptions`]); `file:///path` and a plain path are local files, staged and renamed as
/// [`Writer::create_with`] does.
pub fn create_writer(target: &str, opts: WriterOptions) -> Result<Writer> {
    create_writer_with(target, opts, &UploadOptions::default())
}

/// [`create_writer`] with explicit upload options (ignored for local files).
pub fn create_writer_with(
    target: &str,
    opts: WriterOptions,
    upload: &UploadOptions,
) -> Result<Writer> {
    if let Some(path) = target.strip_prefix("file://") {
        return Writer::create_with(path, opts);
    }
    if !is_url(target) {
        return Writer::create_with(target, opts);
    }
    let up = ObjectUpload::new(resolve(target)?, upload)?;
    Writer::create_on(Box::new(up), opts)
}

/// Copies the local file `src` to the object `url` (`s3://bucket/key`) by multipart upload
/// (one PUT if it fits in a part): nothing is visible under `url` until the copy is complete.
/// Returns the bytes copied.
pub fn upload_file(src: &Path, url: &str, opts: &UploadOptions) -> Result<u64> {
    let mut up = ObjectUpload::new(resolve(url)?, opts)?;
    let mut f = std::fs::File::open(src).ctx("opening", src)?;
    let n = io::copy(&mut f, &mut up)
        .map_err(|e| Error::io(format!("uploading {} to {url}", src.display()), e))?;
    up.commit()?;
    Ok(n)
}

/// Whether an object exists at `url` (one HEAD request).
pub fn object_exists(url: &str) -> Result<bool> {
    let loc = resolve(url)?;
    match loc.runtime.block_on(loc.store.head(&loc.path)) {
        Ok(_) => Ok(true),
        Err(object_store::Error::NotFound { .. }) => Ok(false),
        Err(e) => Err(remote_error(url, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use object_store::memory::InMemory;
    use object_store::multipart::MultipartStore;
    use object_store::path::Path as ObjectPath;
    use object_store::{MultipartId, PutResult};

    use super::*;
    use crate::remote::url::runtime;

    const P: usize = MIN_PART_SIZE;

    fn location(store: Arc<InMemory>, key: &str) -> ObjectLocation {
        ObjectLocation {
            store: store.clone(),
            multipart: Some(store),
            path: ObjectPath::from(key),
            url: format!("memory:///{key}"),
            runtime: runtime().unwrap(),
        }
    }

    fn get(store: &InMemory, key: &str) -> Option<Vec<u8>> {
        let rt = runtime().unwrap();
        rt.block_on(async {
            match store.get(&ObjectPath::from(key)).await {
                Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("{e}"),
            }
        })
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn opts(concurrency: usize) -> UploadOptions {
        UploadOptions {
            part_size: P,
            concurrency,
        }
    }

    /// A field straddling parts 0 and 1 keeps both in memory while parts 2.. go out; the
    /// patch releases them; the object is the bytes written with the patch applied.
    #[test]
    fn a_pinned_field_holds_its_parts_until_patched() {
        let store = Arc::new(InMemory::new());
        let mut up = ObjectUpload::new(location(store.clone(), "a"), &opts(2)).unwrap();
        let counters = up.counters();
        let mut expect = pattern(4 * P + 1234, 7);
        let off = (P - 2) as u64;
        up.write_all(&expect[..P - 2]).unwrap();
        up.will_patch(off).unwrap();
        up.write_all(&expect[P - 2..]).unwrap();
        // Parts 0 and 1 are held for the field; 2 and 3 were handed over; 4 is being filled.
        assert_eq!(up.parts.keys().copied().collect::<Vec<_>>(), vec![0, 1, 4]);
        // Anywhere but the field (or the end) is refused... on a copy that is then dropped.
        up.seek(SeekFrom::Start(off)).unwrap();
        up.write_all(&[1, 2, 3, 4]).unwrap();
        expect[P - 2..P + 2].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(up.parts.keys().copied().collect::<Vec<_>>(), vec![4]);
        assert_eq!(up.seek(SeekFrom::End(0)).unwrap(), expect.len() as u64);
        assert_eq!(get(&store, "a"), None, "nothing visible before commit");
        up.commit().unwrap();
        assert_eq!(get(&store, "a").unwrap(), expect);
        let s = counters.stats();
        assert_eq!((s.parts, s.completed, s.aborted), (5, 1, 0));
        assert_eq!(s.bytes, expect.len() as u64);
        // create + 5 parts + complete.
        assert_eq!(s.requests, 7);
        // Bounded: held parts, the part being filled, queued and in flight.
        assert!(
            s.peak_buffered <= (2 + 2 + 1 + 1) as u64 * P as u64,
            "{s:?}"
        );
    }

    #[test]
    fn seeks_and_rewrites_outside_an_announced_field_are_errors() {
        let store = Arc::new(InMemory::new());
        let mut up = ObjectUpload::new(location(store.clone(), "b"), &opts(2)).unwrap();
        up.write_all(&pattern(100, 1)).unwrap();
        up.will_patch(100).unwrap();
        up.write_all(&pattern(100, 2)).unwrap();
        // Inside the field: fine. Before it: refused, and the upload is failed for good.
        up.seek(SeekFrom::Start(102)).unwrap();
        up.seek(SeekFrom::End(0)).unwrap();
        let e = up.seek(SeekFrom::Start(10)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
        assert!(up.write_all(b"x").is_err());
        assert!(up.commit().is_err());
        drop(up);
        assert_eq!(get(&store, "b"), None);

        // A rewrite wider than the field is refused.
        let mut up = ObjectUpload::new(location(store.clone(), "c"), &opts(2)).unwrap();
        up.will_patch(0).unwrap();
        up.write_all(&pattern(100, 3)).unwrap();
        up.seek(SeekFrom::Start(0)).unwrap();
        assert!(up.write_all(&[0; 5]).is_err());

        // A field already uploaded cannot be announced.
        let mut up = ObjectUpload::new(location(store.clone(), "d"), &opts(1)).unwrap();
        up.write_all(&pattern(P + 10, 4)).unwrap();
        let e = up.will_patch(3).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");

        // A field announced and never rewritten: commit refuses, nothing appears.
        let mut up = ObjectUpload::new(location(store.clone(), "e"), &opts(1)).unwrap();
        up.will_patch(0).unwrap();
        up.write_all(&pattern(10, 5)).unwrap();
        assert!(matches!(up.commit(), Err(Error::InvalidArgument(_))));
        drop(up);
        assert_eq!(get(&store, "e"), None);
    }

    #[test]
    fn a_small_object_is_one_put_and_a_dropped_upload_is_aborted() {
        let store = Arc::new(InMemory::new());
        let mut up = ObjectUpload::new(location(store.clone(), "s"), &opts(4)).unwrap();
        let c = up.counters();
        up.write_all(b"hello").unwrap();
        up.commit().unwrap();
        assert_eq!(get(&store, "s").unwrap(), b"hello");
        let s = c.stats();
        assert_eq!((s.requests, s.parts, s.completed), (1, 0, 1));

        // Several parts handed over, then dropped: aborted, the old object intact.
        let mut up = ObjectUpload::new(location(store.clone(), "s"), &opts(4)).unwrap();
        let c = up.counters();
        up.write_all(&pattern(3 * P, 9)).unwrap();
        drop(up);
        let s = c.stats();
        assert_eq!((s.aborted, s.completed), (1, 0), "{s:?}");
        assert_eq!(get(&store, "s").unwrap(), b"hello");
    }

    /// A store whose `put_part` fails for part `fail_at`.
    #[derive(Debug)]
    struct Failing {
        inner: Arc<InMemory>,
        fail_at: usize,
        aborts: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl MultipartStore for Failing {
        async fn create_multipart(&self, path: &ObjectPath) -> object_store::Result<MultipartId> {
            self.inner.create_multipart(path).await
        }

        async fn put_part(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
            part_idx: usize,
            data: PutPayload,
        ) -> object_store::Result<PartId> {
            if part_idx == self.fail_at {
                return Err(object_store::Error::Generic {
                    store: "failing",
                    source: "injected failure".into(),
                });
            }
            self.inner.put_part(path, id, part_idx, data).await
        }

        async fn complete_multipart(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
            parts: Vec<PartId>,
        ) -> object_store::Result<PutResult> {
            self.inner.complete_multipart(path, id, parts).await
        }

        async fn abort_multipart(
            &self,
            path: &ObjectPath,
            id: &MultipartId,
        ) -> object_store::Result<()> {
            self.aborts.fetch_add(1, Ordering::Relaxed);
            self.inner.abort_multipart(path, id).await
        }
    }

    #[test]
    fn a_failed_part_fails_the_writer_and_leaves_the_old_object() {
        use crate::{DType, Tensor};
        let store = Arc::new(InMemory::new());
        let mut up = ObjectUpload::new(location(store.clone(), "w"), &opts(2)).unwrap();
        up.write_all(b"old").unwrap();
        up.commit().unwrap();
        let failing = Arc::new(Failing {
            inner: store.clone(),
            fail_at: 1,
            aborts: AtomicUsize::new(0),
        });
        let mut loc = location(store.clone(), "w");
        loc.multipart = Some(failing.clone());
        let up = ObjectUpload::new(loc, &opts(1)).unwrap();
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        let data = pattern(P, 3);
        let mut err = None;
        for i in 0..8 {
            if let Err(e) = w.add(
                format!("t{i}"),
                Tensor::new(DType::UInt8, &[P as u64], &data),
            ) {
                err = Some(e);
                break;
            }
        }
        let e = match err {
            Some(e) => e,
            None => w.finish().unwrap_err(),
        };
        assert!(e.to_string().contains("injected failure"), "{e}");
        assert_eq!(failing.aborts.load(Ordering::Relaxed), 1);
        assert_eq!(get(&store, "w").unwrap(), b"old");
    }

    /// A whole native file through the writer: a streamed tensor over several parts (its
    /// header's part held until the stream ends), a 9 MiB tensor (checksum patched), small
    /// ones; read back by ranges, every tensor's checksum checked.
    #[test]
    fn a_native_file_round_trips_through_an_upload() {
        use crate::remote::{ObjectRange, RemoteOptions};
        use crate::{DType, Tensor};
        let store = Arc::new(InMemory::new());
        let up = ObjectUpload::new(location(store.clone(), "m.pdx"), &opts(2)).unwrap();
        let counters = up.counters();
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        assert_eq!(w.temp_path(), None);
        w.add("a", Tensor::new(DType::UInt8, &[10], &pattern(10, 1)))
            .unwrap();
        let big = pattern(9 << 20, 2);
        w.add("b", Tensor::new(DType::UInt8, &[big.len() as u64], &big))
            .unwrap();
        let streamed = pattern(3 * P + 17, 3);
        let mut t = w
            .begin("c", DType::UInt8, &[streamed.len() as u64], &[])
            .unwrap();
        for chunk in streamed.chunks(1 << 20) {
            t.write_all(chunk).unwrap();
        }
        t.finish().unwrap();
        let stats = w.finish().unwrap();
        let object = get(&store, "m.pdx").unwrap();
        assert_eq!(object.len() as u64, stats.file_len);
        assert!(counters.stats().parts >= 4, "{:?}", counters.stats());
        let r = crate::Reader::from_bytes(object).unwrap();
        assert_eq!(r.tensor("b").unwrap().data(), &big[..]);
        assert_eq!(r.tensor("c").unwrap().data(), &streamed[..]);
        let range = ObjectRange::open(
            store.clone(),
            ObjectPath::from("m.pdx"),
            "memory:///m.pdx",
            runtime().unwrap(),
            64 << 10,
        )
        .unwrap();
        let rr = crate::Reader::from_range_read(Arc::new(range), RemoteOptions::default()).unwrap();
        assert_eq!(rr.get("c").unwrap().unwrap().data(), streamed);
        assert_eq!(rr.get("a").unwrap().unwrap().data(), pattern(10, 1));
    }

    /// Past 10,000 parts the upload refuses to grow (S3's limit), saying to raise the part
    /// size; nothing appears. Tiny parts (allowed by no option, set here directly) keep the
    /// test small.
    #[test]
    fn more_than_max_parts_is_an_error() {
        let store = Arc::new(InMemory::new());
        let mut up = ObjectUpload::new(location(store.clone(), "big"), &opts(8)).unwrap();
        up.part_size = 16;
        let c = up.counters();
        let e = up
            .write_all(&vec![1u8; 16 * MAX_PARTS as usize + 1])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        assert!(e.to_string().contains("larger part size"), "{e}");
        assert!(up.commit().is_err());
        drop(up);
        assert_eq!(c.stats().aborted, 1);
        assert_eq!(get(&store, "big"), None);
    }

    #[test]
    fn options_are_checked() {
        for (part_size, concurrency) in [(P - 1, 1), (P, 0)] {
            let o = UploadOptions {
                part_size,
                concurrency,
            };
            assert!(matches!(o.validate(), Err(Error::InvalidArgument(_))));
        }
        UploadOptions::default().validate().unwrap();
    }
}
