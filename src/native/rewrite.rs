//! Changing a finished file's metadata in place without touching its records (SPEC.md 10.1):
//! a new index (same tensor entries, new header entry) is appended after the file's end, synced,
//! then a new footer. The old index becomes dead space.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::native::header::FileHeader;
use crate::native::mapped::MappedReader;
use crate::native::meta::Metadata;
use crate::table::{Compression, Table, TableBuilder, TableOptions, TableReadOptions, FOOTER_LEN};

/// What [`rewrite_in_place`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriteReport {
    /// File length before.
    pub old_len: u64,
    /// File length after.
    pub new_len: u64,
    /// Bytes of the new index table, footer included.
    pub index_len: u64,
    /// Bytes between the records and the new index that no longer belong to anything (old
    /// indexes); `convert` to a new file drops them.
    pub dead_bytes: u64,
}

/// A writer that passes bytes through but holds back the last [`FOOTER_LEN`] written, so the
/// footer can be written (and synced) separately from the blocks before it.
struct HoldBack<W: Write> {
    inner: W,
    held: Vec<u8>,
}

impl<W: Write> Write for HoldBack<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(buf);
        if self.held.len() > FOOTER_LEN {
            let cut = self.held.len() - FOOTER_LEN;
            self.inner.write_all(&self.held[..cut])?;
            self.held.drain(..cut);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Replaces the metadata of the native file at `path` without touching its records: appends a
/// new index (the same tensor entries, a new header entry) after the current end of the file,
/// syncs, then appends the new 48-byte footer and syncs again (SPEC.md 10.1). The old index
/// becomes dead space. With `sync` off (tests), nothing is synced.
///
/// A crash before the footer is complete leaves the previous file, byte for byte, followed by a
/// partial new index: it no longer opens, and `paramdex recover` (see [`last_complete_len`](crate::last_complete_len))
/// restores the previous file. On an I/O error the file is truncated back to its old length.
pub fn rewrite_in_place(path: &Path, metadata: &Metadata, sync: bool) -> Result<RewriteReport> {
    metadata.validate()?;
    // A sharded checkpoint named by its prefix: its metadata is its index's.
    let index = crate::native::sharded::table::index_path(path);
    let path = if !path.is_file() && index.is_file() {
        index.as_path()
    } else {
        path
    };
    let reader = MappedReader::open(path)?;
    if let Some(s) = reader.header().shard_of {
        return Err(Error::Unsupported(format!(
            "{} is shard {} of {} of a sharded save: its length is recorded in its checkpoint's \
             index, so it is not changed in place; change the metadata of the checkpoint (its \
             PREFIX.index) instead",
            path.display(),
            s.shard_id,
            s.num_shards
        )));
    }
    let bytes = reader.as_bytes();
    let old_len = bytes.len() as u64;
    let table = Table::open(bytes, TableReadOptions::default())?;
    // Keep the old index's compression: snappy if any of its blocks is stored compressed
    // (a block that snappy does not shrink by 1/8 is stored plain even when compression is on).
    let type_byte = |h: crate::table::BlockHandle| {
        usize::try_from(h.offset.saturating_add(h.size))
            .ok()
            .and_then(|p| bytes.get(p).copied())
    };
    let snappy = Some(Compression::Snappy.type_byte());
    let compression = if type_byte(table.footer().index) == snappy
        || (0..table.data_blocks()).any(|i| type_byte(table.block_handle(i)) == snappy)
    {
        Compression::Snappy
    } else {
        Compression::None
    };
    let mut header: FileHeader = reader.header().clone();
    header.metadata = metadata.clone();
    let header_value = header.encode();

    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .ctx("opening for writing", path)?;
    let now = file.metadata().ctx("reading metadata of", path)?.len();
    if now != old_len {
        return Err(Error::io(
            format!("rewriting the index of {}", path.display()),
            std::io::Error::other(format!(
                "the file changed while being read ({old_len} bytes, now {now})"
            )),
        ));
    }
    let result = append_index(
        &file,
        path,
        &table,
        &header_value,
        old_len,
        crate::native::writer::default_table_options(compression, header.format_version),
        sync,
    );
    match result {
        Ok(index_len) => {
            let first = old_len; // the new index's first data block starts here
            Ok(RewriteReport {
                old_len,
                new_len: old_len + index_len,
                index_len,
                dead_bytes: first - header.records_len,
            })
        }
        Err(e) => {
            // Best effort: give the file back its previous, complete form.
            let _ = file.set_len(old_len);
            let _ = file.sync_all();
            Err(e)
        }
    }
}

fn append_index(
    file: &File,
    path: &Path,
    table: &Table<'_>,
    header_value: &[u8],
    old_len: u64,
    opts: TableOptions,
    sync: bool,
) -> Result<u64> {
    let mut f = file;
    f.seek(SeekFrom::Start(old_len)).ctx("seeking in", path)?;
    let out = HoldBack {
        inner: BufWriter::with_capacity(1 << 20, file),
        held: Vec::with_capacity(2 * FOOTER_LEN),
    };
    let mut builder = TableBuilder::new(out, old_len, opts)?;
    let mut it = table.iter();
    let mut first = true;
    while it.next()? {
        if first {
            // The reader checked that the first key is the header's.
            builder.add(b"", header_value)?;
            first = false;
        } else {
            builder.add(it.key(), it.value())?;
        }
    }
    let (mut out, stats) = builder.finish()?;
    out.inner.flush().ctx("writing the new index of", path)?;
    if sync {
        file.sync_all().ctx("syncing", path)?;
    }
    let footer = std::mem::take(&mut out.held);
    debug_assert_eq!(footer.len(), FOOTER_LEN);
    drop(out);
    f.write_all(&footer)
        .ctx("writing the new footer of", path)?;
    if sync {
        file.sync_all().ctx("syncing", path)?;
    }
    Ok(stats.table_len)
}
