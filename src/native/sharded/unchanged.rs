//! Detecting unchanged tensors for incremental saves (SPEC.md 12.5): whether
//! a tensor about to be saved is byte-identical to the tensor of the same name in an earlier
//! checkpoint, decided by size and CRC32C and confirmed by comparing the bytes.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::native::entry::Partition;
use crate::native::iter::Found;
use crate::native::mapped::MappedReader;
use crate::native::region::Region;
use crate::native::sharded::reuse::SliceAt;
use crate::native::writer::Tensor;

impl MappedReader {
    /// Whether this checkpoint (an earlier save: a single file or a sharded checkpoint) holds
    /// the tensor `name` byte-identical to `tensor`: the same dtype, shape, LoD and data bytes.
    ///
    /// A tensor of another size is told apart without reading anything but the index; one of
    /// the same size costs a CRC32C of `tensor.data`, compared with the stored CRC (no byte of
    /// the earlier data is read when they differ); equal CRCs are confirmed by comparing the
    /// bytes, so a CRC collision never passes a changed tensor as unchanged.
    ///
    /// `Ok(false)` when the tensor is absent or stored in slices here (a tensor stored in
    /// slices is not compared as a whole). Errors when its entry or record header is corrupt.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.pdx");
    /// use paramdex::{DType, Reader, Tensor, Writer};
    /// let mut w = Writer::create(&path)?;
    /// w.add("w", Tensor::new(DType::UInt8, &[3], &[1, 2, 3]))?;
    /// w.finish()?;
    /// let base = Reader::open(&path)?;
    /// assert!(base.holds_unchanged("w", Tensor::new(DType::UInt8, &[3], &[1, 2, 3]))?);
    /// assert!(!base.holds_unchanged("w", Tensor::new(DType::UInt8, &[3], &[1, 2, 4]))?);
    /// assert!(!base.holds_unchanged("w", Tensor::new(DType::Int8, &[3], &[1, 2, 3]))?);
    /// assert!(!base.holds_unchanged("v", Tensor::new(DType::UInt8, &[3], &[1, 2, 3]))?);
    /// # Ok::<(), paramdex::Error>(())
    /// ```
    pub fn holds_unchanged(&self, name: impl AsRef<[u8]>, tensor: Tensor<'_>) -> Result<bool> {
        let base = match self.get(name.as_ref()) {
            Ok(Some(v)) => v,
            Ok(None) | Err(Error::Sliced { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        if base.dtype() != tensor.dtype || base.shape() != tensor.shape {
            return Ok(false);
        }
        if base.data().len() != tensor.data.len() {
            return Ok(false);
        }
        let lod = base.lod()?;
        if lod.levels() != tensor.lod.len()
            || tensor
                .lod
                .iter()
                .enumerate()
                .any(|(i, level)| !lod.level(i).eq(level.iter().copied()))
        {
            return Ok(false);
        }
        Ok(same_bytes(
            unmask_crc(base.stored_crc()),
            base.data(),
            tensor.data,
            crc32c,
        ))
    }
}

impl MappedReader {
    /// Whether this checkpoint holds the stored slice `s` byte-identical to `data`
    /// ([`Reader::holds_unchanged_slice`](crate::Reader::holds_unchanged_slice)).
    pub(crate) fn holds_unchanged_slice(&self, s: SliceAt<'_>, data: &[u8]) -> Result<bool> {
        let Some((p, i)) = self.stored_slice(s.name, s.dtype, s.full_shape, s.region)? else {
            return Ok(false);
        };
        let piece = self.piece(&p, i)?;
        Ok(same_bytes(
            unmask_crc(piece.stored_crc()),
            piece.data(),
            data,
            crc32c,
        ))
    }

    /// The tensor `name` stored in slices of `dtype` and `full_shape`, and the position of
    /// `region` among its stored slices, if it is one of them.
    pub(in crate::native) fn stored_slice(
        &self,
        name: &[u8],
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<Option<(Partition, usize)>> {
        Ok(match self.find(name)? {
            Some(Found::Partitioned(p)) if p.dtype == dtype && p.shape.as_slice() == full_shape => {
                p.regions.iter().position(|r| r == region).map(|i| (p, i))
            }
            _ => None,
        })
    }
}

/// The decision of [`Reader::holds_unchanged`] once dtype, shape and LoD agree: `data` is
/// unchanged from `base` (whose stored, unmasked CRC32C is `stored_crc`) if the sizes agree,
/// `crc(data)` equals `stored_crc`, and the bytes are equal. `crc` is a parameter so that tests
/// can force a CRC match.
pub(crate) fn same_bytes(
    stored_crc: u32,
    base: &[u8],
    data: &[u8],
    crc: impl FnOnce(&[u8]) -> u32,
) -> bool {
    base.len() == data.len() && crc(data) == stored_crc && base == data
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::writer::Writer;
    use crate::DType;

    #[test]
    fn decision() {
        let base = [1u8, 2, 3, 4];
        let c = crc32c(&base);
        assert!(same_bytes(c, &base, &[1, 2, 3, 4], crc32c));
        assert!(!same_bytes(c, &base, &[1, 2, 3, 5], crc32c));
        assert!(!same_bytes(c, &base, &[1, 2, 3], crc32c));
        // A forced CRC match (a collision) with other bytes: the byte comparison refuses it.
        assert!(!same_bytes(c, &base, &[9, 9, 9, 9], |_| c));
        assert!(same_bytes(c, &base, &[1, 2, 3, 4], |_| c));
        // A size mismatch is decided before any CRC is computed.
        assert!(!same_bytes(c, &base, &[1, 2], |_| unreachable!()));
    }

    #[test]
    fn lod_and_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pdx");
        let lod = vec![vec![0u64, 1, 2]];
        let mut w = Writer::create(&path).unwrap();
        w.add(
            "seq",
            Tensor::new(DType::UInt8, &[2, 2], &[1, 2, 3, 4]).with_lod(&lod),
        )
        .unwrap();
        w.add("plain", Tensor::new(DType::UInt8, &[4], &[1, 2, 3, 4]))
            .unwrap();
        w.finish().unwrap();
        let r = MappedReader::open(&path).unwrap();
        let data = [1u8, 2, 3, 4];
        let t = Tensor::new(DType::UInt8, &[2, 2], &data);
        assert!(r.holds_unchanged("seq", t.with_lod(&lod)).unwrap());
        assert!(!r.holds_unchanged("seq", t).unwrap());
        let other = vec![vec![0u64, 2]];
        assert!(!r.holds_unchanged("seq", t.with_lod(&other)).unwrap());
        assert!(r
            .holds_unchanged("plain", Tensor::new(DType::UInt8, &[4], &data))
            .unwrap());
        assert!(!r
            .holds_unchanged("plain", Tensor::new(DType::UInt8, &[2, 2], &data))
            .unwrap());
        assert!(!r
            .holds_unchanged(
                "plain",
                Tensor::new(DType::UInt8, &[4], &data).with_lod(&lod)
            )
            .unwrap());
    }
}
