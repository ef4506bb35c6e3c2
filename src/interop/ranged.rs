//! A native file ([`RangedReader`]) and a sharded checkpoint ([`RangedSharded`]) read by ranges
//! as interop stores: [`TensorStore`] for the ranged reader of `native::ranged`, so every
//! command that reads a store reads them the same from a bucket (`s3://bucket/dir/PREFIX`, or
//! its `PREFIX.index`) and from a file read with `pread`. Built with or without object storage.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::interop::native::native_layout;
use crate::interop::store::{
    Format, Kind, LoadedTensor, StoreLayout, TensorData, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};
use crate::native::ranged::{EntryInfo, RangedReader, RangedSharded, RemoteTensor};
use crate::native::{Metadata, Region};

/// What a listing of the index says of a tensor (a tensor stored in slices: its whole shape and
/// bytes); of a single remote file's index too ([`super::remote`]).
pub(super) fn info(e: EntryInfo) -> TensorInfo {
    let nbytes = if e.slices != 0 {
        crate::record::data_len(e.dtype, &e.shape).unwrap_or(u64::MAX)
    } else {
        e.size
    };
    if e.dtype == crate::DType::Bytes {
        // A bytes value (SPEC.md 6.1): listed as its value, as a local file's.
        return TensorInfo {
            name: e.name,
            kind: Kind::Bytes,
            shape: Vec::new(),
            lod: Vec::new(),
            nbytes: crate::native::bytes_value::value_len(nbytes).unwrap_or(nbytes),
        };
    }
    TensorInfo {
        name: e.name,
        kind: Kind::Numeric(e.dtype),
        shape: e.shape,
        lod: Vec::new(),
        nbytes,
    }
}

/// Tensor `name` as read, as a store returns it.
pub(super) fn loaded(name: &[u8], t: RemoteTensor) -> Result<LoadedTensor<'static>> {
    if t.dtype == crate::DType::Bytes {
        // Its checksum was checked when it was read; its encoding is checked here.
        let value =
            crate::native::bytes_value::decode(&t.data, &crate::name::display(name), 0)?.to_vec();
        return Ok(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: Kind::Bytes,
                shape: Vec::new(),
                lod: Vec::new(),
                nbytes: value.len() as u64,
            },
            data: TensorData::Bytes(Cow::Owned(value)),
        });
    }
    Ok(LoadedTensor {
        info: TensorInfo {
            name: name.to_vec(),
            kind: Kind::Numeric(t.dtype),
            shape: t.shape,
            lod: t.lod,
            nbytes: t.data.len() as u64,
        },
        data: TensorData::Bytes(Cow::Owned(t.data)),
    })
}

/// A [`DataLocation`](crate::interop::DataLocation) of what [`crate::remote::locate`] gives.
fn location((file, offset, len, crc): (String, u64, u64, u32)) -> crate::interop::DataLocation {
    crate::interop::DataLocation {
        path: file.into(),
        offset,
        len,
        crc32c: Some(crc),
    }
}

/// [`TensorStore::slice_locations`] of a remote checkpoint, single or sharded.
fn slice_locations(
    s: &dyn crate::native::ranged::EntrySource,
    name: &[u8],
) -> Result<Vec<crate::interop::SliceLocation>> {
    Ok(crate::remote::locate_slices(s, name)?
        .into_iter()
        .map(|(region, at)| crate::interop::SliceLocation {
            region,
            location: location(at),
        })
        .collect())
}

