//! Slices of a larger tensor (SPEC.md 13), the writer's side: [`Writer::add_slice`] and the
//! streamed slice's start check a slice against the earlier ones of its tensor (same dtype and
//! full shape, no overlap, a key of its own) and write it as a record under its slice key;
//! the writer remembers each sliced tensor's regions, and `finish` adds one full entry per
//! tensor listing them. Its own file because the bookkeeping of sliced tensors is apart from
//! the writing of records and of the index (`writer.rs`).

use crate::dtype::DType;
use crate::error::{ensure_within, Error, Result};
use crate::name::{self, MAX_NAME_LEN};
use crate::native::entry::{encode_partitioned, Dims};
use crate::native::region::Region;
use crate::native::slice_key;
use crate::native::MAX_SLICES;

use super::{BegunRecord, Partitioned, Pending, Tensor, Writer};

/// What `check_slice` found out about a slice to add.
pub(in crate::native) struct SlicePlan {
    /// The tensor's name.
    pub(in crate::native) name: Vec<u8>,
    /// The slice's key (`slice_key::encode`).
    pub(in crate::native) key: Vec<u8>,
    /// Bytes of its data.
    pub(in crate::native) data_len: u64,
}

impl Writer {
    /// Starts the record of a slice that [`Writer::check_slice`] planned (its key already
    /// checked), for a streamed slice.
    pub(in crate::native) fn begin_slice_record(
        &mut self,
        plan: &SlicePlan,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<BegunRecord> {
        let begun = self.write_record_header(
            &plan.key,
            dtype,
            &region.len,
            &[],
            Some(full_shape),
            plan.data_len,
        )?;
        // From here the slice's stream finishes or the writer is unusable (a dropped stream
        // poisons it), so its tensor may list it.
        self.register_slice(plan, dtype, full_shape, region);
        Ok(begun)
    }

    /// Adds the full entry of every tensor this writer holds slices of (no record; SPEC.md
    /// 13.1). The names were checked when their first slice was added.
    pub(super) fn push_partitioned(&mut self) {
        if self.partitioned.is_empty() {
            return;
        }
        let mut all: Vec<(Vec<u8>, Partitioned)> =
            std::mem::take(&mut self.partitioned).into_iter().collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, p) in &all {
            let extents: Vec<_> = p.regions.iter().map(|r| r.extents(&p.full_shape)).collect();
            let value_start = self.values.len();
            encode_partitioned(&mut self.values, p.dtype, &p.full_shape, &extents);
            self.entries.push(Pending {
                name_start: self.names.len(),
                name_len: name.len(),
                value_start,
                value_len: self.values.len() - value_start,
            });
            self.names.extend_from_slice(name);
        }
        // The entries are no longer in name order (nor de-duplicated by `seen`, which is not
        // needed any more).
        self.sorted = false;
    }

