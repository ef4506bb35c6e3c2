//! The name index: a sorted string table in the exact LevelDB / TensorFlow `.index` format.
//!
//! Layout of a table (all offsets absolute in the file that holds it; the table may follow other
//! data in the same file):
//!
//! ```text
//! [data block 0][trailer] ... [data block N-1][trailer]
//! [hash index block, optional: `paramdex.hash`][trailer]
//! [metaindex block (empty, or one entry naming the hash index block)][trailer]
//! [index block: one entry per data block, key = separator, value = BlockHandle][trailer]
//! [footer: metaindex handle, index handle, zero padding to 40 bytes, magic (8 bytes)]
//! ```
//!
//! Every block is followed by a 5-byte trailer: a compression type byte ([`Compression`]) and the
//! masked CRC32C of the stored block bytes followed by the type byte.
//!
//! Inside a block, entries are prefix-compressed against the previous key
//! (`varint32 shared, varint32 non_shared, varint32 value_len, key suffix, value`), with a restart
//! point (an entry with `shared == 0`) every `restart_interval` entries; the block ends with the
//! fixed32 restart offsets and their fixed32 count. Keys are compared as unsigned bytes.
//!
//! * [`TableBuilder`] writes a table byte-for-byte as TensorFlow's `TableBuilder` does.
//! * [`Table`] reads one from a byte slice holding the whole file (typically an mmap), validating
//!   every structure it touches; opening costs O(size of the index block). Its validated,
//!   materialized index is a [`TableIndex`], which owns no file bytes and so can be kept next to
//!   the mapping it came from ([`Table::new`] pairs them again).
//! * [`Block`], [`BlockIter`] and [`BlockBuilder`] are the block-level pieces.
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

mod block;
mod builder;
mod cache;
mod footer;
mod hash;
mod hashed;
mod index;
mod iter;
mod read;
mod reader;

pub use block::{Block, BlockBuilder, BlockIter};
pub use builder::{
    find_short_successor, find_shortest_separator, TableBuilder, TableOptions, TableStats,
};
pub use footer::{BlockHandle, Footer};
pub use hash::HASH_INDEX_KEY;
pub use index::{SharedBytes, TableIndex, TableReadOptions};
pub use iter::TableIter;
pub use read::BlockBytes;
pub use reader::{Table, TableFigures};

/// Length of the table footer in bytes (two padded block handles and the magic number).
pub const FOOTER_LEN: usize = 48;

/// Length of the trailer after every block: one compression type byte and a masked CRC32C.
pub const BLOCK_TRAILER_LEN: usize = 5;

/// The table magic number, stored little-endian in the last 8 bytes of the footer
/// (`57 fb 80 8b 24 75 47 db` on disk).
pub const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;

/// Largest block a reader accepts, both as stored and after decompression, and the largest
/// `block_size` a [`TableBuilder`] accepts: 64 MiB.
pub const MAX_BLOCK_LEN: usize = 64 << 20;

/// How a block's bytes are stored (the trailer's type byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Stored as is (type byte 0). What TensorFlow bundles use.
    #[default]
    None,
    /// Raw Snappy (type byte 1). A block is only stored compressed when that saves at least
    /// 1/8 of its size.
    Snappy,
}

impl Compression {
    /// The trailer type byte for this compression.
    pub fn type_byte(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Snappy => 1,
        }
    }

    /// The compression a trailer type byte denotes, if it is one this reader knows (0 or 1).
    pub fn from_type_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Snappy),
            _ => None,
        }
    }
}

/// A table of `n` entries, `key00000` to `key{n-1:05}`, each valued `value-{i}-` eight times:
/// the readers' tests' table.
#[cfg(test)]
fn build_test_table(n: usize, opts: TableOptions) -> Vec<u8> {
    let mut b = TableBuilder::new(Vec::new(), 0, opts).unwrap();
    for i in 0..n {
        let v = format!("value-{i}-").repeat(8);
        b.add(format!("key{i:05}").as_bytes(), v.as_bytes())
            .unwrap();
    }
    b.finish().unwrap().0
}
