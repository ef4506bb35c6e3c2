//! Index values: the header entry (key `""`) and tensor entries.
//!
//! A tensor entry is a protobuf message whose fields 1-7 are TensorFlow's `BundleEntryProto` and
//! whose fields 16-19 are paramdex's (`proto/paramdex.proto`, SPEC.md 5.2). It is
//! encoded and decoded by hand here (on [`crate::format::pbwire`]), because `get` decodes one
//! per lookup and must not allocate; tests cross-check this codec against prost's generated
//! code. The header is decoded with prost (once per open).

use smallvec::SmallVec;

use crate::error::{ensure_within, Error, Result};
use crate::format::pbwire::{self, Tag, WireType};
use crate::format::{put_varint64, varint_len};
use crate::native::slice_key::Extent;
use crate::native::MAX_SLICES;

/// TensorFlow's `DT_STRING`: the entry type of a bytes value (SPEC.md 6.1).
pub(crate) const DT_STRING: i32 = 7;

/// Shape dimensions, inline up to rank 6.
pub type Dims = SmallVec<[u64; 6]>;

/// A decoded tensor entry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IndexEntry {
    /// TensorFlow `DataType` number (field 1).
    pub tf_dtype: i32,
    /// Shape (field 2); every dimension is >= 0.
    pub shape: Dims,
    /// Data shard (field 3); always 0 in native files.
    pub shard_id: i32,
    /// Absolute offset of the first data byte (field 4).
    pub offset: u64,
    /// Data bytes (field 5).
    pub size: u64,
    /// Masked CRC32C of the data (field 6).
    pub crc32c: u32,
    /// Number of `slices` (field 7): non-zero for TensorFlow partitioned-variable entries.
    pub num_slices: u32,
    /// Bytes from the record start to the first data byte (field 16); 0 when absent.
    pub record_header_len: u32,
    /// LoD levels of the record (field 17).
    pub lod_levels: u32,
    /// paramdex's number of a dtype TensorFlow has no number for (field 18; `tf_dtype` is then
    /// `DT_UINT8`), 0 when absent ([`crate::DType::pdx_code`], SPEC.md 6).
    pub pdx_dtype: u32,
    /// The codec of a compressed record's data (field 19, format version 4, SPEC.md 3.4):
    /// [`size`](IndexEntry::size) is then the stored bytes and [`crc32c`](IndexEntry::crc32c)
    /// the checksum of the decoded ones; 0 (absent) for a plain record.
    pub codec: u32,
}

/// Appends a `TensorShapeProto` (field 2 of the entry) for `dims`, as TensorFlow writes it:
/// always present (a scalar is `12 00`), one `Dim` (field 2) per dimension, a zero dimension as
/// an empty `Dim`, any other as `Dim.size` (field 1). A `Dim` is at most 11 bytes, so its length
/// takes one byte.
fn put_shape(dst: &mut Vec<u8>, dims: &[u64]) {
    let dim_len = |d: u64| if d == 0 { 0 } else { 1 + varint_len(d) };
    let body: usize = dims.iter().map(|&d| 2 + dim_len(d)).sum();
    pbwire::put_tag(dst, 2, WireType::LEN);
    put_varint64(dst, body as u64);
    for &d in dims {
        pbwire::put_tag(dst, 2, WireType::LEN);
        put_varint64(dst, dim_len(d) as u64);
        if d != 0 {
            pbwire::put_varint_field(dst, 1, d);
        }
    }
}

