//! Regenerates the checked-in seed corpora in `fuzz/seeds/<target>/` from the repository's
//! fixtures (`tests/data/`) and from small files written by paramdex itself.
//!
//! Run from anywhere: `cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds`.
//! Every seed is small (a few KiB at most) so the corpora stay cheap to check in.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{
    Compression, DType, MergeShardsOptions, Reader, Region, SaveId, ShardedSave, Tensor, Writer,
    WriterOptions,
};

// The input format of the `merge` target (its `pack` and file names).
#[path = "../checks/common.rs"]
#[allow(dead_code)]
mod common;
#[path = "../checks/merge.rs"]
#[allow(dead_code)]
mod merge;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn fixtures() -> PathBuf {
    root().join("../tests/data")
}

fn save(target: &str, name: &str, bytes: &[u8]) {
    let dir = root().join("seeds").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn framed(first: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut v = (first.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(first);
    v.extend_from_slice(rest);
    v
}

/// Small native files with different layouts.
fn native_files() -> Vec<(String, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let variants: [(&str, u64, usize, usize, Compression, usize); 6] = [
        ("one", 64, 1 << 16, 16, Compression::None, 1),
        ("packed", 1, 1 << 16, 16, Compression::None, 5),
        ("blocks", 8, 64, 2, Compression::None, 12),
        ("restart1", 16, 128, 1, Compression::None, 8),
        ("snappy", 4, 256, 4, Compression::Snappy, 20),
        ("empty", 64, 1 << 16, 16, Compression::None, 0),
    ];
    for (tag, alignment, block_size, restart_interval, compression, n) in variants {
        let path = dir.path().join(format!("{tag}.pdx"));
        let opts = WriterOptions {
            alignment,
            block_size,
            restart_interval,
            compression,
            sync: false,
            ..Default::default()
        };
        let mut w = Writer::create_with(&path, opts).unwrap();
        for i in 0..n {
            let dtype = DType::ALL[i % DType::ALL.len()];
            let shape: Vec<u64> = match i % 4 {
                0 => vec![2],
                1 => vec![],
                2 => vec![0, 3],
                _ => vec![2, 2],
            };
            let len = paramdex::raw::record::data_len(dtype, &shape).unwrap() as usize;
            let data: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
            let name = format!("model.layers.{i}.weight");
            if i == 3 {
                let lod = vec![vec![0u64, 1, 2]];
                w.add(&name, Tensor::new(dtype, &shape, &data).with_lod(&lod))
                    .unwrap();
            } else {
                w.add(&name, Tensor::new(dtype, &shape, &data)).unwrap();
            }
        }
        if tag == "one" {
            w.add(
                "w",
                Tensor::new(DType::Float32, &[2], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]),
            )
            .unwrap();
        }
        w.finish().unwrap();
        out.push((tag.to_string(), std::fs::read(&path).unwrap()));
    }
    out
}

/// Rows `k` of `n` of a [rows, cols] tensor.
fn band(k: u64, n: u64, rows: u64, cols: u64) -> Region {
    let (a, b) = (rows * k / n, rows * (k + 1) / n);
    Region::new(vec![a, 0], vec![b - a, cols]).unwrap()
}

/// One save of two shards at `prefix`: a uint8 [4, 3] tensor `emb` in row bands (one per
/// shard), a whole `bias` in shard 0 and a whole float32 `w` in shard 1; `changed` changes the
/// bytes of the tensors and bands (`emb0`, `emb1`) it names. With a base, unchanged tensors and
/// slices are reused.
fn two_shard_save(
    prefix: &Path,
    id: SaveId,
    base: Option<Arc<Reader>>,
    changed: &[&str],
) -> ShardedSave {
    let mut save = ShardedSave::with_options(prefix, 2, id, quick()).unwrap();
    if let Some(b) = base {
        save = save.with_base(b);
    }
    let step = |name: &str| u8::from(changed.contains(&name));
    for k in 0..2u32 {
        let mut w = save.shard(k).unwrap();
        let r = band(u64::from(k), 2, 4, 3);
        let rows: Vec<u8> = (0..6u8)
            .map(|i| (i + 6 * k as u8) ^ step(&format!("emb{k}")))
            .collect();
        w.add_slice_or_reuse("emb", DType::UInt8, &[4, 3], &r, &rows)
            .unwrap();
        if k == 0 {
            let bias = [1, 2, 3u8].map(|b| b ^ step("bias"));
            w.add_or_reuse("bias", Tensor::new(DType::UInt8, &[3], &bias))
                .unwrap();
        } else {
            let v: Vec<u8> = [0.5f32, 1.0, 1.5, 2.0 + f32::from(step("w"))]
                .iter()
                .flat_map(|f| f.to_le_bytes())
                .collect();
            w.add_or_reuse("w", Tensor::new(DType::Float32, &[2, 2], &v))
                .unwrap();
        }
        w.finish().unwrap();
    }
    save
}

fn quick() -> WriterOptions {
    WriterOptions {
        alignment: 8,
        sync: false,
        ..Default::default()
    }
}

/// The files at `dir` of the `merge` target's prefix `ckpt`, packed as its input.
/// `refused`: the merge must refuse the save (a seed of a save that breaks a rule of SPEC.md
/// 12.3); otherwise it must commit it, and the checkpoint verify.
fn packed_prefix(dir: &Path, refused: bool) -> Vec<u8> {
    let mut files = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ckpt."))
        .collect();
    names.sort();
    for name in &names {
        let kind = merge::kind_of(name).unwrap_or_else(|| panic!("no kind names {name}"));
        files.push((kind, std::fs::read(dir.join(name)).unwrap()));
    }
    let no_sync = MergeShardsOptions {
        no_sync: true,
        ..Default::default()
    };
    let merged = paramdex::merge_shards(dir.join("ckpt"), &no_sync);
    if refused {
        assert!(
            merged.is_err(),
            "a seed the merge should refuse: {merged:?}"
        );
    } else {
        merged.unwrap();
        Reader::open(dir.join("ckpt")).unwrap().verify().unwrap();
    }
    merge::pack(&files)
}

/// Real pending saves at the prefix `ckpt`, for the `merge` target.
fn merge_seeds() {
    let no_sync = MergeShardsOptions {
        no_sync: true,
        ..Default::default()
    };
    // A plain save: two pending shards.
    let dir = tempfile::tempdir().unwrap();
    two_shard_save(&dir.path().join("ckpt"), merge::SAVE_ID, None, &[]);
    save("merge", "plain", &packed_prefix(dir.path(), false));
    // Incremental saves over a base at another prefix: some tensors and slices reused, some
    // written; pending shards, references files and links to the base's data files.
    for (tag, changed) in [
        ("incremental", &["bias", "emb0"][..]),
        ("incremental-most-reused", &["w"][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base");
        two_shard_save(&base, merge::BASE_ID, None, &[])
            .merge(&no_sync)
            .unwrap();
        let base = Arc::new(Reader::open(&base).unwrap());
        two_shard_save(
            &dir.path().join("ckpt"),
            merge::SAVE_ID,
            Some(base),
            changed,
        );
        save("merge", tag, &packed_prefix(dir.path(), false));
    }
    // An incremental save at its base's own prefix: the base's index and data files are there
    // too, and the links are the base's data files under another name.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    two_shard_save(&prefix, merge::BASE_ID, None, &[])
        .merge(&no_sync)
        .unwrap();
    let base = Arc::new(Reader::open(&prefix).unwrap());
    two_shard_save(&prefix, merge::SAVE_ID, Some(base), &["w"]);
    save(
        "merge",
        "incremental-same-prefix",
        &packed_prefix(dir.path(), false),
    );

    // A plain save of two shards over a committed checkpoint of three (whose data files step 3
    // removes).
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let old = ShardedSave::with_options(&prefix, 3, merge::BASE_ID, quick()).unwrap();
    for k in 0..3u32 {
        let mut w = old.shard(k).unwrap();
        w.add(
            format!("t{k}"),
            Tensor::new(DType::UInt8, &[2], &[k as u8, 1]),
        )
        .unwrap();
        w.finish().unwrap();
    }
    old.merge(&no_sync).unwrap();
    two_shard_save(&prefix, merge::SAVE_ID, None, &[]);
    save(
        "merge",
        "plain-over-previous",
        &packed_prefix(dir.path(), false),
    );

    // Saves whose shards do not fit together, which the merge refuses: slices that overlap,
    // that leave a gap, a tensor whole in one shard and in slices in the other, the same whole
    // tensor in both.
    for tag in ["overlap", "gap", "whole-and-slices", "whole-twice"] {
        let dir = tempfile::tempdir().unwrap();
        let bad =
            ShardedSave::with_options(dir.path().join("ckpt"), 2, merge::SAVE_ID, quick()).unwrap();
        for k in 0..2u64 {
            let mut w = bad.shard(k as u32).unwrap();
            let rows = match (tag, k) {
                ("overlap", 1) => Region::new(vec![1, 0], vec![3, 3]).unwrap(),
                ("gap", 1) => Region::new(vec![3, 0], vec![1, 3]).unwrap(),
                _ => band(k, 2, 4, 3),
            };
            let n = rows.numel().unwrap() as usize;
            match (tag, k) {
                ("whole-and-slices", 1) => w
                    .add("emb", Tensor::new(DType::UInt8, &[4, 3], &[7; 12]))
                    .unwrap(),
                _ => w
                    .add_slice("emb", DType::UInt8, &[4, 3], &rows, &vec![k as u8; n])
                    .unwrap(),
            }
            if tag == "whole-twice" {
                w.add("bias", Tensor::new(DType::UInt8, &[3], &[1, 2, 3]))
                    .unwrap();
            }
            w.finish().unwrap();
        }
        save(
            "merge",
            &format!("refused-{tag}"),
            &packed_prefix(dir.path(), true),
        );
    }
}

fn main() {
    let seeds = root().join("seeds");
    if seeds.exists() {
        std::fs::remove_dir_all(&seeds).unwrap();
    }
    let natives = native_files();
    let tf_indexes = [
        "tf/basic/tf2/ckpt-1",
        "tf/basic/v1/model.ckpt",
        "tf/dtypes/raw/bundle",
        "tf/strings/tf2/ckpt-1",
        "tf/partitioned/raw/slices",
        "tf/partitioned/v1/model.ckpt",
        "tf/sharded/policy/ckpt",
        "tf/lowp/raw/bundle",
    ];

    // table and reader: whole files.
    for (tag, bytes) in &natives {
        save("table", &format!("native-{tag}"), bytes);
        save("reader", &format!("native-{tag}"), bytes);
    }
    for p in tf_indexes {
        let index = std::fs::read(fixtures().join(format!("{p}.index"))).unwrap();
        let tag = p.replace('/', "-");
        save("table", &format!("tf-{tag}"), &index);
        if p == "tf/basic/tf2/ckpt-1" {
            save("reader", &format!("tf-{tag}"), &index);
        }
        let data_name = std::fs::read_dir(fixtures().join(Path::new(p).parent().unwrap()))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|f| f.to_string_lossy().contains(".data-00000-of-"))
            .unwrap();
        let data = std::fs::read(data_name).unwrap();
        save("tf_bundle", &format!("tf-{tag}"), &framed(&index, &data));
    }
    // Format version 2: a file with slices, a sharded checkpoint's index and one of its shards.
    for (tag, file) in [
        ("v2-slices", "native/v2/slices.pdx"),
        ("v2-index", "native/v2/sharded/ckpt.index"),
        ("v2-shard", "native/v2/sharded/ckpt.data-00002-of-00003"),
        // Every low-precision dtype: TensorFlow numbers 26-33 and index field 18.
        ("v2-dtypes", "native/v2/dtypes.pdx"),
    ] {
        let bytes = std::fs::read(fixtures().join(file)).unwrap();
        save("table", &format!("native-{tag}"), &bytes);
        save("reader", &format!("native-{tag}"), &bytes);
    }
    // slices: a rank byte, then a partitioned entry, a slice key or a header (TensorFlow's
    // bytes for a [4,2] tensor in two row slices, and its first slice's key).
    let entry = [
        0x08, 0x01, 0x12, 0x08, 0x12, 0x02, 0x08, 0x04, 0x12, 0x02, 0x08, 0x02, 0x3a, 0x06, 0x0a,
        0x02, 0x10, 0x02, 0x0a, 0x00, 0x3a, 0x08, 0x0a, 0x04, 0x08, 0x02, 0x10, 0x02, 0x0a, 0x00,
    ];
    save("slices", "tf-entry", &[&[2u8][..], &entry].concat());
    let key = [0x00, 0x76, 0x00, 0x01, 0x01, 0x02, 0x80, 0x82, 0x80, 0x7f];
    save("slices", "tf-key", &[&[2u8][..], &key].concat());
    let index = std::fs::read(fixtures().join("native/v2/sharded/ckpt.index")).unwrap();
    let r = Reader::from_bytes(index).unwrap();
    save(
        "slices",
        "v2-header",
        &[&[3u8][..], &r.header().encode()].concat(),
    );

    // A native file seen as a TensorFlow bundle (index and data are the same file).
    let (_, one) = &natives[0];
    save("tf_bundle", "native-one", &framed(one, one));

    // block: every data block and index block of a few files, without and with a seek target.
    for (tag, bytes) in natives.iter().filter(|(t, _)| t != "snappy") {
        let table = Table::open(bytes, TableReadOptions::default()).unwrap();
        for i in 0..table.data_blocks().min(4) {
            let h = table.block_handle(i);
            let contents = &bytes[h.offset as usize..(h.offset + h.size) as usize];
            let mut plain = vec![0u8];
            plain.extend_from_slice(contents);
            save("block", &format!("{tag}-data{i}"), &plain);
            let mut targeted = vec![7u8];
            targeted.extend_from_slice(b"model.l");
            targeted.extend_from_slice(contents);
            save("block", &format!("{tag}-data{i}-seek"), &targeted);
        }
        let h = table.footer().index;
        let mut idx = vec![0u8];
        idx.extend_from_slice(&bytes[h.offset as usize..(h.offset + h.size) as usize]);
        save("block", &format!("{tag}-index"), &idx);
    }

    // record: Paddle fixtures, native records, combined streams.
    for entry in std::fs::read_dir(fixtures().join("paddle/lod")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "lodtensor") {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            save(
                "record",
                &format!("paddle-{name}"),
                &std::fs::read(&p).unwrap(),
            );
        }
    }
    save(
        "record",
        "paddle-combined",
        &std::fs::read(fixtures().join("paddle/inference/legacy/model.pdiparams")).unwrap(),
    );
    for (tag, bytes) in &natives {
        let r = Reader::from_bytes(bytes.clone()).unwrap();
        save("record", &format!("native-{tag}-records"), r.records());
        if let Some(t) = r.iter().next() {
            save(
                "record",
                &format!("native-{tag}-first"),
                t.unwrap().record(),
            );
        }
    }
    // A torn writer temporary file: records, then half a record.
    let r = Reader::from_bytes(natives[1].1.clone()).unwrap();
    let recs = r.records();
    save("record", "torn", &recs[..recs.len() - 3]);

    // paddle_program: programs alone and with their parameters.
    for (tag, prog, params) in [
        (
            "legacy",
            "paddle/inference/legacy/model.pdmodel",
            "paddle/inference/legacy/model.pdiparams",
        ),
        (
            "pir",
            "paddle/inference/pir/model.json",
            "paddle/inference/pir/model.pdiparams",
        ),
        (
            "models-legacy",
            "paddle/models/legacy/m.pdmodel",
            "paddle/models/legacy/m.pdiparams",
        ),
        (
            "models-pir",
            "paddle/models/pir/m.json",
            "paddle/models/pir/m.pdiparams",
        ),
    ] {
        let prog = std::fs::read(fixtures().join(prog)).unwrap();
        let params = std::fs::read(fixtures().join(params)).unwrap();
        save(
            "paddle_program",
            &format!("{tag}-model"),
            &framed(&prog, &params),
        );
        save("paddle_program", &format!("{tag}-program"), &prog);
    }

    // writer_ops: structured input; a few byte patterns to start from.
    for (i, seed) in [
        vec![0u8; 64],
        (0..=255u8).collect::<Vec<u8>>(),
        (0..200u32).map(|i| (i * 37 % 251) as u8).collect(),
        vec![
            1, 0, 16, 4, 0, 1, 1, 0, 5, 2, 1, 0, 3, 0, 2, 0, 1, 0, 1, 1, 2, 3, 4,
        ],
    ]
    .iter()
    .enumerate()
    {
        save("writer_ops", &format!("bytes-{i}"), seed);
    }
    // pickle: pickles as CPython writes them (tests/interop/gen_pickle_fixtures.py), and the
    // hostile cases of the unit tests in src/interop/pickle/tests.rs.
    for name in [
        "torch_state_dict.pkl",
        "torch_nested.pkl",
        "paddle_p2.pdparams",
        "paddle_p4.pdparams",
        "paddle_nested.pdopt",
        "paddle_odd.pdparams",
        "torch_state_dict.pt",
        // A torch DCP `.metadata` written by torch 2.15 (FileSystemWriter, 2 gloo ranks).
        "dcp_two_ranks.metadata",
    ] {
        let bytes = std::fs::read(fixtures().join("pickle").join(name)).unwrap();
        save("pickle", name, &bytes);
    }
    for (name, bytes) in [
        (
            "od_p2",
            &b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00aq\x02K\x01\
X\x01\x00\x00\x00bq\x03(G@\x04\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00xq\x04\
c_codecs\nencode\nq\x05X\x02\x00\x00\x00yzq\x06X\x06\x00\x00\x00latin1q\x07\x86q\x08Rq\t\
N\x88J\xfd\xff\xff\xff\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@tq\n\
X\x01\x00\x00\x00cq\x0b]q\x0c(M,\x01Jp\x11\x01\x00eu."[..],
        ),
        (
            "od_p4",
            b"\x80\x04\x95e\x00\x00\x00\x00\x00\x00\x00\
\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94(\x8c\x01a\x94K\x01\
\x8c\x01b\x94(G@\x04\x00\x00\x00\x00\x00\x00\x8c\x01x\x94C\x02yz\x94N\x88J\xfd\xff\xff\xff\
\x8a\t\x00\x00\x00\x00\x00\x00\x00\x00@t\x94\x8c\x01c\x94]\x94(M,\x01Jp\x11\x01\x00eu.",
        ),
        (
            "posix_system",
            b"\x80\x02cposix\nsystem\nq\x00X\x07\x00\x00\x00touch x\x85q\x01Rq\x02.",
        ),
        ("memo_loop", b"\x80\x02]q\x00h\x00a."),
    ] {
        save("pickle", name, bytes);
    }
    merge_seeds();
    println!("seeds written to {}", seeds.display());
}
