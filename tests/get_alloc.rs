//! `get` on an uncompressed index allocates nothing once the reader is open (SPEC.md section
//! 10; issue 7), but for what the hash index block (SPEC.md 4.5, issue 17) sets up once: its
//! page bits at the first lookup, and a data block's restart offsets at the first hashed lookup
//! in that block (O(data blocks) in all, never per lookup). A file without the block allocates
//! nothing at all. Counted with an instrumented global allocator; this file holds a single test
//! so that no other test thread allocates while it counts. Not a timing test.

use paramdex::{Compression, DType, ReadOptions, Reader, Tensor, Writer, WriterOptions};
use stats_alloc::{Region, StatsAlloc, INSTRUMENTED_SYSTEM};

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

fn write(path: &std::path::Path, n: usize, compression: Compression, hash_index: bool) {
    let mut w = Writer::create_with(
        path,
        WriterOptions {
            block_size: 4096,
            compression,
            sync: false,
            hash_index,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for i in 0..n {
        let name = format!("model.layers.{i}.self_attn.q_proj.weight");
        w.add(&name, Tensor::new(DType::Float32, &[2, 2], &[0u8; 16]))
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn get_does_not_allocate_on_uncompressed_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let n = 5000;
    let names: Vec<String> = (0..n)
        .map(|i| format!("model.layers.{}.self_attn.q_proj.weight", (i * 7919) % n))
        .collect();
    let missing: Vec<String> = names.iter().map(|s| format!("{s}.missing")).collect();

    // Uncompressed: nothing at all, cold or hot blocks, hits or misses, with tensor CRCs on;
    // with the hash index, once every block has been looked into.
    let plain = dir.path().join("plain.pdx");
    write(&plain, n, Compression::None, true);
    let unhashed = dir.path().join("unhashed.pdx");
    write(&unhashed, n, Compression::None, false);
    for (path, warm) in [(&plain, true), (&unhashed, false), (&unhashed, true)] {
        check_plain(path, &names, &missing, warm);
    }

    // Snappy: decompressed blocks go through the block cache. Hot gets of cached blocks
    // allocate at most a little LRU bookkeeping, never a block.
    let snappy = dir.path().join("snappy.pdx");
    write(&snappy, n, Compression::Snappy, true);
    let r = Reader::open(&snappy).unwrap();
    for name in &names {
        r.get(name).unwrap().unwrap();
    }
    let region = Region::new(GLOBAL);
    for name in &names {
        r.get(name).unwrap().unwrap();
    }
    let change = region.change();
    assert!(
        change.bytes_allocated < 64 * n,
        "hot snappy gets allocated {change:?}"
    );
}

fn check_plain(path: &std::path::Path, names: &[String], missing: &[String], warm: bool) {
    let n = names.len();
    for verify_tensors in [false, true] {
        let r = Reader::open_with(
            path,
            ReadOptions {
                verify_tensors,
                ..ReadOptions::default()
            },
        )
        .unwrap();
        assert!(r.data_blocks() > 50);
        if warm {
            for name in names {
                r.get(name).unwrap().unwrap();
            }
        }
        let region = Region::new(GLOBAL);
        let mut found = 0usize;
        for _ in 0..2 {
            for (name, miss) in names.iter().zip(missing) {
                let t = r.get(name).unwrap().unwrap();
                found += std::hint::black_box(t.data()).len() / 16;
                assert!(r.get(miss).unwrap().is_none());
            }
        }
        let change = region.change();
        assert_eq!(found, 2 * n);
        assert_eq!(
            (change.allocations, change.reallocations),
            (0, 0),
            "get allocated ({}, verify_tensors {verify_tensors}, warm {warm}): {change:?}",
            path.display()
        );
    }
}