impl IndexEntry {
    /// Appends the entry's protobuf encoding. Zero-valued scalar fields are omitted (proto3);
    /// the shape is always written. `num_slices` must be 0 (slices are written by the TensorFlow
    /// export path, not here).
    pub fn encode(&self, dst: &mut Vec<u8>) {
        debug_assert_eq!(
            self.num_slices, 0,
            "IndexEntry::encode does not write slices"
        );
        if self.tf_dtype != 0 {
            pbwire::put_varint_field(dst, 1, self.tf_dtype as i64 as u64);
        }
        // A bytes value (SPEC.md 6.1) is a scalar DT_STRING for TensorFlow; paramdex's view of
        // it is `[size]`, the record's shape. (A string tensor of shape `[k]` takes at least
        // `k + 4` bytes, so `[size]` is never a real string tensor's shape.)
        if self.tf_dtype == DT_STRING && self.pdx_dtype == 0 && self.shape[..] == [self.size] {
            put_shape(dst, &[]);
        } else {
            put_shape(dst, &self.shape);
        }
        if self.shard_id != 0 {
            pbwire::put_varint_field(dst, 3, self.shard_id as i64 as u64);
        }
        if self.offset != 0 {
            pbwire::put_varint_field(dst, 4, self.offset);
        }
        if self.size != 0 {
            pbwire::put_varint_field(dst, 5, self.size);
        }
        pbwire::put_fixed32_field(dst, 6, self.crc32c);
        if self.record_header_len != 0 {
            pbwire::put_varint_field(dst, 16, u64::from(self.record_header_len));
        }
        if self.lod_levels != 0 {
            pbwire::put_varint_field(dst, 17, u64::from(self.lod_levels));
        }
        if self.pdx_dtype != 0 {
            pbwire::put_varint_field(dst, 18, u64::from(self.pdx_dtype));
        }
        if self.codec != 0 {
            pbwire::put_varint_field(dst, 19, u64::from(self.codec));
        }
    }

    /// The entry's dtype ([`crate::DType::from_entry`]), `None` for a number paramdex does not
    /// know.
    pub fn dtype(&self) -> Option<crate::DType> {
        crate::DType::from_entry(self.tf_dtype, self.pdx_dtype)
    }

    /// The number to name in an error about an unknown dtype: the paramdex number when set,
    /// else the TensorFlow one, with the numbering it belongs to.
    pub fn dtype_code(&self) -> (&'static str, i64) {
        if self.pdx_dtype != 0 {
            ("paramdex", i64::from(self.pdx_dtype))
        } else {
            ("tensorflow", i64::from(self.tf_dtype))
        }
    }

    /// Decodes an entry. `at` is the file offset reported in errors (the entry's block).
    /// Unknown fields are skipped; malformed wire data, negative sizes, a negative or unknown-rank
    /// shape, and more than `max_rank` dimensions are errors.
    pub fn decode(buf: &[u8], at: u64, max_rank: usize) -> Result<IndexEntry> {
        let mut e = IndexEntry::default();
        e.decode_into(buf, at, max_rank)?;
        Ok(e)
    }

