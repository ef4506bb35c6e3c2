//! The reads written once for every remote checkpoint, a single file (`RangedReader`) or a
//! sharded one (`RangedSharded`): the [`EntrySource`] trait (index entries by key, checked data
//! of an entry), and over it [`locate`] and [`locate_slices`] (where a tensor's bytes lie,
//! without reading them), [`get_whole`], [`get_whole_data`] and [`get_region`] (a whole tensor as a view or
//! owned, or any region of one
//! stored whole or in slices). Its own file because both readers stand on it, while the rest of
//! `reader.rs` is the single file's fetching.
//!
//! `RangedReader`: super::RangedReader

use crate::error::{Error, Result};
use crate::format::unmask_crc;
use crate::name;
use crate::native::entry::Partition;
use crate::native::iter::Found;
use crate::native::region::{self, Region};
use crate::native::slice_key;
use crate::native::{
    check_partition, entry_dtype, is_tensor_name, piece_entry, plan_region, IndexEntry,
    MappedReader, RegionPlan, SliceData, TensorView,
};
use crate::table::Table;

use crate::native::OwnedTensor as RemoteTensor;

/// What the reads of whole tensors and regions need of a remote checkpoint, a single file
/// (`RangedReader`) or a sharded one (`RangedSharded`): its index entries by key, and the
/// checked data of an entry from whichever object holds it. Everything else (which slices hold
/// a region, the checks of an entry, the copy) is written once, here and in `native`.
///
/// `RangedReader`: super::RangedReader
pub(crate) trait EntrySource {
    /// Where the checkpoint is, for messages.
    fn place(&self) -> &str;
    /// Whether its index is of version 2 (slices allowed).
    fn is_v2(&self) -> bool;
    /// The index entry under `key`: decoded, its value, the offset of its block.
    fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>>;
    /// The index table (for the lookups of slices).
    fn index_table(&self) -> Table<'_>;
    /// The data of a whole tensor's or a slice's entry, checked against its CRC32C.
    fn data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor>;
    /// The view of a whole tensor's entry (its record fetched, its data checked against its
    /// CRC32C), reading as [`EntrySource::data`] reads.
    fn view(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<TensorView<'_>>;
    /// Where the data of a whole tensor's entry is, checked as [`EntrySource::data`] checks
    /// it but without reading it: the file (a URL) and the data's length.
    fn data_file(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<(String, u64)>;
}

/// Where the data of tensor `name` of `s` lies, without reading it: the file (a URL), the
/// data's offset and length there, and its stored CRC32C (unmasked). `None` when there is no
/// such tensor or it is stored in slices (not one run of bytes).
pub(crate) fn locate(s: &dyn EntrySource, name: &[u8]) -> Result<Option<DataAt>> {
    if !is_tensor_name(name, s.is_v2()) {
        return Ok(None);
    }
    let Some((e, _, at)) = s.lookup(name)? else {
        return Ok(None);
    };
    if e.num_slices != 0 {
        return Ok(None);
    }
    let (file, len) = s.data_file(name, &e, at)?;
    Ok(Some((file, e.offset, len, unmask_crc(e.crc32c))))
}

/// Where an entry's data lies ([`locate`]): its file (a URL), the data's offset and length
/// there, and its stored CRC32C (unmasked).
pub(crate) type DataAt = (String, u64, u64, u32);

/// Where each stored slice of tensor `name` of `s` lies, without reading it, in the order
/// its entry lists them: the slice's region, and as [`locate`] gives it, its file, offset,
/// length and CRC32C. Empty when there is no such tensor or it is stored whole. Each slice's
/// entry is looked up and checked as a read of it would be.
pub(crate) fn locate_slices(s: &dyn EntrySource, name: &[u8]) -> Result<Vec<(Region, DataAt)>> {
    if !is_tensor_name(name, s.is_v2()) {
        return Ok(Vec::new());
    }
    let Some((e, value, at)) = s.lookup(name)? else {
        return Ok(Vec::new());
    };
    if e.num_slices == 0 {
        return Ok(Vec::new());
    }
    let dtype = entry_dtype(name, &e).map_err(|err| err.context(s.place()))?;
    let p = check_partition(name, &e, dtype, &value, at, s.is_v2())
        .map_err(|err| err.context(s.place()))?;
    let table = s.index_table();
    (0..p.regions.len())
        .map(|i| {
            let (se, _, sat, piece) =
                piece_entry(&table, &p, i).map_err(|err| err.context(s.place()))?;
            let (file, len) = s.data_file(&piece.key, &se, sat)?;
            Ok((
                p.regions[i].clone(),
                (file, se.offset, len, unmask_crc(se.crc32c)),
            ))
        })
        .collect()
}

/// The view of tensor `name` of `s`, stored whole (else [`Error::Sliced`]).
pub(crate) fn get_whole<'s>(s: &'s dyn EntrySource, name: &[u8]) -> Result<Option<TensorView<'s>>> {
    match whole_entry(s, name)? {
        Some((e, at)) => s.view(name, &e, at).map(Some),
        None => Ok(None),
    }
}

