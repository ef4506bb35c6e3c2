//! The header entry (key `""`, SPEC.md 5.1): TensorFlow's `BundleHeaderProto` fields, which make
//! the index a valid TensorFlow bundle index, plus paramdex's own (format version, alignment,
//! records region, tensor count, metadata).

use crate::error::{Error, Result};
use crate::proto;

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
        })
    }
}