    /// [`IndexEntry::decode`] into `self`, which must be `IndexEntry::default()` (the lookup
    /// decodes the entry where the view is built from, so that it is not moved).
    pub(crate) fn decode_into(&mut self, buf: &[u8], at: u64, max_rank: usize) -> Result<()> {
        let bad = |detail: &str| Error::corrupt("index entry", at, detail.to_string());
        let e = self;
        let mut pos = 0usize;
        while pos < buf.len() {
            let (tag, p) = pbwire::read_tag(buf, pos).ok_or_else(|| bad("bad field tag"))?;
            pos = match (tag.field, tag.wire) {
                (1 | 3 | 4 | 5 | 16 | 17 | 18 | 19, WireType::VARINT) => {
                    let (v, p) = pbwire::read_varint(buf, p).ok_or_else(|| bad("bad varint"))?;
                    match tag.field {
                        // int32 fields: a negative value is a sign-extended 64-bit varint.
                        1 => {
                            e.tf_dtype =
                                i32::try_from(v as i64).map_err(|_| bad("dtype is not an int32"))?
                        }
                        3 => {
                            e.shard_id = i32::try_from(v as i64)
                                .map_err(|_| bad("shard_id is not an int32"))?
                        }
                        4 => {
                            e.offset =
                                u64::try_from(v as i64).map_err(|_| bad("negative offset"))?
                        }
                        5 => e.size = u64::try_from(v as i64).map_err(|_| bad("negative size"))?,
                        16 => {
                            e.record_header_len =
                                u32::try_from(v).map_err(|_| bad("record_header_len too large"))?
                        }
                        17 => {
                            e.lod_levels =
                                u32::try_from(v).map_err(|_| bad("lod_levels too large"))?
                        }
                        18 => {
                            e.pdx_dtype =
                                u32::try_from(v).map_err(|_| bad("paramdex dtype too large"))?
                        }
                        _ => e.codec = u32::try_from(v).map_err(|_| bad("codec too large"))?,
                    }
                    p
                }
                (6, WireType::FIXED32) => {
                    let (v, p) =
                        pbwire::read_fixed32(buf, p).ok_or_else(|| bad("truncated crc32c"))?;
                    e.crc32c = v;
                    p
                }
                (2 | 7, WireType::LEN) => {
                    let (len, p) = pbwire::read_varint(buf, p).ok_or_else(|| bad("bad length"))?;
                    let (body, p) = pbwire::read_bytes(buf, p, len)
                        .ok_or_else(|| bad("field runs past the entry"))?;
                    if tag.field == 2 {
                        decode_shape(&mut e.shape, body, at, max_rank)?;
                    } else {
                        e.num_slices = e.num_slices.saturating_add(1);
                    }
                    p
                }
                (0, _) => return Err(bad("field number 0")),
                (_, wire) => pbwire::skip_field(buf, p, wire)
                    .ok_or_else(|| bad("malformed unknown field"))?,
            };
        }
        if e.tf_dtype == DT_STRING && e.pdx_dtype == 0 && e.num_slices == 0 {
            // A bytes value (SPEC.md 6.1): a scalar string, seen as `[size]` bytes.
            if !e.shape.is_empty() {
                return Err(bad(
                    "a string entry that is not a scalar (a native file holds bytes values only)",
                ));
            }
            e.shape.push(e.size);
        }
        Ok(())
    }

    /// The tensor's element count (1 for a scalar), or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }
}

/// Appends the entry of a partitioned tensor as TensorFlow writes it (SPEC.md 13.1): dtype, the
/// full shape, one `TensorSliceProto` (field 7) per slice, and nothing else (no data, so no
/// shard, offset, size or checksum). An extent is written as `Extent{start, length}` with a
/// zero start omitted and the length always present, a whole dimension as an empty `Extent`.
pub fn encode_partitioned(
    dst: &mut Vec<u8>,
    dtype: crate::DType,
    shape: &[u64],
    slices: &[Vec<Extent>],
) {
    pbwire::put_varint_field(dst, 1, dtype.tf_code() as i64 as u64);
    put_shape(dst, shape);
    let mut extent = Vec::new();
    let mut slice = Vec::new();
    for s in slices {
        slice.clear();
        for e in s {
            extent.clear();
            if e.length != -1 {
                if e.start != 0 {
                    pbwire::put_varint_field(&mut extent, 1, e.start as u64);
                }
                pbwire::put_varint_field(&mut extent, 2, e.length as u64);
            }
            pbwire::put_len_field(&mut slice, 1, &extent);
        }
        pbwire::put_len_field(dst, 7, &slice);
    }
    if let Some(c) = dtype.pdx_code() {
        pbwire::put_varint_field(dst, 18, u64::from(c));
    }
}

/// The slices (field 7) of an entry whose tensor has rank `rank`: each a list of `rank`
/// extents (a missing length is a whole dimension, length -1). At most [`MAX_SLICES`]; `at` is
/// the file offset reported in errors.
pub fn decode_slices(value: &[u8], at: u64, rank: usize) -> Result<Vec<Vec<Extent>>> {
    let bad = |detail: String| Error::corrupt("index entry slices", at, detail);
    let mut out: Vec<Vec<Extent>> = Vec::new();
    let mut pos = 0usize;
    while pos < value.len() {
        let (tag, p) = pbwire::read_tag(value, pos).ok_or_else(|| bad("bad field tag".into()))?;
        pos = if tag == Tag::new(7, WireType::LEN) {
            let (body, p) = pbwire::read_len(value, p)
                .ok_or_else(|| bad("slice runs past the entry".into()))?;
            ensure_within("slices of a tensor", out.len() + 1, MAX_SLICES, Some(at))?;
            out.push(
                decode_slice(body, rank).map_err(|d| bad(format!("slice {}: {d}", out.len())))?,
            );
            p
        } else {
            pbwire::skip_field(value, p, tag.wire).ok_or_else(|| bad("malformed field".into()))?
        };
    }
    Ok(out)
}

