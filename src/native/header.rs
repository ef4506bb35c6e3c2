//! The header entry (key `""`, SPEC.md 5.1): TensorFlow's `BundleHeaderProto` fields, which make
//! the index a valid TensorFlow bundle index, plus paramdex's own (format version, alignment,
//! records region, tensor count, metadata; in version 2 a shard's identity, a sharded
//! checkpoint's shard table and the slice count).

use std::fmt;
use std::hash::{BuildHasher, Hasher};

use crate::error::{Error, Result};
use crate::proto;

/// The identity of one sharded save: 16 random bytes that every shard of the save carries in
/// its header (SPEC.md 12.1), so that a shard of another save is never taken for one of this
/// save. Shown and parsed as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SaveId(pub [u8; 16]);

impl SaveId {
    /// A new id, different from every other with overwhelming probability (unique, not secret:
    /// it is drawn from the randomly keyed hashers of the standard library, the clock, the
    /// process id and a counter).
    pub fn random() -> SaveId {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut out = [0u8; 16];
        for (i, half) in out.chunks_exact_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(nanos);
            h.write_u32(std::process::id());
            h.write_u64(n);
            h.write_usize(i);
            half.copy_from_slice(&h.finish().to_le_bytes());
        }
        SaveId(out)
    }

    /// Parses 32 hex digits.
    pub fn from_hex(s: &str) -> Option<SaveId> {
        let b = crate::name::from_hex(s)?;
        Some(SaveId(b.try_into().ok()?))
    }
}

impl fmt::Display for SaveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::name::to_hex(&self.0))
    }
}

impl fmt::Debug for SaveId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SaveId({self})")
    }
}

/// Which shard of which save a file is (header field 22, SPEC.md 12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardOf {
    /// The save the shard belongs to.
    pub save_id: SaveId,
    /// The shard's number, below `num_shards`.
    pub shard_id: u32,
    /// The save's number of shards.
    pub num_shards: u32,
}

/// One data file of a sharded checkpoint as its index records it (header field 23): the file's
/// length and the identity in its own header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShardRef {
    /// The file's length in bytes.
    pub file_len: u64,
    /// The identity the file's header carries.
    pub shard: ShardOf,
    /// Whether the file is reused from an earlier save (an incremental save, SPEC.md 12.5):
    /// the index refers to some of its entries, not necessarily all.
    pub reused: bool,
}

impl ShardOf {
    fn to_proto(self) -> proto::paramdex::ShardOf {
        proto::paramdex::ShardOf {
            save_id: self.save_id.0.to_vec(),
            shard_id: self.shard_id,
            num_shards: self.num_shards,
        }
    }

    fn from_proto(p: &proto::paramdex::ShardOf, at: u64) -> Result<ShardOf> {
        let save_id = <[u8; 16]>::try_from(p.save_id.as_slice()).map_err(|_| {
            Error::corrupt(
                "header entry",
                at,
                format!("a save id of {} bytes, not 16", p.save_id.len()),
            )
        })?;
        Ok(ShardOf {
            save_id: SaveId(save_id),
            shard_id: p.shard_id,
            num_shards: p.num_shards,
        })
    }
}

/// The decoded header entry (key `""`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Number of data shards (1 for native files).
    pub num_shards: i32,
    /// True when tensor data is big-endian (never for native files).
    pub big_endian: bool,
    /// `version.producer`.
    pub producer: i32,
    /// `version.min_consumer`.
    pub min_consumer: i32,
    /// paramdex format version; 0 means the file is a plain TensorFlow bundle index.
    pub format_version: u32,
    /// Alignment of every record's data.
    pub alignment: u32,
    /// Length of the records region, which starts at offset 0.
    pub records_len: u64,
    /// Number of tensor entries.
    pub tensor_count: u64,
    /// Whether records were written in bytewise name order.
    pub records_sorted: bool,
    /// Typed metadata (field 21; SPEC.md 5.3), empty when the file has none.
    pub metadata: crate::native::meta::Metadata,
    /// In a shard file, which shard of which save it is (field 22; format version 2).
    pub shard_of: Option<ShardOf>,
    /// In the index of a sharded checkpoint, its data files in order (field 23; format
    /// version 2); empty in every other file.
    pub shards: Vec<ShardRef>,
    /// Number of slice entries (field 24; format version 2): stored slices of partitioned
    /// tensors, which `tensor_count` does not count.
    pub slice_count: u64,
    /// In a shard of an incremental save (field 25; SPEC.md 12.5): how many tensors it reuses
    /// from earlier saves' data files, listed in its references file. 0 in every other file.
    pub references: u64,
}

impl FileHeader {
    /// Encodes the header entry value: TensorFlow's BundleHeaderProto fields plus paramdex's.
    pub fn encode(&self) -> Vec<u8> {
        use prost::Message;
        let msg = proto::paramdex::PdxHeader {
            num_shards: self.num_shards,
            endianness: i32::from(self.big_endian),
            version: Some(proto::tensorflow::VersionDef {
                producer: self.producer,
                min_consumer: self.min_consumer,
                bad_consumers: vec![],
            }),
            format_version: self.format_version,
            alignment: self.alignment,
            records_len: self.records_len,
            tensor_count: self.tensor_count,
            records_sorted: self.records_sorted,
            metadata: self.metadata.to_proto(),
            shard_of: self.shard_of.map(ShardOf::to_proto),
            shards: self
                .shards
                .iter()
                .map(|r| proto::paramdex::ShardRef {
                    file_len: r.file_len,
                    shard: Some(r.shard.to_proto()),
                    reused: r.reused,
                })
                .collect(),
            slice_count: self.slice_count,
            references: self.references,
        };
        msg.encode_to_vec()
    }

    /// Decodes the header entry value found at file offset `at`. The metadata (field 21) is
    /// decoded by hand, within the limits of SPEC.md 8.1; the other fields by prost.
    pub fn decode(buf: &[u8], at: u64) -> Result<FileHeader> {
        use prost::Message;
        let (rest, metas) = crate::native::meta::split_header(buf)
            .ok_or_else(|| Error::corrupt("header entry", at, "not parseable: bad protobuf"))?;
        let metadata = crate::native::meta::Metadata::decode_entries(metas, at)?;
        let msg = proto::paramdex::PdxHeader::decode(&rest[..])
            .map_err(|e| Error::corrupt("header entry", at, format!("not parseable: {e}")))?;
        let version = msg.version.unwrap_or_default();
        let shard_of = msg
            .shard_of
            .as_ref()
            .map(|s| ShardOf::from_proto(s, at))
            .transpose()?;
        let shards = msg
            .shards
            .iter()
            .map(|r| {
                Ok(ShardRef {
                    file_len: r.file_len,
                    shard: ShardOf::from_proto(&r.shard.clone().unwrap_or_default(), at)?,
                    reused: r.reused,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(FileHeader {
            num_shards: msg.num_shards,
            big_endian: msg.endianness == 1,
            producer: version.producer,
            min_consumer: version.min_consumer,
            format_version: msg.format_version,
            alignment: msg.alignment,
            records_len: msg.records_len,
            tensor_count: msg.tensor_count,
            records_sorted: msg.records_sorted,
            metadata,
            shard_of,
            shards,
            slice_count: msg.slice_count,
            references: msg.references,
        })
    }
}