    /// Checks a slice before anything is written: `region` lies inside `full_shape` (rank at
    /// least 1) and is not the whole tensor (a whole tensor is an ordinary one, as in
    /// TensorFlow: the caller adds it as such, `Ok(None)`); the name takes slices (not a whole
    /// tensor already, not reserved); dtype and full shape agree with earlier slices of the
    /// same tensor, which it does not overlap; its key is new.
    pub(in crate::native) fn check_slice(
        &mut self,
        name: &[u8],
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<Option<SlicePlan>> {
        self.check_usable()?;
        let invalid = |detail: String| Error::InvalidTensor {
            name: name::display(name),
            detail,
        };
        if !region.is_within(full_shape) {
            return Err(invalid(format!(
                "slice at {:?} of lengths {:?} does not lie inside the shape {full_shape:?}",
                region.start, region.len
            )));
        }
        // Validates the full shape (rank, byte count) as a tensor of its own would be; the
        // record carries it, so every dimension must be an int64 as Paddle's dims are.
        self.validate(name, dtype, full_shape, &[])?;
        if let Some(d) = full_shape.iter().find(|&&d| d > i64::MAX as u64) {
            return Err(invalid(format!("dimension {d} exceeds i64::MAX")));
        }
        if region.is_full(full_shape) {
            return Ok(None);
        }
        if full_shape.is_empty() {
            return Err(invalid("a scalar has no slices".into()));
        }
        let data_len = self.validate(name, dtype, &region.len, &[])?;
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        ensure_within("tensor name length", name.len(), MAX_NAME_LEN, None)?;
        if self.nul_name || name.first() == Some(&0) {
            return Err(self.nul_reserved());
        }
        match self.partitioned.get(name) {
            Some(p) => {
                if p.dtype != dtype || p.full_shape.as_slice() != full_shape {
                    return Err(invalid(format!(
                        "a slice of {dtype} {full_shape:?}, but earlier slices are of {} {:?}",
                        p.dtype,
                        p.full_shape.as_slice()
                    )));
                }
                ensure_within("slices of a tensor", p.regions.len() + 1, MAX_SLICES, None)?;
                if let Some(other) = p.regions.iter().find(|r| r.overlaps(region)) {
                    return Err(invalid(format!(
                        "slice at {:?} of lengths {:?} overlaps the slice at {:?} of lengths {:?} \
                         added before",
                        region.start, region.len, other.start, other.len
                    )));
                }
            }
            None => {
                if self.has_entry(name)? {
                    return Err(Error::DuplicateName {
                        name: name::display(name),
                    });
                }
            }
        }
        let key = slice_key::encode(name, &region.extents(full_shape));
        self.check_key(&key)?;
        Ok(Some(SlicePlan {
            name: name.to_vec(),
            key,
            data_len,
        }))
    }

    /// Records a slice that `check_slice` accepted (its entry is pushed when its data is in).
    fn register_slice(
        &mut self,
        plan: &SlicePlan,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) {
        self.partitioned
            .entry(plan.name.clone())
            .or_insert_with(|| Partitioned {
                dtype,
                full_shape: Dims::from_slice(full_shape),
                regions: Vec::new(),
            })
            .regions
            .push(region.clone());
        self.slice_entries += 1;
    }

    /// Adds a slice of a larger tensor, as a tensor-parallel rank holds one (SPEC.md 13): the
    /// tensor `name` has dtype `dtype` and shape `full_shape`; this call stores the part of it
    /// that `region` covers, whose row-major bytes are `data`. Slices of one tensor may be
    /// added by several calls (and by several writers of one sharded save); they must agree
    /// on dtype and full shape and must not overlap. A region that is the whole tensor adds an
    /// ordinary tensor, as TensorFlow does.
    ///
    /// The file becomes format version 2, where names starting with a NUL byte are reserved.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("m.pdx");
    /// use paramdex::{DType, Reader, Region, Writer};
    /// let mut w = Writer::create(&path)?;
    /// // Rows 2..4 of a [4, 3] float32 tensor.
    /// let rows = Region::new(vec![2, 0], vec![2, 3]).unwrap();
    /// let data: Vec<u8> = (0..6u8).flat_map(|i| f32::from(i).to_le_bytes()).collect();
    /// w.add_slice("emb", DType::Float32, &[4, 3], &rows, &data)?;
    /// w.finish()?;
    /// let r = Reader::open(&path)?;
    /// let got = r.get_slice("emb", &Region::new(vec![3, 1], vec![1, 2]).unwrap())?.unwrap();
    /// assert_eq!(got.as_slice::<f32>()?, &[4.0, 5.0]);
    /// # Ok::<(), paramdex::Error>(())
    /// ```
    ///
    /// Errors (nothing is written): a region outside the shape or of another rank, a scalar,
    /// `data` of the wrong length, a dtype or full shape other than earlier slices', an overlap
    /// with an earlier slice, a name already added whole, a name starting with a NUL byte.
    pub fn add_slice(
        &mut self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
        data: &[u8],
    ) -> Result<()> {
        let name = name.as_ref();
        let Some(plan) = self.check_slice(name, dtype, full_shape, region)? else {
            return self.add(name, Tensor::new(dtype, full_shape, data));
        };
        if plan.data_len != data.len() as u64 {
            return Err(Error::InvalidTensor {
                name: name::display(name),
                detail: format!(
                    "slice of lengths {:?} of {dtype} needs {} bytes but {} were given",
                    region.len,
                    plan.data_len,
                    data.len()
                ),
            });
        }
        self.write_tensor(
            &plan.key,
            Tensor::new(dtype, &region.len, data),
            plan.data_len,
            Some(full_shape),
        )?;
        // Only a slice whose record and entry are in is listed in its tensor's entry.
        self.register_slice(&plan, dtype, full_shape, region);
        Ok(())
    }
}