/// One `TensorSliceProto`: `rank` extents, each `{int64 start = 1; int64 length = 2}`.
fn decode_slice(buf: &[u8], rank: usize) -> std::result::Result<Vec<Extent>, String> {
    let mut extents = Vec::with_capacity(rank.min(buf.len() / 2 + 1));
    let mut pos = 0usize;
    while pos < buf.len() {
        let (tag, p) = pbwire::read_tag(buf, pos).ok_or("bad field tag")?;
        pos = if tag == Tag::new(1, WireType::LEN) {
            let (ext, p) = pbwire::read_len(buf, p).ok_or("extent runs past the slice")?;
            if extents.len() == rank {
                return Err(format!("more than the tensor's {rank} dimensions"));
            }
            let mut e = Extent::FULL;
            let mut q = 0usize;
            while q < ext.len() {
                let (t, r) = pbwire::read_tag(ext, q).ok_or("bad extent tag")?;
                q = match (t.field, t.wire) {
                    (1 | 2, WireType::VARINT) => {
                        let (v, r) = pbwire::read_varint(ext, r).ok_or("bad extent varint")?;
                        if t.field == 1 {
                            e.start = v as i64;
                        } else {
                            e.length = v as i64;
                        }
                        r
                    }
                    (_, wire) => {
                        pbwire::skip_field(ext, r, wire).ok_or("malformed extent field")?
                    }
                };
            }
            extents.push(e);
            p
        } else {
            pbwire::skip_field(buf, p, tag.wire).ok_or("malformed slice field")?
        };
    }
    if extents.len() != rank {
        return Err(format!(
            "{} dimensions, the tensor has {rank}",
            extents.len()
        ));
    }
    Ok(extents)
}

fn decode_shape(dims: &mut Dims, buf: &[u8], at: u64, max_rank: usize) -> Result<()> {
    let bad = |detail: String| Error::corrupt("index entry shape", at, detail);
    // A repeated shape field: the last one wins.
    dims.clear();
    let mut pos = 0usize;
    while pos < buf.len() {
        let (tag, p) = pbwire::read_tag(buf, pos).ok_or_else(|| bad("bad tag".into()))?;
        pos = match (tag.field, tag.wire) {
            (2, WireType::LEN) => {
                let (len, p) =
                    pbwire::read_varint(buf, p).ok_or_else(|| bad("bad length".into()))?;
                let (dim, p) = pbwire::read_bytes(buf, p, len)
                    .ok_or_else(|| bad("dim runs past the shape".into()))?;
                // A Dim: size (field 1), other fields (the name) skipped; the last size wins.
                let mut size: i64 = 0;
                let mut q = 0usize;
                while q < dim.len() {
                    let (t, r) =
                        pbwire::read_tag(dim, q).ok_or_else(|| bad("bad dim tag".into()))?;
                    q = if t == Tag::new(1, WireType::VARINT) {
                        let (v, r) = pbwire::read_varint(dim, r)
                            .ok_or_else(|| bad("bad dim size".into()))?;
                        size = v as i64;
                        r
                    } else {
                        pbwire::skip_field(dim, r, t.wire)
                            .ok_or_else(|| bad("malformed dim field".into()))?
                    };
                }
                if size < 0 {
                    return Err(bad(format!(
                        "dimension {} has negative size {size}",
                        dims.len()
                    )));
                }
                ensure_within("tensor rank", dims.len() + 1, max_rank, Some(at))?;
                dims.push(size as u64);
                p
            }
            (3, WireType::VARINT) => {
                let (v, p) = pbwire::read_varint(buf, p).ok_or_else(|| bad("bad varint".into()))?;
                if v != 0 {
                    return Err(bad("unknown rank is not allowed in a checkpoint".into()));
                }
                p
            }
            (_, wire) => {
                pbwire::skip_field(buf, p, wire).ok_or_else(|| bad("malformed field".into()))?
            }
        };
    }
    Ok(())
}

