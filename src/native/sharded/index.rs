//! A shard's footer and index table read by positions (never its records; `pread` through
//! [`FileRange`], or an object's ranged GETs): what the merge of a sharded save
//! (`merge_shards`) and an incremental save's links (`reuse`) check a shard file by.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{path_str, Error, Result, ShardProblem};
use crate::format::ReadAt;
use crate::name::{self, MAX_NAME_LEN};
use std::collections::HashMap;

use crate::native::entry::{decode_slices, IndexEntry};
use crate::native::header::{FileHeader, ShardOf, ShardRef};
use crate::native::open::{open_index, Opened};
use crate::native::read_at::FileRange;
use crate::native::region;
use crate::native::sharded::table::check_shard_of;
use crate::native::slice_key;
use crate::native::{FORMAT_VERSION, MAX_SHARDS};
use crate::record::{MAX_ALIGNMENT, MAX_RANK};
use crate::table::{Table, TableIndex, TableReadOptions, FOOTER_LEN};

/// A shard's index table, read without the records before it.
pub(crate) struct ShardIndex {
    pub(crate) path: PathBuf,
    pub(crate) file_len: u64,
    /// The file's bytes from `base` (its first index data block) to its end.
    pub(crate) tail: Vec<u8>,
    pub(crate) base: u64,
    pub(crate) index: TableIndex,
    pub(crate) header: FileHeader,
    /// The identity in the header (checked present).
    pub(crate) shard: ShardOf,
}

impl ShardIndex {
    pub(in crate::native) fn table(&self) -> Table<'_> {
        Table::new_tail(&self.tail, self.base, &self.index)
    }

    pub(in crate::native) fn shown(&self) -> String {
        path_str(&self.path)
    }
}

/// A native file's length, index table (the bytes from its first index data block to its end,
/// the table index over them) and header, read by positions; never its records.
struct IndexTail {
    file_len: u64,
    tail: Vec<u8>,
    base: u64,
    index: TableIndex,
    header: FileHeader,
}

/// Opens the local file at `path` to read its index. A missing file is
/// [`ShardProblem::Missing`].
fn open_local(path: &Path) -> Result<FileRange> {
    let f = File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Shard {
                path: path_str(path),
                problem: ShardProblem::Missing,
                detail: "the shard file is missing".into(),
            }
        } else {
            Error::io(format!("opening {}", path.display()), e)
        }
    })?;
    FileRange::from_file(f, path)
}

/// The header of the native file `src` (shown as `shown`), read with its index table (never
/// its records); `read` counts the bytes read.
pub(in crate::native) fn read_header_from(
    src: &dyn ReadAt,
    shown: &str,
    read: &mut u64,
) -> Result<FileHeader> {
    read_index_tail_from(src, shown, read, FOOTER_LEN as u64).map(|t| t.header)
}

/// Reads the footer, index table and header of the native file `src` (shown as `shown`;
/// never its records; `read` counts the bytes read), opened as every native file is
/// ([`open_index`], its first read the last `tail_bytes` bytes), its index data blocks read
/// too: from a local file, with the footer as first read, three reads of the index table
/// alone (footer, index block, data blocks), no record byte.
fn read_index_tail_from(
    src: &dyn ReadAt,
    shown: &str,
    read: &mut u64,
    tail_bytes: u64,
) -> Result<IndexTail> {
    let not_shard = |detail: String| Error::Shard {
        path: shown.to_string(),
        problem: ShardProblem::Identity,
        detail,
    };
    let ctx = |e: Error| e.context(&format!("shard file {shown}"));
    let file_len = src.len();
    let opts = TableReadOptions {
        verify_checksums: true,
        cache_capacity: 8 << 20,
        hash_index: true,
    };
    let Opened {
        held,
        held_start,
        index,
        header,
        first_block,
    } = open_index(src, tail_bytes, true, &opts, shown).map_err(|e| match e {
        Error::UnrecognizedFormat { detail, .. } => not_shard(detail),
        e => ctx(e),
    })?;
    // Every byte from `held_start` on was read once; the index table is what follows the
    // first data block (records the first read held are dropped).
    *read += file_len - held_start;
    let skip =
        usize::try_from(first_block.saturating_sub(held_start)).expect("inside the bytes held");
    let tail = held.get(skip..).unwrap_or_default().to_vec();
    let base = first_block.max(held_start);
    if !crate::native::is_known_version(header.format_version) {
        return Err(not_shard(format!(
            "format version {} (a shard is a native file of version 2 to {FORMAT_VERSION})",
            header.format_version
        )));
    }
    Ok(IndexTail {
        file_len,
        tail,
        base,
        index,
        header,
    })
}