/// The tensor `name` of `s`, stored whole (else [`Error::Sliced`]), as an owned tensor (its
/// data alone, and its LoD): what the loads give, without the copy a view's data would cost.
pub(crate) fn get_whole_data(s: &dyn EntrySource, name: &[u8]) -> Result<Option<RemoteTensor>> {
    match whole_entry(s, name)? {
        Some((e, at)) => s.data(name, &e, at).map(Some),
        None => Ok(None),
    }
}

/// The entry of tensor `name` of `s` and the offset of its block, when it is stored whole
/// (else [`Error::Sliced`]).
fn whole_entry(s: &dyn EntrySource, name: &[u8]) -> Result<Option<(IndexEntry, u64)>> {
    if !is_tensor_name(name, s.is_v2()) {
        return Ok(None);
    }
    let Some((e, _, at)) = s.lookup(name)? else {
        return Ok(None);
    };
    if e.num_slices != 0 {
        return Err(Error::Sliced {
            name: name::display(name),
            path: s.place().to_string(),
            slices: u64::from(e.num_slices),
        });
    }
    Ok(Some((e, at)))
}

/// The region `region` of tensor `name` of `s`, whether stored whole or in slices.
pub(crate) fn get_region(
    s: &dyn EntrySource,
    name: &[u8],
    region: &Region,
) -> Result<Option<SliceData<'static>>> {
    if !is_tensor_name(name, s.is_v2()) {
        return Ok(None);
    }
    let Some((e, value, at)) = s.lookup(name)? else {
        return Ok(None);
    };
    let dtype = entry_dtype(name, &e).map_err(|err| err.context(s.place()))?;
    let shape: Vec<u64> = e.shape.to_vec();
    region.check_within(&shape, name)?;
    let esize = dtype.size();
    let out_len = region::byte_len(region, esize)?;
    // Held by the region's data, aligned for every element type, as a mapped file's region
    // copied out of several slices is.
    let mut held = SliceData::owned(out_len, dtype, region, name::display(name));
    let out = held.bytes_mut();
    let copy = |data: &[u8], from: &Region, part: &Region, out: &mut [u8], key: &[u8]| {
        region::copy_part(data, from, out, region, part, esize).map_err(|d| {
            Error::corrupt(
                "slice",
                at,
                format!("{}: {}: {d}", s.place(), slice_key::display_key(key)),
            )
        })
    };
    if e.num_slices == 0 {
        let t = s.data(name, &e, at)?;
        copy(&t.data, &Region::full(&shape), region, out, name)?;
    } else {
        let p = check_partition(name, &e, dtype, &value, at, s.is_v2())
            .map_err(|err| err.context(s.place()))?;
        let parts = match plan_region(&p, region, s.place())? {
            RegionPlan::Empty => Vec::new(),
            RegionPlan::Within(i) => vec![(i, region.clone())],
            RegionPlan::Parts(parts) => parts,
        };
        for (i, part) in &parts {
            let r = &p.regions[*i];
            // The same lookup and checks of a slice's entry as a mapped file's.
            let (se, _, sat, piece) =
                piece_entry(&s.index_table(), &p, *i).map_err(|err| err.context(s.place()))?;
            let t = s.data(&piece.key, &se, sat)?;
            copy(&t.data, r, part, out, &piece.key)?;
        }
    }
    Ok(Some(held))
}

/// What the index entry `value` of `key` (in the block at `at`) of `s` holds, checked: the
/// view of a whole tensor (its record read), or a partitioned tensor's entry. The ranged
/// readers' step of a walk ([`crate::native::iter::Walk::found`]).
pub(crate) fn found_in<'s>(
    s: &'s dyn EntrySource,
    key: &[u8],
    value: &[u8],
    at: u64,
) -> Result<Found<'s>> {
    let ctx = |e: Error| e.context(s.place());
    let mut e = IndexEntry::default();
    MappedReader::decode_entry(&mut e, key, value, at).map_err(ctx)?;
    let dtype = entry_dtype(key, &e).map_err(ctx)?;
    if e.num_slices != 0 {
        return check_partition(key, &e, dtype, value, at, s.is_v2())
            .map(Found::Partitioned)
            .map_err(ctx);
    }
    s.view(key, &e, at).map(Found::Whole)
}

/// The view of slice `i` of partitioned tensor `p` of `s`: its entry looked up and checked
/// against the tensor's, its record read.
pub(crate) fn piece_in<'s>(
    s: &'s dyn EntrySource,
    p: &Partition,
    i: usize,
) -> Result<TensorView<'s>> {
    let (e, _, at, piece) =
        piece_entry(&s.index_table(), p, i).map_err(|e| e.context(s.place()))?;
    let key = piece.key.clone();
    Ok(s.view(&key, &e, at)?.into_piece(&p.name, piece))
}
