//! Integration tests of the LevelDB/TensorFlow table layer: golden bytes, real TensorFlow
//! `.index` files, a model-based property test, corruption and the Snappy rule.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use paramdex::raw::table::*;
use proptest::prelude::*;
use support::unhex;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Builds a table of `model` after `start` bytes of filler; returns the whole file and stats.
fn build(model: &Model, start: usize, opts: TableOptions) -> (Vec<u8>, TableStats) {
    let mut file = vec![0xab; start];
    let mut b = TableBuilder::new(&mut file, start as u64, opts).unwrap();
    for (k, v) in model {
        b.add(k, v).unwrap();
    }
    let (_, stats) = b.finish().unwrap();
    (file, stats)
}

/// All entries by iteration.
fn scan(t: &Table<'_>) -> paramdex::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut it = t.iter();
    let mut out = Vec::new();
    while it.next()? {
        out.push((it.key().to_vec(), it.value().to_vec()));
    }
    Ok(out)
}

fn lookup(t: &Table<'_>, key: &[u8]) -> paramdex::Result<Option<Vec<u8>>> {
    t.get(key, |v, _| v.to_vec())
}

fn model_vec(m: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Golden bytes (reference section 7, byte-exact vs TensorFlow 2.21 SaveV2).
// ---------------------------------------------------------------------------------------------

const GOLDEN_121: &str = "
    00 00 06 08 01 1a 02 08 01
    00 01 0f 77 08 01 12 04 12 02 08 02 28 08 35 59 3c e5 35
    00 00 00 00 01 00 00 00
    00 09 21 ad c3
    00 00 00 00 01 00 00 00
    00 c0 f2 a1 b0
    00 01 02 78 00 24
    00 00 00 00 01 00 00 00
    00 ab 30 70 7f
    29 08 36 0e
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    57 fb 80 8b 24 75 47 db";

#[test]
fn golden_minimal_tensorflow_index() {
    let expected = unhex(GOLDEN_121);
    assert_eq!(expected.len(), 121);
    let mut b = TableBuilder::new(Vec::new(), 0, TableOptions::default()).unwrap();
    b.add(b"", &unhex("08 01 1a 02 08 01")).unwrap();
    b.add(b"w", &unhex("08 01 12 04 12 02 08 02 28 08 35 59 3c e5 35"))
        .unwrap();
    assert_eq!(b.entries(), 2);
    let (out, stats) = b.finish().unwrap();
    assert_eq!(out, expected);
    assert_eq!(
        stats,
        TableStats {
            entries: 2,
            data_blocks: 1,
            raw_data_block_bytes: 36,
            stored_data_block_bytes: 36,
            index_block_len: 14,
            hash_block_len: 0,
            table_len: 121,
        }
    );

    // And it reads back.
    let t = Table::open(&expected, TableReadOptions::default()).unwrap();
    assert_eq!(t.data_blocks(), 1);
    assert_eq!(
        t.block_handle(0),
        BlockHandle {
            offset: 0,
            size: 36
        }
    );
    assert_eq!(t.first_data_offset(), Some(0));
    assert_eq!(
        t.footer().metaindex,
        BlockHandle {
            offset: 41,
            size: 8
        }
    );
    assert_eq!(
        t.footer().index,
        BlockHandle {
            offset: 54,
            size: 14
        }
    );
    assert_eq!(t.verify_all_blocks().unwrap(), 3);
    assert_eq!(
        lookup(&t, b"w").unwrap().unwrap(),
        unhex("08 01 12 04 12 02 08 02 28 08 35 59 3c e5 35")
    );
    assert_eq!(
        lookup(&t, b"").unwrap().unwrap(),
        unhex("08 01 1a 02 08 01")
    );
    assert_eq!(lookup(&t, b"x").unwrap(), None); // the separator is not a key
    assert_eq!(lookup(&t, b"v").unwrap(), None);
}

#[test]
fn golden_index_at_an_offset() {
    // The same table placed after 1000 bytes of other data: every handle shifts.
    let mut model = Model::new();
    model.insert(b"".to_vec(), unhex("08 01 1a 02 08 01"));
    model.insert(b"w".to_vec(), b"x".to_vec());
    let (file, stats) = build(&model, 1000, TableOptions::default());
    assert_eq!(stats.table_len as usize, file.len() - 1000);
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    assert_eq!(t.first_data_offset(), Some(1000));
    assert_eq!(
        t.footer().index.offset + t.footer().index.size + 5 + 48,
        file.len() as u64
    );
    assert_eq!(scan(&t).unwrap(), model_vec(&model));
}

// ---------------------------------------------------------------------------------------------
// 2. Real TensorFlow files.
// ---------------------------------------------------------------------------------------------

fn check_tf_file(set: &str, index_rel: &str) {
    let dir = support::data("tf").join(set);
    let file = std::fs::read(dir.join(index_rel)).unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let prefix = index_rel.strip_suffix(".index").unwrap();
    let names: BTreeSet<Vec<u8>> = manifest["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["checkpoint"].as_str() == Some(prefix))
        .map(|t| t["name"].as_str().unwrap().as_bytes().to_vec())
        .collect();
    assert!(
        !names.is_empty(),
        "{set}/{index_rel}: manifest lists no tensors"
    );

    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    assert_eq!(t.verify_all_blocks().unwrap(), t.data_blocks() as u64 + 2);
    let entries = scan(&t).unwrap();
    assert_eq!(entries[0].0, b"", "first key is the header");
    assert_eq!(&entries[0].1[..2], &[0x08, 0x01], "header: num_shards 1");
    for w in entries.windows(2) {
        assert!(w[0].0 < w[1].0, "keys strictly increasing");
    }
    let keys: BTreeSet<Vec<u8>> = entries[1..].iter().map(|e| e.0.clone()).collect();
    assert_eq!(
        entries.len() - 1,
        names.len(),
        "{set}/{index_rel}: entry count"
    );
    assert_eq!(
        keys, names,
        "{set}/{index_rel}: keys are the manifest's tensors"
    );

    // TensorFlow stores everything uncompressed.
    for i in 0..t.data_blocks() {
        let h = t.block_handle(i);
        assert_eq!(file[(h.offset + h.size) as usize], 0);
        assert!(matches!(t.load_block(i).unwrap(), BlockBytes::Mapped(_)));
    }

    for (i, (k, v)) in entries.iter().enumerate() {
        assert_eq!(lookup(&t, k).unwrap().as_ref(), Some(v));
        let mut after = k.clone();
        after.push(0);
        assert_eq!(lookup(&t, &after).unwrap(), None);
        let mut it = t.iter();
        it.seek(&after).unwrap();
        assert_eq!(it.valid(), i + 1 < entries.len());
        if let Some(next) = entries.get(i + 1) {
            assert_eq!(it.key(), &next.0[..]);
            // A key strictly between the two.
            let mut between = k.clone();
            between.extend_from_slice(&[0xff; 3]);
            if between < next.0 {
                assert_eq!(lookup(&t, &between).unwrap(), None);
            }
        }
    }
    assert_eq!(lookup(&t, b"\xff\xff\xff").unwrap(), None);
    assert_eq!(lookup(&t, b"zzzz").unwrap(), None);

    // Rebuilding the entries with TensorFlow's options reproduces the file byte for byte.
    let model: Model = entries.into_iter().collect();
    let (rebuilt, _) = build(&model, 0, TableOptions::default());
    assert_eq!(rebuilt, file, "{set}/{index_rel}: rebuilt table differs");
}

#[test]
fn tensorflow_basic_tf2() {
    check_tf_file("basic", "tf2/ckpt-1.index");
}

#[test]
fn tensorflow_basic_v1() {
    check_tf_file("basic", "v1/model.ckpt.index");
}

#[test]
fn tensorflow_strings_tf2() {
    check_tf_file("strings", "tf2/ckpt-1.index");
}

// ---------------------------------------------------------------------------------------------
// 3. Property test against a BTreeMap model.
// ---------------------------------------------------------------------------------------------

fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..12),
        // Long shared prefixes (beyond the 128-byte inline key buffer).
        (0usize..200, prop::collection::vec(any::<u8>(), 0..4)).prop_map(|(n, s)| {
            let mut k = vec![b'p'; n];
            k.extend(s);
            k
        }),
        // Keys made of 0x00, 0x01, 0xfe and 0xff.
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..8),
    ]
}