/// Reads a shard's footer and index table (never its records), and its header, and checks
/// that it is a shard. `read` counts the bytes read.
pub(in crate::native) fn read_shard_index(path: &Path, read: &mut u64) -> Result<ShardIndex> {
    let src = open_local(path)?;
    read_shard_index_from(&src, path, read, FOOTER_LEN as u64)
}

/// [`read_shard_index`] of the file `src`, found at `path` (an object's URL for a shard on
/// object storage).
pub(crate) fn read_shard_index_from(
    src: &dyn ReadAt,
    path: &Path,
    read: &mut u64,
    tail_bytes: u64,
) -> Result<ShardIndex> {
    let shown = path_str(path);
    let not_shard = |detail: String| Error::Shard {
        path: shown.clone(),
        problem: ShardProblem::Identity,
        detail,
    };
    let ctx = |e: Error| e.context(&format!("shard file {shown}"));
    let IndexTail {
        file_len,
        tail,
        base: first,
        index,
        header,
    } = read_index_tail_from(src, &shown, read, tail_bytes)?;
    let Some(shard) = header.shard_of.filter(|_| header.shards.is_empty()) else {
        return Err(not_shard(
            "the file is not a shard of a sharded save (its header has no shard identity)".into(),
        ));
    };
    if shard.num_shards == 0 || shard.num_shards > MAX_SHARDS || shard.shard_id >= shard.num_shards
    {
        return Err(Error::Shard {
            path: shown,
            problem: ShardProblem::Count,
            detail: format!(
                "the file says it is shard {} of {}",
                shard.shard_id, shard.num_shards
            ),
        });
    }
    let bad = |detail: String| ctx(Error::corrupt("header entry", first, detail));
    if header.num_shards != 1
        || header.big_endian
        || header.records_len > first
        || !u64::from(header.alignment).is_power_of_two()
        || u64::from(header.alignment) > MAX_ALIGNMENT
    {
        return Err(bad(format!(
            "not a valid shard header (num_shards {}, records {} bytes before an index at {first}, \
             alignment {})",
            header.num_shards, header.records_len, header.alignment
        )));
    }
    Ok(ShardIndex {
        path: path.to_path_buf(),
        file_len,
        tail,
        base: first,
        index,
        header,
        shard,
    })
}

/// The references file of a shard of an incremental save (SPEC.md 12.5), read whole: the
/// tensors the shard reuses from earlier saves' data files instead of writing them.
pub(crate) struct References {
    /// The file.
    pub(in crate::native) path: PathBuf,
    /// The shard it belongs to (its header's field 22).
    pub(in crate::native) shard: ShardOf,
    /// The earlier data files it refers to (field 23); an entry's `shard_id` is a position in
    /// this list.
    pub(in crate::native) files: Vec<ShardRef>,
    /// Its entries in key order: (key, entry, its value, offset of the block holding it). A
    /// whole tensor's or a slice's entry (`num_slices` 0) is a reference, whose `shard_id` is a
    /// position in `files`; an entry with slices is a tensor of which the shard reuses the
    /// slices it lists.
    pub(in crate::native) entries: Vec<(Vec<u8>, IndexEntry, Vec<u8>, u64)>,
}

/// An index entry's dtype as stored: the TensorFlow number (field 1) and paramdex's (field 18).
type EntryDtype = (i32, u32);

/// Reads and checks the references file at `path` (never more than its own bytes): a native
/// file of version 2 without records whose header names its shard and lists the earlier data
/// files; its references (whole tensors and slices) each name one of those files, and each
/// tensor of which slices are reused lists exactly the slice references of its name, of its
/// dtype and of their regions' shapes.
pub(in crate::native) fn read_references(path: &Path, read: &mut u64) -> Result<References> {
    read_references_from(&open_local(path)?, path, read)
}