/// A partitioned tensor's entry, checked: its slices lie inside its shape and do not overlap.
#[derive(Clone, Debug)]
pub(crate) struct Partition {
    pub(crate) name: Vec<u8>,
    pub(crate) dtype: crate::dtype::DType,
    pub(crate) shape: Dims,
    pub(crate) regions: Vec<crate::native::region::Region>,
    /// Offset of the data block holding the entry, for messages.
    pub(crate) at: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::header::FileHeader;
    use crate::native::{FORMAT_VERSION, TF_BUNDLE_VERSION};
    use crate::proto;
    use prost::Message;

    fn sample() -> IndexEntry {
        IndexEntry {
            tf_dtype: 1,
            shape: Dims::from_slice(&[3, 0, 70000]),
            shard_id: 0,
            offset: 1 << 33,
            size: 0,
            crc32c: 0xa282_ead8,
            num_slices: 0,
            record_header_len: 64,
            lod_levels: 2,
            pdx_dtype: 0,
            codec: 0,
        }
    }

    #[test]
    fn hand_codec_matches_prost() {
        for e in [
            sample(),
            IndexEntry {
                shape: Dims::new(),
                ..sample()
            },
            IndexEntry::default(),
            IndexEntry {
                tf_dtype: 4,
                pdx_dtype: crate::DType::Float4E2M1FNx2.pdx_code().unwrap(),
                ..sample()
            },
            IndexEntry {
                codec: 1,
                size: 1234,
                ..sample()
            },
        ] {
            let mut buf = Vec::new();
            e.encode(&mut buf);
            let p = proto::paramdex::PdxEntry::decode(&buf[..]).unwrap();
            assert_eq!(p.dtype, e.tf_dtype);
            let dims: Vec<u64> = p
                .shape
                .as_ref()
                .unwrap()
                .dim
                .iter()
                .map(|d| d.size as u64)
                .collect();
            assert_eq!(dims, e.shape.to_vec());
            assert_eq!(p.offset as u64, e.offset);
            assert_eq!(p.size as u64, e.size);
            assert_eq!(p.crc32c, e.crc32c);
            assert_eq!(p.record_header_len, e.record_header_len);
            assert_eq!(p.lod_levels, e.lod_levels);
            assert_eq!(p.pdx_dtype, e.pdx_dtype);
            assert_eq!(p.pdx_codec, e.codec);
            // prost's own encoding decodes to the same entry by hand.
            assert_eq!(IndexEntry::decode(&p.encode_to_vec(), 0, 254).unwrap(), e);
            assert_eq!(IndexEntry::decode(&buf, 0, 254).unwrap(), e);
        }
    }

    #[test]
    fn matches_tensorflow_bytes() {
        // Section 7 of the TF reference: {dtype 1, shape [2], size 8, crc32c 0x35e53c59}.
        let e = IndexEntry {
            tf_dtype: 1,
            shape: Dims::from_slice(&[2]),
            size: 8,
            crc32c: 0x35e5_3c59,
            ..Default::default()
        };
        let mut buf = Vec::new();
        e.encode(&mut buf);
        assert_eq!(
            buf,
            [
                0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x28, 0x08, 0x35, 0x59, 0x3c, 0xe5,
                0x35
            ]
        );
        // A zero dimension is an empty Dim: [0,3] -> 12 06 12 00 12 02 08 03.
        let mut buf = Vec::new();
        put_shape(&mut buf, &[0, 3]);
        assert_eq!(buf, [0x12, 0x06, 0x12, 0x00, 0x12, 0x02, 0x08, 0x03]);
    }

