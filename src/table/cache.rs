//! What a [`TableIndex`](super::TableIndex) keeps of the data blocks it has read, as LevelDB's
//! `util/cache.cc` keeps blocks for its tables: [`BlockCache`], a small LRU of decompressed
//! blocks and of blocks read through the read seam, bounded by
//! [`TableReadOptions::cache_capacity`](super::TableReadOptions::cache_capacity); and
//! [`BlockRuns`], the validated restart offsets of a data block that the hash index has led a
//! lookup to, kept (by chunks of [`RUNS_CHUNK`] blocks) so that later hashed lookups into the
//! block decode nothing again. Neither holds file bytes that a mapping already holds.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::footer::BlockHandle;

/// Data blocks per lazily allocated chunk of [`TableIndex`](super::TableIndex)'s restart-offset
/// cache: a lookup
/// allocates the chunk of its block, not a slot for every block of the table (7,665 of them,
/// 245 KB of fresh memory, at 10M tensors).
pub(super) const RUNS_CHUNK: usize = 64;

/// A small LRU of decompressed blocks keyed by block number.
#[derive(Debug, Default)]
pub(super) struct BlockCache {
    capacity: usize,
    used: usize,
    tick: u64,
    map: HashMap<usize, (Arc<[u8]>, u64)>,
    lru: BTreeMap<u64, usize>,
}

impl BlockCache {
    /// An empty cache holding at most `capacity` bytes (0: it never holds anything).
    pub(super) fn new(capacity: usize) -> BlockCache {
        BlockCache {
            capacity,
            ..BlockCache::default()
        }
    }

    /// Bytes of the blocks held.
    #[cfg(test)]
    pub(super) fn used(&self) -> usize {
        self.used
    }

    pub(super) fn get(&mut self, block: usize) -> Option<Arc<[u8]>> {
        let (bytes, t) = self.map.get_mut(&block)?;
        self.lru.remove(t);
        self.tick += 1;
        *t = self.tick;
        self.lru.insert(self.tick, block);
        Some(bytes.clone())
    }

    pub(super) fn insert(&mut self, block: usize, bytes: Arc<[u8]>) {
        if bytes.len() > self.capacity || self.map.contains_key(&block) {
            return;
        }
        while self.used + bytes.len() > self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            if let Some((b, _)) = self.map.remove(&victim) {
                self.used -= b.len();
            }
        }
        self.tick += 1;
        self.used += bytes.len();
        self.lru.insert(self.tick, block);
        self.map.insert(block, (bytes, self.tick));
    }
}

/// The restart offsets of [`RUNS_CHUNK`] data blocks, allocated on first use.
pub(super) type RunsChunk = OnceLock<Box<[OnceLock<BlockRuns>]>>;

/// A data block's validated restart offsets, kept in memory for hashed lookups.
#[derive(Debug)]
pub(super) struct BlockRuns {
    pub(super) restarts: Box<[u32]>,
    pub(super) entries_end: usize,
    /// The block's handle, and where its separator and the previous block's (empty for block
    /// 0) lie in the index block: what every hashed lookup into the block checks its key
    /// against, kept here so that a lookup decodes no index entry.
    pub(super) handle: BlockHandle,
    pub(super) sep: Range<usize>,
    pub(super) prev_sep: Range<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_bounded_and_lru() {
        let mut c = BlockCache::new(10);
        c.insert(1, Arc::from(&[0u8; 4][..]));
        c.insert(2, Arc::from(&[0u8; 4][..]));
        assert!(c.get(1).is_some()); // 1 is now most recent
        c.insert(3, Arc::from(&[0u8; 4][..])); // evicts 2
        assert!(c.get(2).is_none());
        assert!(c.get(1).is_some() && c.get(3).is_some());
        assert_eq!(c.used, 8);
        c.insert(4, Arc::from(&[0u8; 11][..])); // larger than capacity: not cached
        assert!(c.get(4).is_none());
        assert_eq!(c.used, 8);
    }
}