/// [`read_references`] of the file `src`, found at `path` (an object's URL in a bucket).
pub(in crate::native) fn read_references_from(
    src: &dyn ReadAt,
    path: &Path,
    read: &mut u64,
) -> Result<References> {
    let shown = path_str(path);
    let t = read_index_tail_from(src, &shown, read, FOOTER_LEN as u64)?;
    let bad = |at: u64, detail: String| {
        Error::corrupt("references file", at, format!("{shown}: {detail}"))
    };
    let h = &t.header;
    let Some(shard) = h.shard_of else {
        return Err(bad(t.base, "its header names no shard".into()));
    };
    check_shard_of(&shard, t.base)?;
    if h.format_version != 2
        || h.records_len != 0
        || h.shards.is_empty()
        || h.shards.len() > MAX_SHARDS as usize
        || i32::try_from(h.shards.len()).ok() != Some(h.num_shards)
        || h.references != 0
    {
        return Err(bad(
            t.base,
            format!(
                "not a references file's header (version {}, records {} bytes, {} files of \
                 num_shards {}, references {}, slices {})",
                h.format_version,
                h.records_len,
                h.shards.len(),
                h.num_shards,
                h.references,
                h.slice_count
            ),
        ));
    }
    for f in &h.shards {
        check_shard_of(&f.shard, t.base)?;
    }
    let table = Table::new_tail(&t.tail, t.base, &t.index);
    let mut it = table.iter();
    let mut entries = Vec::new();
    // Slice references by key: (dtype, shape), removed as their tensors' entries list them.
    let mut slice_refs: HashMap<Vec<u8>, (EntryDtype, Vec<u64>)> = HashMap::new();
    let mut partitioned = Vec::new();
    let (mut tensors, mut slices) = (0u64, 0u64);
    while it.next()? {
        let (key, value, at) = (it.key(), it.value(), it.block_offset());
        if key.is_empty() {
            continue;
        }
        let shown_key = slice_key::display_key(key);
        if key.len() > MAX_NAME_LEN
            || (key[0] == 0 && slice_key::decode(key).is_none_or(|k| k.name.is_empty()))
        {
            return Err(bad(
                at,
                format!("{shown_key} is not a tensor name or slice key"),
            ));
        }
        let e = IndexEntry::decode(value, at, MAX_RANK)?;
        if e.num_slices != 0 {
            // A tensor of which the shard reuses slices: its entry lists them.
            if key[0] == 0
                || e.shard_id != 0
                || e.offset != 0
                || e.size != 0
                || e.record_header_len != 0
                || e.shape.is_empty()
            {
                return Err(bad(
                    at,
                    format!("{shown_key}: not the entry of a tensor stored in slices"),
                ));
            }
            tensors += 1;
            partitioned.push((key.to_vec(), e.clone(), value.to_vec(), at));
        } else {
            if usize::try_from(e.shard_id).map_or(true, |j| j >= h.shards.len()) {
                return Err(bad(
                    at,
                    format!(
                        "reference {shown_key} names data file {} of {}",
                        e.shard_id,
                        h.shards.len()
                    ),
                ));
            }
            if key[0] == 0 {
                slices += 1;
                slice_refs.insert(key.to_vec(), ((e.tf_dtype, e.pdx_dtype), e.shape.to_vec()));
            } else {
                tensors += 1;
            }
        }
        entries.push((key.to_vec(), e, value.to_vec(), at));
    }
    for (name, e, value, at) in &partitioned {
        for ext in decode_slices(value, *at, e.shape.len())? {
            let r = region::resolve(&ext, &e.shape).map_err(|d| {
                bad(
                    *at,
                    format!(
                        "tensor {}: a slice outside its shape: {d}",
                        name::display(name)
                    ),
                )
            })?;
            let k = slice_key::encode(name, &ext);
            match slice_refs.remove(&k) {
                Some((d, shape)) if d == (e.tf_dtype, e.pdx_dtype) && shape == r.len => {}
                _ => {
                    return Err(bad(
                        *at,
                        format!(
                            "tensor {}: its slice {} has no reference of its dtype and shape",
                            name::display(name),
                            slice_key::display_key(&k)
                        ),
                    ))
                }
            }
        }
    }
    if let Some(k) = slice_refs.keys().next() {
        return Err(bad(
            t.base,
            format!(
                "slice reference {} belongs to no tensor",
                slice_key::display_key(k)
            ),
        ));
    }
    if tensors != h.tensor_count || slices != h.slice_count {
        return Err(bad(
            t.base,
            format!(
                "the header counts {} tensors and {} slices, the file holds {tensors} and \
                 {slices}",
                h.tensor_count, h.slice_count
            ),
        ));
    }
    Ok(References {
        path: path.to_path_buf(),
        shard,
        files: h.shards.clone(),
        entries,
    })
}
