//! A sharded checkpoint in a bucket as the base of an incremental save (SPEC.md 12.5): what a
//! shard writer asks of its base ([`ReuseBase`]), answered by ranged reads of the index and
//! data objects, every entry checked against its data object as a read checks it. Whether a
//! tensor is unchanged is decided as for a mapped base (dtype, shape, LoD, size, CRC32C, then
//! the bytes): the base's bytes are fetched only when the CRCs agree.

use std::sync::Arc;

use crate::error::Result;
use crate::format::{crc32c, unmask_crc};
use crate::native::ranged::entry_source::EntrySource;
use crate::native::ranged::sharded::RangedSharded;
use crate::native::{
    decode_slices, slice_key, FileHeader, IndexEntry, Place, ReuseBase, SliceAt, Tensor,
};

impl RangedSharded {
    /// The stored slice `region` of `name` (stored in slices of `dtype` and `full_shape`):
    /// its slice key, entry and block offset.
    fn stored_slice(&self, s: SliceAt<'_>) -> Result<Option<(Vec<u8>, IndexEntry, u64)>> {
        let Some((e, value, at)) = self.index().lookup(s.name)? else {
            return Ok(None);
        };
        if e.num_slices == 0 || e.dtype() != Some(s.dtype) || e.shape.as_slice() != s.full_shape {
            return Ok(None);
        }
        for ext in decode_slices(&value, at, e.shape.len())? {
            if crate::native::region::resolve(&ext, s.full_shape).is_ok_and(|r| &r == s.region) {
                let key = slice_key::encode(s.name, &ext);
                return Ok(self
                    .index()
                    .lookup(&key)?
                    .map(|(se, _, sat)| (key, se, sat)));
            }
        }
        Ok(None)
    }

    /// Whether the stored entry `e` (of `key`, in the block at `at`) holds exactly `data`:
    /// sizes, then CRC32C, then (the CRCs agreeing) the base's bytes fetched and compared.
    fn same_data(
        &self,
        key: &[u8],
        e: &IndexEntry,
        at: u64,
        data: &[u8],
    ) -> Result<Option<Vec<Vec<u64>>>> {
        if e.size != data.len() as u64 {
            return Ok(None);
        }
        let crc = crc32c(data);
        if crc != unmask_crc(e.crc32c) {
            return Ok(None);
        }
        // The data object opened and checked; the bytes checked against their CRC32C.
        let stored = self.data(key, e, at)?;
        Ok(
            crate::native::same_bytes(unmask_crc(e.crc32c), &stored.data, data, |_| crc)
                .then_some(stored.lod),
        )
    }
}

impl ReuseBase for RangedSharded {
    fn shown(&self) -> String {
        self.index().location().to_string()
    }

    fn header(&self) -> &FileHeader {
        RangedSharded::header(self)
    }

    fn place(&self) -> Result<Arc<dyn Place>> {
        Ok(self.place.clone())
    }

    fn entry(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        Ok(self.index().lookup(key)?.map(|(e, _, _)| e))
    }

    fn whole_size(&self, name: &[u8]) -> Result<Option<u64>> {
        let Some((e, _, at)) = self.index().lookup(name)? else {
            return Ok(None);
        };
        let k = self.object_of(name, &e, at)?;
        self.shard(k)?.check_entry(name, &e, at).map(Some)
    }

    fn slice_size(&self, s: SliceAt<'_>) -> Result<Option<u64>> {
        let Some((key, e, at)) = self.stored_slice(s)? else {
            return Ok(None);
        };
        let k = self.object_of(&key, &e, at)?;
        self.shard(k)?.check_entry(&key, &e, at).map(Some)
    }

    fn held_bytes(&self, _k: u32) -> Result<Option<&[u8]>> {
        Ok(None)
    }

    fn holds_unchanged(&self, name: &[u8], tensor: Tensor<'_>) -> Result<bool> {
        let Some((e, _, at)) = self.index().lookup(name)? else {
            return Ok(false);
        };
        if e.num_slices != 0
            || e.dtype() != Some(tensor.dtype)
            || e.shape.as_slice() != tensor.shape
            || usize::try_from(e.lod_levels).ok() != Some(tensor.lod.len())
        {
            return Ok(false);
        }
        Ok(self
            .same_data(name, &e, at, tensor.data)?
            .is_some_and(|lod| lod.as_slice() == tensor.lod))
    }

    fn holds_unchanged_slice(&self, s: SliceAt<'_>, data: &[u8]) -> Result<bool> {
        let Some((key, e, at)) = self.stored_slice(s)? else {
            return Ok(false);
        };
        Ok(self.same_data(&key, &e, at, data)?.is_some())
    }
}
