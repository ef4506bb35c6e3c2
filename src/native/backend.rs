//! The storage a [`Writer`](crate::Writer) appends to: the [`WriteBackend`] trait, its
//! implementation for [`File`], the early-sync job it may hand out, and
//! [`WriteDestination`], an output the writer does not stage as a local file (an object).

use std::fs::File;
use std::io::{self, Seek, Write};

/// The storage a [`Writer`](crate::Writer) appends its temporary file to.
///
/// [`File`] is the backend of [`Writer::create`](crate::Writer::create); [`Writer::create_with_backend`](crate::Writer::create_with_backend) wraps the
/// temporary file in another one, which is how tests inject faults (failing or torn writes, a
/// failing `fsync`) and observe what reached the file. The writer only appends, except for
/// seeking back once per streamed tensor and per tensor of 8 MiB or more to patch its checksum
/// field, and it calls [`WriteBackend::sync`] exactly once, in `finish`, before the rename
/// (when [`WriterOptions::sync`](crate::WriterOptions::sync) is on), after the optional [`WriteBackend::early_sync`].
pub trait WriteBackend: Write + Seek + Send {
    /// Makes every byte written so far durable (for a [`File`], `fsync` via `sync_all`).
    fn sync(&mut self) -> io::Result<()>;

    /// Optionally, a job that starts making the bytes written so far durable and can run on
    /// another thread while the writer goes on appending (for a [`File`], `fdatasync` on a
    /// second handle of the same file). `finish` runs it while it builds the index, so that
    /// the final [`WriteBackend::sync`] has only the index left to flush; it never replaces
    /// that final sync. The default is `None`: no early sync.
    fn early_sync(&self) -> Option<EarlySync> {
        None
    }

    /// Announces that the 4 bytes at `offset..offset + 4` (not yet written, or written but
    /// not yet passed on) will be written now and rewritten once later: the writer calls it
    /// before it writes a record header whose data checksum it patches afterwards (a streamed
    /// tensor, a tensor of 8 MiB or more). A backend that cannot seek freely (an upload in
    /// parts) keeps those bytes where it can still change them until the patch arrives, and
    /// may refuse a seek anywhere else. The default accepts and does nothing: a file seeks
    /// anywhere.
    fn will_patch(&mut self, offset: u64) -> io::Result<()> {
        let _ = offset;
        Ok(())
    }
}

/// Where a [`Writer`](crate::Writer) writes when the output is not a local file it stages
/// itself: the bytes go through the [`WriteBackend`] part, and [`WriteDestination::commit`]
/// makes them appear under the final name, all at once. Until `commit` succeeds nothing is
/// visible there (an output that was there stays as it was); dropping the destination
/// without a successful `commit` discards everything written (an object upload is aborted).
/// [`Writer::create_on`](crate::Writer::create_on) writes through one; the object upload of
/// `paramdex::remote` is one.
///
/// The writer calls [`WriteBackend::sync`] before `commit` when
/// [`WriterOptions::sync`](crate::WriterOptions::sync) is on; a destination without a notion
/// of durability before its commit returns `Ok` there.
pub trait WriteDestination: WriteBackend {
    /// The output's name in messages (a URL).
    fn name(&self) -> &str;

    /// Makes every byte written appear as the complete output under its final name. Called
    /// once, by [`Writer::finish`](crate::Writer::finish), after the last byte. On error
    /// nothing may be visible under the final name.
    fn commit(&mut self) -> crate::error::Result<()>;
}

/// A job returned by [`WriteBackend::early_sync`].
pub type EarlySync = Box<dyn FnOnce() -> io::Result<()> + Send>;

impl WriteBackend for File {
    fn sync(&mut self) -> io::Result<()> {
        self.sync_all()
    }

    fn early_sync(&self) -> Option<EarlySync> {
        // A failed dup only loses the overlap: the final sync still makes everything durable.
        let handle = self.try_clone().ok()?;
        Some(Box::new(move || handle.sync_data()))
    }
}

impl<B: WriteBackend + ?Sized> WriteBackend for Box<B> {
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }

    fn early_sync(&self) -> Option<EarlySync> {
        (**self).early_sync()
    }

    fn will_patch(&mut self, offset: u64) -> io::Result<()> {
        (**self).will_patch(offset)
    }
}
