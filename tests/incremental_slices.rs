//! Incremental saves of tensors stored in slices (SPEC.md 12.5): tensor-parallel ranks that
//! save the same part of a tensor as in the base reuse it, slice by slice, whatever the other
//! ranks do; the merged checkpoint lists reused and written slices together, reads and
//! verifies, stands alone once the base is gone, and reads the same through the TensorFlow
//! layout.

use std::path::Path;
use std::sync::Arc;

use paramdex::interop::{open_any, TensorData};
use paramdex::{
    DType, Error, MergeShardsOptions, Reader, Region, Saved, ShardedSave, WriterOptions,
};

fn quick() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..Default::default()
    }
}

fn no_sync() -> MergeShardsOptions<'static> {
    MergeShardsOptions {
        no_sync: true,
        ..Default::default()
    }
}

/// Rows `k` of `n` of a [rows, cols] tensor.
fn band(k: u64, n: u64, rows: u64, cols: u64) -> Region {
    let (a, b) = (rows * k / n, rows * (k + 1) / n);
    Region::new(vec![a, 0], vec![b - a, cols]).unwrap()
}

fn bytes_of(step: u8, region: &Region, cols: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for r in region.start[0]..region.start[0] + region.len[0] {
        for c in 0..cols {
            out.push((r * 7 + c) as u8 ^ step);
        }
    }
    out
}

/// Saves a [12, 5] uint8 tensor `emb` in row bands over `ranks` ranks, and a whole `bias`; the
/// band of each rank in `changed` gets other bytes (step 1) than the base's (step 0).
fn save(prefix: &Path, ranks: u64, changed: &[u64], base: Option<Arc<Reader>>) -> Vec<Saved> {
    let mut save =
        ShardedSave::with_options(prefix, ranks as u32, paramdex::SaveId::random(), quick())
            .unwrap();
    if let Some(b) = base {
        save = save.with_base(b);
    }
    let mut out = Vec::new();
    for k in 0..ranks {
        let mut w = save.shard(k as u32).unwrap();
        let r = band(k, ranks, 12, 5);
        let step = u8::from(changed.contains(&k));
        out.push(
            w.add_slice_or_reuse("emb", DType::UInt8, &[12, 5], &r, &bytes_of(step, &r, 5))
                .unwrap(),
        );
        if k == 0 {
            w.add_or_reuse(
                "bias",
                paramdex::Tensor::new(DType::UInt8, &[3], &[1, 2, 3]),
            )
            .unwrap();
        }
        w.finish().unwrap();
    }
    save.merge(&no_sync()).unwrap();
    out
}

fn expect(prefix: &Path, ranks: u64, changed: &[u64]) {
    let r = Reader::open(prefix).unwrap();
    r.verify().unwrap();
    let whole = r
        .get_slice("emb", &Region::full(&[12, 5]))
        .unwrap()
        .unwrap();
    let mut want = Vec::new();
    for k in 0..ranks {
        let b = band(k, ranks, 12, 5);
        want.extend(bytes_of(u8::from(changed.contains(&k)), &b, 5));
    }
    assert_eq!(whole.data(), want.as_slice());
    // Through the TensorFlow layout too (open_any of the prefix reads it as paramdex; the
    // TensorFlow reader of the same files must agree).
    let tf = paramdex::interop::tf::TfCheckpoint::open(prefix).unwrap();
    let t = paramdex::interop::TensorStore::load(&tf, b"emb")
        .unwrap()
        .unwrap();
    assert_eq!(&*t.data.raw_bytes(), want.as_slice());
    let any = open_any(prefix).unwrap();
    let b = any.load(b"bias").unwrap().unwrap();
    assert!(matches!(b.data, TensorData::Bytes(ref x) if **x == [1, 2, 3]));
}

