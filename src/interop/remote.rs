//! A native file in an object store as one of the interop stores: [`TensorStore`] for
//! [`RemoteReader`], so every command that reads a store reads a URL (issue 15).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::interop::store::{
    Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use crate::native::Metadata;
use crate::remote::{RemoteEntry, RemoteReader};

fn info(e: RemoteEntry) -> TensorInfo {
    let nbytes = if e.slices != 0 {
        crate::record::data_len(e.dtype, &e.shape).unwrap_or(u64::MAX)
    } else {
        e.size
    };
    TensorInfo {
        name: e.name,
        kind: Kind::Numeric(e.dtype),
        shape: e.shape,
        lod: Vec::new(),
        nbytes,
    }
}

impl TensorStore for RemoteReader {
    fn format(&self) -> Format {
        Format::Native
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(Box::new(
            self.list_from(start)?.into_iter().map(|e| Ok(info(e))),
        ))
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.header().metadata.clone())
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.get_ahead(name)? else {
            return Ok(None);
        };
        Ok(Some(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: Kind::Numeric(t.dtype),
                shape: t.shape,
                lod: Vec::new(),
                nbytes: t.data.len() as u64,
            },
            data: TensorData::Bytes(Cow::Owned(t.data)),
        }))
    }

    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        // Every tensor stored whole, fetched by parallel ranged GETs (RemoteOptions::load)
        // and checked against its CRC32C (the index blocks were checked as they were read).
        let mut out = VerifySummary {
            tensors: 0,
            data_bytes: 0,
            checksums: 0,
        };
        if let Some(e) = self.list_from(b"")?.into_iter().find(|e| e.slices != 0) {
            return Err(Error::Unsupported(format!(
                "{}: verifying tensors stored in slices over the network is not built yet ({})",
                self.location(),
                crate::name::display(&e.name)
            )));
        }
        self.for_each(&self.options().load, |_, t| {
            out.tensors += 1;
            out.data_bytes += t.data.len() as u64;
            out.checksums += 1;
            Ok(())
        })?;
        Ok(out)
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        Ok(self
            .list_from(name)?
            .into_iter()
            .next()
            .filter(|e| e.name == name)
            .map(info))
    }
}

/// Opens the store at `url` (see [`crate::remote::open_url`]).
pub(crate) fn open_url_store(url: &str) -> Result<Box<dyn TensorStore>> {
    let config = crate::remote::RemoteConfig::from_env()?;
    let opts = crate::remote::RemoteOptions::with_config(&config);
    let src = crate::remote::open_url_with(url, opts.tail_bytes, &config)?;
    match RemoteReader::open(src, opts) {
        Ok(r) => Ok(Box::new(r)),
        Err(Error::Unsupported(d)) => Err(Error::Unsupported(d)),
        Err(e) => Err(e),
    }
}