impl TensorStore for RangedSharded {
    fn format(&self) -> Format {
        Format::Native
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<crate::interop::DataLocation>> {
        Ok(crate::remote::locate(self, name)?.map(location))
    }

    fn slice_locations(&self, name: &[u8]) -> Result<Vec<crate::interop::SliceLocation>> {
        slice_locations(self, name)
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let listed = self.list_from(start)?;
        Ok(Box::new(listed.into_iter().map(move |e| {
            with_lod(e, self.index().location(), |n| self.lod(n))
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.header().metadata.clone())
    }

    fn layout(&self) -> Result<StoreLayout> {
        // The index object's layout, as a mapped checkpoint's index file gives it.
        Ok(super::native::with_data_files(
            self.index().layout()?,
            self.header(),
            self.prefix().to_string(),
            |k| self.data_location(k),
        ))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        // Owned as read (a view's bytes would be copied out of it once more), checked against
        // its checksum when read.
        match crate::native::ranged::get_whole_data(self, name) {
            Ok(t) => t.map(|t| loaded(name, t)).transpose(),
            // Stored in slices (in one or several data objects): assembled, every slice read
            // checked against its checksum.
            Err(Error::Sliced { .. }) => {
                let Some(i) = self.info(name)? else {
                    return Ok(None);
                };
                Ok(self
                    .get_slice(name, &Region::full(&i.shape))?
                    .map(|t| super::native::loaded_region(name, t)))
            }
            Err(e) => Err(e),
        }
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        Ok(self
            .get_slice(name, region)?
            .map(|t| super::native::loaded_region(name, t)))
    }

    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        // The same checks and counts as a mapped checkpoint's verify.
        let r = RangedSharded::verify(self, &self.index().options().load)?;
        Ok(VerifySummary {
            tensors: r.tensors,
            data_bytes: r.data_bytes,
            checksums: r.blocks + r.records,
        })
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        // The tensor's own index block, not a listing of the index from it on.
        self.entry_of(name)?
            .map(|e| with_lod(e, self.index().location(), |n| self.lod(n)))
            .transpose()
    }
}

impl TensorStore for RangedReader {
    fn format(&self) -> Format {
        Format::Native
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<crate::interop::DataLocation>> {
        Ok(crate::remote::locate(self, name)?.map(location))
    }

    fn slice_locations(&self, name: &[u8]) -> Result<Vec<crate::interop::SliceLocation>> {
        slice_locations(self, name)
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let listed = self.list_from(start)?;
        Ok(Box::new(listed.into_iter().map(move |e| {
            with_lod(e, self.location(), |n| self.lod(n))
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.header().metadata.clone())
    }

    fn layout(&self) -> Result<StoreLayout> {
        // The whole index, in at most one request beyond what the open read.
        let (bytes, base) = self.index_bytes()?;
        let table = self.table_over(&bytes, base).figures()?;
        Ok(native_layout(self.header(), self.source().len(), table))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        match self.get_ahead(name) {
            Ok(t) => t.map(|t| loaded(name, t)).transpose(),
            // Stored in slices: assembled, every slice read checked against its checksum
            // (as a mapped file's store does).
            Err(Error::Sliced { .. }) => {
                let Some(e) = self.entry_of(name)? else {
                    return Ok(None);
                };
                Ok(self
                    .get_slice(name, &Region::full(&e.shape))?
                    .map(|t| super::native::loaded_region(name, t)))
            }
            Err(e) => Err(e),
        }
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        Ok(self
            .get_slice(name, region)?
            .map(|t| super::native::loaded_region(name, t)))
    }

    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        // The same checks and counts as a mapped file's verify; the records fetched by
        // parallel ranged GETs (RemoteOptions::load).
        let r = RangedReader::verify(self, &self.options().load)?;
        Ok(VerifySummary {
            tensors: r.tensors,
            data_bytes: r.data_bytes,
            checksums: r.blocks + r.records,
        })
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        // The tensor's own index block (one request at most), not a listing of the index.
        self.entry_of(name)?
            .map(|e| with_lod(e, self.location(), |n| self.lod(n)))
            .transpose()
    }
}

/// What a listing says of `e`, with its LoD (read by `lod` from its record's header, as a
/// mapped file's listing reads it) when it has some; `place` names the file in messages.
fn with_lod(
    e: EntryInfo,
    place: &str,
    lod: impl Fn(&[u8]) -> Result<Option<Vec<Vec<u64>>>>,
) -> Result<TensorInfo> {
    let lod = if e.lod_levels > 0 {
        lod(&e.name)?.ok_or_else(|| Error::NotFound {
            name: crate::name::display(&e.name),
            path: place.to_string(),
        })?
    } else {
        Vec::new()
    };
    Ok(TensorInfo { lod, ..info(e) })
}