fn value_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        (any::<u8>(), 0usize..600).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn options_strategy() -> impl Strategy<Value = TableOptions> {
    (
        prop::sample::select(vec![1usize, 64, 256, 4096]),
        prop::sample::select(vec![1usize, 2, 16, 1024]),
        prop::sample::select(vec![Compression::None, Compression::Snappy]),
    )
        .prop_map(|(block_size, restart_interval, compression)| TableOptions {
            block_size,
            restart_interval,
            compression,
            // The hash index block and the lone first entry (SPEC.md 4.5, 4.2) on every other
            // block size: lookups must not depend on them.
            hash_index: block_size % 128 == 64 || block_size == 1 || block_size == 4096,
            first_entry_alone: block_size >= 256,
            // Version 3's layout (kind 1 hash block, first block last) on the largest size.
            hash_entries: block_size == 4096,
            first_entry_last: block_size == 4096,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn table_matches_model(
        model in prop::collection::btree_map(key_strategy(), value_strategy(), 0..150),
        probes in prop::collection::vec(key_strategy(), 0..30),
        opts in options_strategy(),
        start in prop::sample::select(vec![0usize, 7, 300]),
        cache in prop::sample::select(vec![0usize, 1000, 8 << 20]),
    ) {
        let (file, stats) = build(&model, start, opts);
        prop_assert_eq!(stats.entries, model.len() as u64);
        prop_assert_eq!(stats.table_len as usize, file.len() - start);
        let t = Table::open(&file, TableReadOptions { verify_checksums: true, cache_capacity: cache, ..TableReadOptions::default() }).unwrap();
        prop_assert_eq!(t.data_blocks() as u64, stats.data_blocks);
        prop_assert_eq!(
            t.verify_all_blocks().unwrap(),
            stats.data_blocks + 2 + u64::from(stats.hash_block_len > 0)
        );
        prop_assert_eq!(scan(&t).unwrap(), model_vec(&model));
        for (k, v) in &model {
            prop_assert_eq!(lookup(&t, k).unwrap(), Some(v.clone()));
            let mut after = k.clone();
            after.push(0);
            prop_assert_eq!(lookup(&t, &after).unwrap(), model.get(&after).cloned());
        }
        let mut targets = probes.clone();
        targets.extend(model.keys().map(|k| { let mut k = k.clone(); k.push(0x80); k }));
        for p in &targets {
            prop_assert_eq!(lookup(&t, p).unwrap(), model.get(p).cloned());
            let mut it = t.iter();
            it.seek(p).unwrap();
            let mut want = model.range(p.clone()..);
            match want.next() {
                None => prop_assert!(!it.valid()),
                Some((k, v)) => {
                    prop_assert!(it.valid());
                    prop_assert_eq!(it.key(), &k[..]);
                    prop_assert_eq!(it.value(), &v[..]);
                    // Continue two steps.
                    for (k, v) in want.take(2) {
                        prop_assert!(it.next().unwrap());
                        prop_assert_eq!(it.key(), &k[..]);
                        prop_assert_eq!(it.value(), &v[..]);
                    }
                }
            }
        }
        // seek_to_first after use restarts the scan.
        let mut it = t.iter();
        it.seek_to_first().unwrap();
        prop_assert_eq!(it.valid(), !model.is_empty());
        if let Some((k, _)) = model.iter().next() {
            prop_assert_eq!(it.key(), &k[..]);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Corruption: every byte flipped, every truncation.
// ---------------------------------------------------------------------------------------------

fn small_model() -> Model {
    let mut m = Model::new();
    m.insert(Vec::new(), b"header".to_vec());
    for i in 0..12u32 {
        let k = format!("layer{:02}/w", i * 7).into_bytes();
        let v = if i % 3 == 0 {
            vec![b'z'; 24]
        } else {
            format!("v{i}").into_bytes()
        };
        m.insert(k, v);
    }
    m.insert(vec![0xff, 0x00], b"tail".to_vec());
    m
}

/// Probes a possibly corrupt file; panics only on a soundness violation (or a panic inside).
fn probe(file: &[u8], model: &Model, absent: &[Vec<u8>], verify: bool) {
    let opts = TableReadOptions {
        verify_checksums: verify,
        cache_capacity: 1 << 20,
        hash_index: true,
    };
    let Ok(t) = Table::open(file, opts) else {
        return;
    };
    let verified = t.verify_all_blocks().is_ok();
    let scanned = scan(&t);
    let mut gets = Vec::new();
    for k in model.keys().chain(absent) {
        gets.push((k.clone(), lookup(&t, k)));
    }
    let mut it = t.iter();
    for k in absent {
        let _ = it.seek(k);
        let _ = it.next();
    }
    if verified {
        // All CRCs match: the bytes that matter are intact.
        assert_eq!(scanned.as_ref().ok(), Some(&model_vec(model)));
    }
    if let Ok(s) = &scanned {
        if verify || verified {
            assert_eq!(s, &model_vec(model), "undetected change in iteration");
        }
    }
    if verify {
        for (k, r) in gets {
            if let Ok(v) = r {
                assert_eq!(v.as_ref(), model.get(&k), "undetected change in get");
            }
        }
    }
}

fn corruption_sweep(opts: TableOptions) {
    let model = small_model();
    let (file, stats) = build(&model, 0, opts);
    assert!(stats.data_blocks >= 3, "want several blocks: {stats:?}");
    assert!(file.len() < 1500, "small table: {} bytes", file.len());
    let absent = vec![
        b"a".to_vec(),
        b"layer00".to_vec(),
        b"layer07/x".to_vec(),
        b"zz".to_vec(),
        vec![0xff, 0xff],
    ];
    probe(&file, &model, &absent, true);
    for i in 0..file.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut bad = file.clone();
            bad[i] ^= mask;
            probe(&bad, &model, &absent, true);
            probe(&bad, &model, &absent, false);
        }
    }
    for n in 0..file.len() {
        let cut = &file[..n];
        assert!(
            Table::open(cut, TableReadOptions::default()).is_err(),
            "truncated to {n}"
        );
        probe(cut, &model, &absent, false);
    }
}

#[test]
fn corruption_uncompressed() {
    corruption_sweep(TableOptions {
        block_size: 64,
        restart_interval: 2,
        compression: Compression::None,
        ..TableOptions::default()
    });
}

#[test]
fn corruption_hash_index() {
    corruption_sweep(TableOptions {
        block_size: 64,
        restart_interval: 2,
        compression: Compression::None,
        hash_index: true,
        first_entry_alone: true,
        hash_entries: false,
        first_entry_last: false,
    });
}

#[test]
fn corruption_hash_index_kind_1() {
    // Version 3's layout: every damaged byte is an error or leaves every answer unchanged.
    corruption_sweep(TableOptions {
        block_size: 64,
        restart_interval: 2,
        compression: Compression::None,
        hash_index: true,
        first_entry_alone: true,
        hash_entries: true,
        first_entry_last: true,
    });
}

#[test]
fn corruption_snappy() {
    corruption_sweep(TableOptions {
        block_size: 64,
        restart_interval: 16,
        compression: Compression::Snappy,
        ..TableOptions::default()
    });
}

#[test]
fn every_flip_is_detected_by_verify_or_open() {
    // Every single-bit change outside the footer padding must be caught by open (footer
    // handles are checked structurally) or by verify_all_blocks (blocks are checksummed).
    let model = small_model();
    let (file, _) = build(
        &model,
        0,
        TableOptions {
            block_size: 64,
            ..TableOptions::default()
        },
    );
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    let f = *t.footer();
    let mut enc = Vec::new();
    f.metaindex.encode_to(&mut enc);
    f.index.encode_to(&mut enc);
    let footer_start = file.len() - FOOTER_LEN;
    let padding = footer_start + enc.len()..footer_start + 40;
    for i in 0..file.len() {
        let mut bad = file.clone();
        bad[i] ^= 0x01;
        let caught = match Table::open(&bad, TableReadOptions::default()) {
            Err(_) => true,
            Ok(t) => t.verify_all_blocks().is_err(),
        };
        assert_eq!(caught, !padding.contains(&i), "byte {i}");
    }
}

#[test]
fn index_handles_are_validated() {
    let model = small_model();
    let (file, _) = build(
        &model,
        0,
        TableOptions {
            block_size: 64,
            ..TableOptions::default()
        },
    );
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    let f = *t.footer();
    let footer_start = file.len() - FOOTER_LEN;
    let rewrite = |f: Footer| {
        let mut v = file.clone();
        v[footer_start..].copy_from_slice(&f.encode());
        v
    };
    let err = |v: &[u8]| {
        Table::open(v, TableReadOptions::default())
            .unwrap_err()
            .to_string()
    };
    // Index not ending at the footer.
    let mut g = f;
    g.index.size -= 1;
    assert!(err(&rewrite(g)).contains("does not end where the footer begins"));
    g = f;
    g.index.offset = u64::MAX - 2;
    assert!(err(&rewrite(g)).contains("does not end where the footer begins"));
    // Metaindex overlapping the index.
    g = f;
    g.metaindex.size += 1;
    assert!(err(&rewrite(g)).contains("metaindex"));
    g = f;
    g.metaindex.offset = u64::MAX;
    assert!(err(&rewrite(g)).contains("metaindex"));
    // Metaindex moved before the last data block: that block now runs past it.
    g = f;
    g.metaindex.offset -= 1;
    g.metaindex.size = 0;
    assert!(err(&rewrite(g)).contains("runs past the metaindex"));
    // Bad magic.
    let mut v = file.clone();
    let n = v.len();
    v[n - 1] = 0;
    assert!(err(&v).contains("bad magic number"));
    assert!(err(&file[..47]).contains("too short"));
}

// ---------------------------------------------------------------------------------------------
// 5. The Snappy rule.
// ---------------------------------------------------------------------------------------------

/// Deterministic incompressible bytes (xorshift64*).
fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
        })
        .collect()
}

