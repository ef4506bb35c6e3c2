//! Sharded checkpoints (SPEC.md 12): one save written by many writers, each its own data file
//! (`writer.rs`), committed by a merge that reads only the shards' indexes and writes the
//! checkpoint's index last (`merge.rs`); read as one checkpoint by the native reader, which
//! opens and checks each data file on first use (`table.rs`: names and header checks;
//! `reader.rs`: the data files, checks and verify). Incremental saves refer to an earlier
//! checkpoint's tensors instead of writing them again (`reuse.rs`, `unchanged.rs`); a shard's
//! index is read by positions, never its records (`index.rs`). Where the files are (a directory,
//! a bucket prefix) and how each is named is `place.rs`.

pub(crate) mod housekeeping;
pub(crate) mod index;
pub(crate) mod merge;
pub mod place;
pub(crate) mod reader;
pub(crate) mod reuse;
pub(crate) mod table;
pub(crate) mod unchanged;
pub(crate) mod writer;
