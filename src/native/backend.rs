//! The storage a [`Writer`](crate::Writer)(crate::Writer) appends to: the [`WriteBackend`] trait, its
//! implementation for [`File`], and the early-sync job it may hand out.

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
}
