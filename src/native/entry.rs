//! Index values: the header entry (key `""`) and tensor entries.
//!
//! A tensor entry is a protobuf message whose fields 1-7 are TensorFlow's `BundleEntryProto` and
//! whose fields 16-17 are paramdex's (`proto/paramdex.proto`, SPEC.md "Index entries"). It is
//! encoded and decoded by hand here, because `get` decodes one per lookup and must not allocate;
//! tests cross-check this codec against prost's generated code. The header is decoded with prost
//! (once per open).

use smallvec::SmallVec;

use crate::error::{ensure_within, Error, Result};
use crate::format::{get_fixed32, get_varint32, get_varint64, put_varint32, put_varint64};

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
}

const WT_VARINT: u32 = 0;
const WT_FIXED64: u32 = 1;
const WT_LEN: u32 = 2;
const WT_FIXED32: u32 = 5;

fn put_tag(dst: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint32(dst, (field << 3) | wire);
}

/// Appends a `TensorShapeProto` (field 2 of the entry) for `dims`, as TensorFlow writes it:
/// always present (a scalar is `12 00`), one `Dim` per dimension, a zero dimension as an empty `Dim`.
fn put_shape(dst: &mut Vec<u8>, dims: &[u64]) {
    let mut body: SmallVec<[u8; 64]> = SmallVec::new();
    for &d in dims {
        body.push(0x12);
        if d == 0 {
            body.push(0);
        } else {
            let mut v = Vec::with_capacity(11);
            v.push(0x08);
            put_varint64(&mut v, d);
            body.push(u8::try_from(v.len()).expect("a Dim is at most 11 bytes"));
            body.extend_from_slice(&v);
        }
    }
    put_tag(dst, 2, WT_LEN);
    put_varint64(dst, body.len() as u64);
    dst.extend_from_slice(&body);
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
            put_tag(dst, 1, WT_VARINT);
            put_varint64(dst, self.tf_dtype as i64 as u64);
        }
        put_shape(dst, &self.shape);
        if self.shard_id != 0 {
            put_tag(dst, 3, WT_VARINT);
            put_varint64(dst, self.shard_id as i64 as u64);
        }
        if self.offset != 0 {
            put_tag(dst, 4, WT_VARINT);
            put_varint64(dst, self.offset);
        }
        if self.size != 0 {
            put_tag(dst, 5, WT_VARINT);
            put_varint64(dst, self.size);
        }
        put_tag(dst, 6, WT_FIXED32);
        dst.extend_from_slice(&self.crc32c.to_le_bytes());
        if self.record_header_len != 0 {
            put_tag(dst, 16, WT_VARINT);
            put_varint32(dst, self.record_header_len);
        }
        if self.lod_levels != 0 {
            put_tag(dst, 17, WT_VARINT);
            put_varint32(dst, self.lod_levels);
        }
    }

    /// Decodes an entry. `at` is the file offset reported in errors (the entry's block).
    /// Unknown fields are skipped; malformed wire data, negative sizes, a negative or unknown-rank
    /// shape, and more than `max_rank` dimensions are errors.
    pub fn decode(buf: &[u8], at: u64, max_rank: usize) -> Result<IndexEntry> {
        let bad = |detail: &str| Error::corrupt("index entry", at, detail.to_string());
        let mut e = IndexEntry::default();
        let mut pos = 0usize;
        while pos < buf.len() {
            let (key, n) = get_varint32(&buf[pos..]).ok_or_else(|| bad("bad field tag"))?;
            pos += n;
            let (field, wire) = (key >> 3, key & 7);
            match (field, wire) {
                (1 | 3 | 4 | 5 | 16 | 17, WT_VARINT) => {
                    let (v, n) = get_varint64(&buf[pos..]).ok_or_else(|| bad("bad varint"))?;
                    pos += n;
                    match field {
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
                        _ => {
                            e.lod_levels =
                                u32::try_from(v).map_err(|_| bad("lod_levels too large"))?
                        }
                    }
                }
                (6, WT_FIXED32) => {
                    e.crc32c = get_fixed32(buf, pos).ok_or_else(|| bad("truncated crc32c"))?;
                    pos += 4;
                }
                (2 | 7, WT_LEN) => {
                    let (len, n) = get_varint64(&buf[pos..]).ok_or_else(|| bad("bad length"))?;
                    pos += n;
                    let end = usize::try_from(len)
                        .ok()
                        .and_then(|l| pos.checked_add(l))
                        .filter(|&end| end <= buf.len())
                        .ok_or_else(|| bad("field runs past the entry"))?;
                    if field == 2 {
                        e.shape = decode_shape(&buf[pos..end], at, max_rank)?;
                    } else {
                        e.num_slices = e.num_slices.saturating_add(1);
                    }
                    pos = end;
                }
                (0, _) => return Err(bad("field number 0")),
                _ => {
                    pos =
                        skip_field(buf, pos, wire).ok_or_else(|| bad("malformed unknown field"))?
                }
            }
        }
        Ok(e)
    }

    /// The tensor's element count (1 for a scalar), or `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }
}

