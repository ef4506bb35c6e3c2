//! A sharded checkpoint in an object store as one of the interop stores: [`TensorStore`] for
//! [`RemoteSharded`], so every command that reads a store reads `s3://bucket/dir/PREFIX` (or
//! its `PREFIX.index`) of a sharded checkpoint (issue 15).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::interop::store::{
    Format, Kind, LoadedTensor, StoreLayout, TensorData, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};
use crate::native::{Metadata, Region};
use std::sync::Arc;

use crate::remote::{
    object_data_opener, ObjectLocation, RangeRead, RemoteEntry, RemoteOptions, RemoteSharded,
    RemoteTensor,
};

/// What a listing of the index says of a tensor (a tensor stored in slices: its whole shape and
/// bytes); of a single remote file's index too ([`super::remote`]).
pub(super) fn info(e: RemoteEntry) -> TensorInfo {
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

/// The info of tensor `name` from a listing that starts at `name` (`None` if its first entry
/// is another tensor).
pub(super) fn info_named(listed: Vec<RemoteEntry>, name: &[u8]) -> Option<TensorInfo> {
    listed
        .into_iter()
        .next()
        .filter(|e| e.name == name)
        .map(info)
}

/// A listing as [`TensorStore::scan`] returns it.
pub(super) fn infos(listed: Vec<RemoteEntry>) -> TensorInfos<'static> {
    Box::new(listed.into_iter().map(|e| Ok(info(e))))
}

impl TensorStore for RemoteSharded {
    fn format(&self) -> Format {
        Format::Native
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<crate::interop::DataLocation>> {
        Ok(
            crate::remote::locate(self, name)?.map(|(file, offset, len, crc)| {
                crate::interop::DataLocation {
                    path: file.into(),
                    offset,
                    len,
                    crc32c: Some(crc),
                }
            }),
        )
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(infos(self.list_from(start)?))
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
        match self.get(name) {
            Ok(t) => t.map(|t| loaded(name, t)).transpose(),
            // Stored in slices (in one or several data objects): assembled, every slice read
            // checked against its checksum.
            Err(Error::Sliced { .. }) => {
                let Some(i) = self.info(name)? else {
                    return Ok(None);
                };
                self.get_slice(name, &Region::full(&i.shape))?
                    .map(|t| loaded(name, t))
                    .transpose()
            }
            Err(e) => Err(e),
        }
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        self.get_slice(name, region)?
            .map(|t| loaded(name, t))
            .transpose()
    }

    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        // The same checks and counts as a mapped checkpoint's verify.
        let r = RemoteSharded::verify(self, &self.index().options().load)?;
        Ok(VerifySummary {
            tensors: r.tensors,
            data_bytes: r.data_bytes,
            checksums: r.blocks + r.records,
        })
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        Ok(info_named(self.list_from(name)?, name))
    }
}

/// Opens the sharded checkpoint at `prefix` as a store, from its index object `index` (already
/// opened by the URL dispatcher, so its first read is not made twice); each data object
/// `PREFIX.data-k-of-N` is opened when first read (see [`RemoteSharded::shard`]).
pub(crate) fn open_sharded_at(
    prefix: &ObjectLocation,
    index: Arc<dyn RangeRead>,
    opts: RemoteOptions,
) -> Result<Box<dyn TensorStore>> {
    let open_data = object_data_opener(
        prefix.store.clone(),
        prefix.runtime.clone(),
        prefix.path.as_ref(),
        &prefix.url,
        opts.tail_bytes,
    );
    Ok(Box::new(RemoteSharded::open(
        index,
        prefix.url.clone(),
        open_data,
        opts,
    )?))
}