    #[test]
    fn partitioned_entries_are_tensorflows_bytes() {
        // Verified against TensorFlow 2.21: a [4,2] float tensor in two row slices.
        let rows = |start: i64| vec![Extent { start, length: 2 }, Extent::FULL];
        let mut buf = Vec::new();
        encode_partitioned(
            &mut buf,
            crate::DType::Float32,
            &[4, 2],
            &[rows(0), rows(2)],
        );
        assert_eq!(
            buf,
            [
                0x08, 0x01, 0x12, 0x08, 0x12, 0x02, 0x08, 0x04, 0x12, 0x02, 0x08, 0x02, 0x3a, 0x06,
                0x0a, 0x02, 0x10, 0x02, 0x0a, 0x00, 0x3a, 0x08, 0x0a, 0x04, 0x08, 0x02, 0x10, 0x02,
                0x0a, 0x00
            ]
        );
        assert_eq!(decode_slices(&buf, 0, 2).unwrap(), vec![rows(0), rows(2)]);
        let e = IndexEntry::decode(&buf, 0, 254).unwrap();
        assert_eq!((e.num_slices, e.size, e.offset), (2, 0, 0));
        let p = proto::paramdex::PdxEntry::decode(&buf[..]).unwrap();
        assert_eq!(p.slices.len(), 2);
        // A slice of another rank, and truncations, are errors, never panics.
        assert!(decode_slices(&buf, 0, 3).is_err());
        assert!(decode_slices(&buf, 0, 1).is_err());
        for n in 0..buf.len() {
            let _ = decode_slices(&buf[..n], 0, 2);
        }
    }

    #[test]
    fn rejects_bad_entries() {
        // negative dim
        let p = proto::paramdex::PdxEntry {
            shape: Some(proto::tensorflow::TensorShapeProto {
                dim: vec![proto::tensorflow::tensor_shape_proto::Dim {
                    size: -1,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            ..Default::default()
        };
        assert!(IndexEntry::decode(&p.encode_to_vec(), 0, 254).is_err());
        // rank above the limit
        let e = IndexEntry {
            shape: Dims::from_slice(&[1; 5]),
            ..Default::default()
        };
        let mut buf = Vec::new();
        e.encode(&mut buf);
        assert!(IndexEntry::decode(&buf, 0, 4).is_err());
        // truncations never panic
        let mut buf = Vec::new();
        sample().encode(&mut buf);
        for n in 0..buf.len() {
            let _ = IndexEntry::decode(&buf[..n], 0, 254);
        }
        // groups are rejected
        assert!(IndexEntry::decode(&[0x43], 0, 254).is_err());
    }

    #[test]
    fn header_round_trips_and_is_tensorflow_compatible() {
        let h = FileHeader {
            num_shards: 1,
            big_endian: false,
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            format_version: FORMAT_VERSION,
            alignment: 64,
            records_len: 4096,
            tensor_count: 3,
            records_sorted: true,
            metadata: crate::native::meta::Metadata::default(),
            shard_of: None,
            shards: Vec::new(),
            slice_count: 0,
            references: 0,
        };
        let b = h.encode();
        assert_eq!(FileHeader::decode(&b, 0).unwrap(), h);
        // With metadata: field 21 follows field 20, and TensorFlow's parser still reads the
        // header (it skips fields it does not know).
        let mut with_meta = h.clone();
        with_meta.metadata.insert("step", 5i64).unwrap();
        with_meta.metadata.insert("name", "x").unwrap();
        let m = with_meta.encode();
        assert_eq!(&m[..b.len()], &b[..]);
        assert_eq!(FileHeader::decode(&m, 0).unwrap(), with_meta);
        let tf = proto::tensorflow::BundleHeaderProto::decode(&m[..]).unwrap();
        assert_eq!(tf.num_shards, 1);
        assert_eq!(tf.version.as_ref().unwrap().producer, 1);
        // TensorFlow's own view of it: fields 1-3 only, bytes 08 01 1a 02 08 01 first.
        assert_eq!(&b[..6], &[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]);
        let tf = proto::tensorflow::BundleHeaderProto::decode(&b[..]).unwrap();
        assert_eq!(tf.num_shards, 1);
        assert_eq!(tf.version.unwrap().producer, 1);
    }
}