#[test]
fn snappy_kept_only_when_it_pays() {
    let opts = TableOptions {
        block_size: 4096,
        restart_interval: 16,
        compression: Compression::Snappy,
        ..TableOptions::default()
    };
    let mut model = Model::new();
    model.insert(b"a-compressible".to_vec(), vec![b'x'; 5000]);
    model.insert(b"b-random".to_vec(), noise(42, 5000));
    let (file, stats) = build(&model, 0, opts);
    assert_eq!(stats.data_blocks, 2);
    assert!(stats.stored_data_block_bytes < stats.raw_data_block_bytes);
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    let ty = |h: BlockHandle| file[(h.offset + h.size) as usize];
    assert_eq!(
        ty(t.block_handle(0)),
        1,
        "compressible block stored as snappy"
    );
    assert_eq!(ty(t.block_handle(1)), 0, "random block stored raw");
    assert!(t.block_handle(0).size < 1000);
    assert!(matches!(t.load_block(0).unwrap(), BlockBytes::Cached(_)));
    assert!(matches!(t.load_block(1).unwrap(), BlockBytes::Mapped(_)));
    // The metaindex block is the raw empty block even with snappy on.
    let m = t.footer().metaindex;
    assert_eq!(
        &file[m.offset as usize..(m.offset + m.size) as usize + 5],
        &unhex("00 00 00 00 01 00 00 00 00 c0 f2 a1 b0")[..]
    );
    t.verify_all_blocks().unwrap();
    assert_eq!(scan(&t).unwrap(), model_vec(&model));

    // Without compression, the same entries are stored raw.
    let (plain, st) = build(
        &model,
        0,
        TableOptions {
            compression: Compression::None,
            ..opts
        },
    );
    let t = Table::open(&plain, TableReadOptions::default()).unwrap();
    let h = t.block_handle(0);
    assert_eq!(plain[(h.offset + h.size) as usize], 0);
    assert_eq!(st.raw_data_block_bytes, st.stored_data_block_bytes);

    // A compressed index block (many compressible separators) reads back too.
    let mut big = Model::new();
    for i in 0..300u32 {
        big.insert(format!("{:0>60}", i).into_bytes(), vec![b'q'; 8]);
    }
    let (file, _) = build(
        &big,
        0,
        TableOptions {
            block_size: 1,
            ..opts
        },
    );
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    let ix = t.footer().index;
    assert_eq!(
        file[(ix.offset + ix.size) as usize],
        1,
        "index block compressed"
    );
    assert_eq!(scan(&t).unwrap(), model_vec(&big));
}