fn remove_prefix(prefix: &Path) {
    let stem = prefix.file_name().unwrap().to_string_lossy().into_owned();
    for e in std::fs::read_dir(prefix.parent().unwrap()).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with(&format!("{stem}.")) {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Four ranks save; then four ranks save again with one band changed: three bands are reused
/// and one written; the base removed, the new checkpoint still reads and verifies.
#[test]
fn unchanged_slices_are_reused_and_changed_ones_written() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    save(&a, 4, &[], None);
    let base = Arc::new(Reader::open(&a).unwrap());
    let saved = save(&b, 4, &[2], Some(base.clone()));
    assert_eq!(
        saved,
        [Saved::Reused, Saved::Reused, Saved::Written, Saved::Reused]
    );
    drop(base);
    expect(&b, 4, &[2]);
    remove_prefix(&a);
    expect(&b, 4, &[2]);
}

/// Resharded: the base was saved by 4 ranks, the next save by 2, whose bands are no stored
/// slice of the base: nothing is reused, and the save is whole.
#[test]
fn a_resharded_save_reuses_no_slice_and_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    save(&a, 4, &[], None);
    let base = Arc::new(Reader::open(&a).unwrap());
    let saved = save(&b, 2, &[], Some(base));
    assert_eq!(saved, [Saved::Written, Saved::Written]);
    remove_prefix(&a);
    expect(&b, 2, &[]);
}

/// A chain: each save reuses from the one before, the older ones removed as it goes.
#[test]
fn a_chain_of_incremental_saves_outlives_every_base() {
    let dir = tempfile::tempdir().unwrap();
    let p = |i: usize| dir.path().join(format!("step{i}"));
    save(&p(0), 3, &[], None);
    for i in 1..4 {
        let base = Arc::new(Reader::open(p(i - 1)).unwrap());
        // Step i changes band i % 3 to step-1 bytes, others stay as they were in the base;
        // bytes_of(1) ^ bytes_of(0) differ, so a band changed once stays "changed".
        let changed: Vec<u64> = (0..3).filter(|&k| k <= (i as u64 - 1).min(2)).collect();
        save(&p(i), 3, &changed, Some(base));
        remove_prefix(&p(i - 1));
        expect(&p(i), 3, &changed);
    }
}

/// The caller's word for a slice: no bytes compared; a slice the base does not store is
/// NotFound; a slice overlapping one written is refused.
#[test]
fn reuse_unchanged_slice_takes_the_callers_word_and_checks_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    save(&a, 2, &[], None);
    let base = Arc::new(Reader::open(&a).unwrap());
    let save = ShardedSave::with_options(&b, 1, paramdex::SaveId::random(), quick())
        .unwrap()
        .with_base(base);
    let mut w = save.shard(0).unwrap();
    let top = band(0, 2, 12, 5);
    let bottom = band(1, 2, 12, 5);
    w.reuse_unchanged_slice("emb", DType::UInt8, &[12, 5], &top)
        .unwrap();
    let unstored = Region::new(vec![6, 0], vec![3, 5]).unwrap();
    assert!(matches!(
        w.reuse_unchanged_slice("emb", DType::UInt8, &[12, 5], &unstored),
        Err(Error::NotFound { .. })
    ));
    let other = Region::new(vec![0, 0], vec![3, 5]).unwrap();
    assert!(matches!(
        w.add_slice_or_reuse("emb", DType::UInt8, &[12, 5], &other, &[0; 15]),
        Err(Error::InvalidTensor { .. })
    ));
    w.add_slice(
        "emb",
        DType::UInt8,
        &[12, 5],
        &bottom,
        &bytes_of(1, &bottom, 5),
    )
    .unwrap();
    w.reuse_unchanged("bias").unwrap();
    w.finish().unwrap();
    let rep = save.merge(&no_sync()).unwrap();
    assert_eq!(rep.reused_tensors, 2);
    remove_prefix(&a);
    let r = Reader::open(&b).unwrap();
    r.verify().unwrap();
    let whole = r
        .get_slice("emb", &Region::full(&[12, 5]))
        .unwrap()
        .unwrap();
    let mut want = bytes_of(0, &top, 5);
    want.extend(bytes_of(1, &bottom, 5));
    assert_eq!(whole.data(), want.as_slice());
}