/// Skips one field's payload of wire type `wire` starting at `pos`; returns the new position.
pub(crate) fn skip_field(buf: &[u8], pos: usize, wire: u32) -> Option<usize> {
    match wire {
        WT_VARINT => Some(pos + get_varint64(buf.get(pos..)?)?.1),
        WT_FIXED64 => pos.checked_add(8).filter(|&e| e <= buf.len()),
        WT_FIXED32 => pos.checked_add(4).filter(|&e| e <= buf.len()),
        WT_LEN => {
            let (len, n) = get_varint64(buf.get(pos..)?)?;
            let start = pos + n;
            usize::try_from(len)
                .ok()
                .and_then(|l| start.checked_add(l))
                .filter(|&e| e <= buf.len())
        }
        _ => None, // groups (3, 4) and undefined wire types
    }
}

fn decode_shape(buf: &[u8], at: u64, max_rank: usize) -> Result<Dims> {
    let bad = |detail: String| Error::corrupt("index entry shape", at, detail);
    let mut dims = Dims::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let (key, n) = get_varint32(&buf[pos..]).ok_or_else(|| bad("bad tag".into()))?;
        pos += n;
        match (key >> 3, key & 7) {
            (2, WT_LEN) => {
                let (len, n) = get_varint64(&buf[pos..]).ok_or_else(|| bad("bad length".into()))?;
                pos += n;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| pos.checked_add(l))
                    .filter(|&e| e <= buf.len())
                    .ok_or_else(|| bad("dim runs past the shape".into()))?;
                let mut size: i64 = 0;
                let mut p = pos;
                while p < end {
                    let (k, n) =
                        get_varint32(&buf[p..end]).ok_or_else(|| bad("bad dim tag".into()))?;
                    p += n;
                    if k == 0x08 {
                        let (v, n) =
                            get_varint64(&buf[p..end]).ok_or_else(|| bad("bad dim size".into()))?;
                        p += n;
                        size = v as i64;
                    } else {
                        p = skip_field(&buf[..end], p, k & 7)
                            .ok_or_else(|| bad("malformed dim field".into()))?;
                    }
                }
                if size < 0 {
                    return Err(bad(format!(
                        "dimension {} has negative size {size}",
                        dims.len()
                    )));
                }
                ensure_within("tensor rank", dims.len() + 1, max_rank, Some(at))?;
                dims.push(size as u64);
                pos = end;
            }
            (3, WT_VARINT) => {
                let (v, n) = get_varint64(&buf[pos..]).ok_or_else(|| bad("bad varint".into()))?;
                pos += n;
                if v != 0 {
                    return Err(bad("unknown rank is not allowed in a checkpoint".into()));
                }
            }
            (_, wire) => {
                pos = skip_field(buf, pos, wire).ok_or_else(|| bad("malformed field".into()))?
            }
        }
    }
    Ok(dims)
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