#[test]
fn builder_rejects_bad_input() {
    assert!(TableBuilder::new(
        Vec::new(),
        0,
        TableOptions {
            block_size: 0,
            ..TableOptions::default()
        }
    )
    .is_err());
    let mut b = TableBuilder::new(Vec::new(), 0, TableOptions::default()).unwrap();
    b.add(b"k", b"v").unwrap();
    assert!(matches!(
        b.add(b"k", b"v"),
        Err(paramdex::Error::InvalidArgument(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// Hand-assembled tables with valid checksums but inconsistent key order.
// ---------------------------------------------------------------------------------------------

/// Assembles a table from data blocks given as entry lists and explicit index separators.
fn assemble(blocks: &[(&[&[u8]], &[u8])]) -> Vec<u8> {
    assemble_with(blocks, |_, h| h)
}

/// Like [`assemble`], with the index's block handles rewritten by `fix(block number, handle)`.
fn assemble_with(
    blocks: &[(&[&[u8]], &[u8])],
    fix: impl Fn(usize, BlockHandle) -> BlockHandle,
) -> Vec<u8> {
    fn put_block(out: &mut Vec<u8>, contents: &[u8]) -> BlockHandle {
        let h = BlockHandle {
            offset: out.len() as u64,
            size: contents.len() as u64,
        };
        out.extend_from_slice(contents);
        let crc =
            paramdex::raw::format::crc32c_extend(paramdex::raw::format::crc32c(contents), &[0]);
        out.push(0);
        out.extend_from_slice(&paramdex::raw::format::mask_crc(crc).to_le_bytes());
        h
    }
    let mut out = Vec::new();
    let mut index = BlockBuilder::new(1);
    for (i, (keys, sep)) in blocks.iter().enumerate() {
        let mut b = BlockBuilder::new(16);
        for k in *keys {
            b.add(k, b"v");
        }
        let h = fix(i, put_block(&mut out, b.finish()));
        let mut enc = Vec::new();
        h.encode_to(&mut enc);
        index.add(sep, &enc);
    }
    let metaindex = put_block(&mut out, BlockBuilder::new(16).finish());
    let index = put_block(&mut out, index.finish());
    out.extend_from_slice(&Footer { metaindex, index }.encode());
    out
}

#[test]
fn key_order_is_checked_across_blocks() {
    let ok = assemble(&[(&[b"a", b"b"], b"c"), (&[b"d"], b"e")]);
    let t = Table::open(&ok, TableReadOptions::default()).unwrap();
    t.verify_all_blocks().unwrap();
    assert_eq!(scan(&t).unwrap().len(), 3);

    // Second block starts below the first block's separator (and its last key).
    let bad = assemble(&[(&[b"a", b"c"], b"c"), (&[b"b"], b"e")]);
    let t = Table::open(&bad, TableReadOptions::default()).unwrap();
    t.verify_all_blocks().unwrap();
    let e = scan(&t).unwrap_err().to_string();
    assert!(e.contains("not strictly increasing across blocks"), "{e}");
    // get cannot see "b" where the index says it cannot be.
    assert_eq!(lookup(&t, b"b").unwrap(), None);

    // A key above its block's separator.
    let bad = assemble(&[(&[b"a", b"x"], b"c"), (&[b"y"], b"z")]);
    let t = Table::open(&bad, TableReadOptions::default()).unwrap();
    let e = scan(&t).unwrap_err().to_string();
    assert!(e.contains("above the block's index separator"), "{e}");
    let mut it = t.iter();
    assert!(it.seek(b"b").is_err());
    assert!(!it.valid());
    assert!(it.next().is_err(), "stays failed");

    // Separators not strictly increasing: rejected at open.
    let bad = assemble(&[(&[b"a"], b"c"), (&[b"d"], b"c")]);
    let e = Table::open(&bad, TableReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not strictly increasing"), "{e}");

    // Overlapping or out-of-order data block handles: rejected at open.
    let two: &[(&[&[u8]], &[u8])] = &[(&[b"a"], b"b"), (&[b"c"], b"d")];
    let first = Table::open(&assemble(two), TableReadOptions::default())
        .unwrap()
        .block_handle(0);
    for (fix, what) in [
        (
            BlockHandle {
                offset: first.offset,
                size: first.size,
            },
            "same block twice",
        ),
        (
            BlockHandle {
                offset: first.offset + first.size + 4,
                size: 1,
            },
            "overlapping trailer",
        ),
    ] {
        let bad = assemble_with(two, |i, h| if i == 1 { fix } else { h });
        let e = Table::open(&bad, TableReadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("overlaps or precedes"), "{what}: {e}");
    }
}
