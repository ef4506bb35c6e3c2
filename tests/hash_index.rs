//! The hash index block (SPEC.md 4.5) and the header entry alone in the first data block (4.2):
//! the bytes the writer lays out, read back by hand as the spec says; lookups through the block
//! agree with the binary searches; a damaged or hostile block never yields another tensor's
//! entry; files without the block read as before.

mod support;

use paramdex::raw::format::{crc32c, mask_crc};
use paramdex::raw::table::{Block, BlockHandle, Table, TableReadOptions, HASH_INDEX_KEY};
use paramdex::{DType, Error, ReadOptions, Reader, Tensor, Writer, WriterOptions};

/// Options of a file with (or without) the kind 0 hash block and the lone header first: the
/// layout of versions 1 and 2, which these tests read by hand. Version 3's kind 1 block is
/// tested in `tests/compat_v3.rs`, `tests/table.rs` (`corruption_hash_index_kind_1`: every
/// damaged byte an error or no change) and the table module's own tests.
fn opts(hash_index: bool, header_alone: bool) -> WriterOptions {
    WriterOptions {
        sync: false,
        hash_index,
        header_alone,
        block_size: 512,
        index_v3: false,
        ..WriterOptions::default()
    }
}

fn name(i: usize) -> String {
    format!("model.layers.{i}.w")
}

/// A file of `n` float32[2] tensors holding `[i, -i]`, written with `o`.
fn write(n: usize, o: WriterOptions) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.pdx");
    let mut w = Writer::create_with(&path, o).unwrap();
    for i in 0..n {
        let d = support::f32_bytes(&[i as f32, -(i as f32)]);
        w.add(name(i), Tensor::new(DType::Float32, &[2], &d))
            .unwrap();
    }
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

fn fixed32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn fixed64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The hash block's handle, read from the metaindex by hand.
fn hash_handle(file: &[u8]) -> Option<BlockHandle> {
    let t = Table::open(file, TableReadOptions::default()).unwrap();
    let m = t.footer().metaindex;
    let meta = &file[m.offset as usize..(m.offset + m.size) as usize];
    let block = Block::parse(meta, m.offset).unwrap();
    let mut it = block.iter();
    let mut found = None;
    while it.next().unwrap() {
        assert_eq!(it.key(), HASH_INDEX_KEY, "the one metaindex key");
        let mut cur = paramdex::raw::format::Cursor::new(it.value(), 0);
        found = Some(BlockHandle::decode(&mut cur).unwrap());
        assert_eq!(cur.remaining(), 0);
    }
    found
}

/// The (block, restart) slot values of the hash block for `key`, computed by hand from the
/// bytes as SPEC.md 4.5 lays them out.
fn slots_for(file: &[u8], h: BlockHandle, key: &[u8]) -> Vec<(usize, usize)> {
    let b = &file[h.offset as usize..(h.offset + h.size) as usize];
    let (home, total) = (fixed32(b, 0), fixed32(b, 4));
    let pages = (total as usize).div_ceil(64);
    let hash = crc32c(key);
    let mut out = Vec::new();
    let first = ((u64::from(hash) * u64::from(home)) >> 32) as usize;
    'outer: for bucket in first..total as usize {
        for s in 0..8 {
            let v = fixed64(b, 16 + 4 * pages + 64 * bucket + 8 * s);
            if v == 0 {
                break 'outer;
            }
            if v >> 56 == u64::from(hash & 0xff) {
                out.push((
                    ((v & 0xffff_ffff) - 1) as usize,
                    ((v >> 32) & 0xff_ffff) as usize,
                ));
            }
        }
    }
    out
}

#[test]
fn default_layout_follows_the_spec() {
    let n = 300;
    let file = write(n, opts(true, true));
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    assert!(t.data_blocks() > 10);
    // 4.2: the first data block holds the header entry alone; its separator is "".
    let b0 = t.block_handle(0);
    let block0 = Block::parse(
        &file[b0.offset as usize..(b0.offset + b0.size) as usize],
        b0.offset,
    )
    .unwrap();
    let mut it = block0.iter();
    assert!(it.next().unwrap());
    assert_eq!(it.key(), b"");
    assert!(!it.next().unwrap(), "the header entry is alone in block 0");
    assert_eq!(t.index().separator(0), b"");
    // 4.5: the hash block lies between the last data block and the metaindex.
    let h = hash_handle(&file).expect("a hash block");
    let last = t.block_handle(t.data_blocks() - 1);
    assert_eq!(h.offset, last.offset + last.size + 5);
    assert_eq!(h.offset + h.size + 5, t.footer().metaindex.offset);
    let b = &file[h.offset as usize..(h.offset + h.size) as usize];
    let keys = n as u32 + 1; // the header's "" too
    let (home, total) = (fixed32(b, 0), fixed32(b, 4));
    assert_eq!(home, keys.div_ceil(6));
    assert!(total >= home);
    assert_eq!(&b[8..12], &[1, 8, 6, 0]);
    assert_eq!(fixed32(b, 12), mask_crc(crc32c(&b[..12])));
    let pages = (total as usize).div_ceil(64);
    assert_eq!(b.len(), 16 + 4 * pages + 64 * total as usize);
    for p in 0..pages {
        let start = 16 + 4 * pages + p * 4096;
        let end = (start + 4096).min(b.len());
        assert_eq!(fixed32(b, 16 + 4 * p), mask_crc(crc32c(&b[start..end])));
    }
    // Trailer: type 0 and the masked CRC of the block and the type byte.
    let trailer = &file[(h.offset + h.size) as usize..(h.offset + h.size + 5) as usize];
    assert_eq!(trailer, support::block_trailer(b).as_slice());
    let occupied = b[16 + 4 * pages..]
        .chunks_exact(8)
        .filter(|s| s != &[0u8; 8])
        .count();
    assert_eq!(occupied, keys as usize);
    // Every key's slot names the block and restart run a scan finds it in.
    let mut it = t.iter();
    while it.next().unwrap() {
        let key = it.key().to_vec();
        let block = (0..t.data_blocks())
            .find(|&i| t.block_handle(i).offset == it.block_offset())
            .unwrap();
        let slots = slots_for(&file, h, &key);
        assert!(
            slots.iter().any(|&(b, _)| b == block),
            "{key:?}: slots {slots:?}, block {block}"
        );
    }
    assert!(t.has_hash_index().unwrap());
    assert_eq!(t.check_hash_index().unwrap(), u64::from(keys));
}

#[test]
fn without_the_options_the_index_is_the_earlier_layout() {
    let file = write(300, opts(false, false));
    assert_eq!(hash_handle(&file), None);
    let t = Table::open(&file, TableReadOptions::default()).unwrap();
    let m = t.footer().metaindex;
    assert_eq!(
        &file[m.offset as usize..(m.offset + m.size) as usize],
        &[0, 0, 0, 0, 1, 0, 0, 0]
    );
    assert!(!t.has_hash_index().unwrap());
    assert_eq!(t.check_hash_index().unwrap(), 0);
    // The header shares block 0 with the first tensors.
    let mut it = t.iter();
    assert!(it.next().unwrap() && it.next().unwrap());
    assert_eq!(it.block_offset(), t.block_handle(0).offset);
    // Only the layout differs: the same records, the same entries.
    let new = write(300, opts(true, true));
    let r_old = Reader::from_bytes(file.clone()).unwrap();
    let r_new = Reader::from_bytes(new.clone()).unwrap();
    assert_eq!(r_old.records(), r_new.records());
    for i in 0..300 {
        let (a, b) = (
            r_old.tensor(name(i)).unwrap(),
            r_new.tensor(name(i)).unwrap(),
        );
        assert_eq!(a.data(), b.data());
        assert_eq!(a.data_offset(), b.data_offset());
    }
    // header_alone alone, hash_index alone.
    assert!(hash_handle(&write(50, opts(true, false))).is_some());
    assert!(hash_handle(&write(50, opts(false, true))).is_none());
}

#[test]
fn hashed_and_binary_search_lookups_agree() {
    let n = 2000;
    let file = write(n, opts(true, true));
    let hashed = Table::open(&file, TableReadOptions::default()).unwrap();
    let searched = Table::open(
        &file,
        TableReadOptions {
            hash_index: false,
            ..TableReadOptions::default()
        },
    )
    .unwrap();
    let probe = |t: &Table<'_>, k: &[u8]| t.get(k, |v, at| (v.to_vec(), at)).unwrap();
    let mut keys: Vec<Vec<u8>> = (0..n).map(|i| name(i).into_bytes()).collect();
    // Absent keys: neighbours of present ones, prefixes, extensions, the empty key.
    keys.extend(
        (0..n)
            .step_by(7)
            .map(|i| format!("model.layers.{i}.v").into_bytes()),
    );
    keys.extend(
        (0..n)
            .step_by(13)
            .map(|i| format!("model.layers.{i}").into_bytes()),
    );
    keys.extend(
        (0..n)
            .step_by(11)
            .map(|i| format!("model.layers.{i}.w.").into_bytes()),
    );
    keys.extend([
        b"".to_vec(),
        b"\xff".to_vec(),
        b"a".to_vec(),
        b"model".to_vec(),
    ]);
    for k in &keys {
        assert_eq!(probe(&hashed, k), probe(&searched, k), "{k:?}");
        assert_eq!(
            probe(&hashed, k),
            hashed.get_by_search(k, |v, at| (v.to_vec(), at)).unwrap()
        );
    }
    let r = Reader::from_bytes(file).unwrap();
    for i in 0..n {
        let v = r.tensor(name(i)).unwrap();
        assert_eq!(v.as_slice::<f32>().unwrap(), &[i as f32, -(i as f32)]);
    }
    assert!(r.get("model.layers.5.v").unwrap().is_none());
    r.verify().unwrap();
}

/// Rewrites the CRCs of the hash block after its bytes were changed: the header's, every
/// page's and the trailer's, so that only the structure is hostile.
fn reseal(file: &mut [u8], h: BlockHandle) {
    let (start, end) = (h.offset as usize, (h.offset + h.size) as usize);
    let b = &mut file[start..end];
    let c = mask_crc(crc32c(&b[..12]));
    b[12..16].copy_from_slice(&c.to_le_bytes());
    let total = fixed32(b, 4) as usize;
    let pages = total.div_ceil(64);
    for p in 0..pages {
        let s = 16 + 4 * pages + p * 4096;
        let e = (s + 4096).min(b.len());
        let c = mask_crc(crc32c(&b[s..e]));
        b[16 + 4 * p..20 + 4 * p].copy_from_slice(&c.to_le_bytes());
    }
    let t = support::block_trailer(&file[start..end]);
    file[end..end + 5].copy_from_slice(&t);
}

/// Every tensor read back through `r` is either missing, an error, or exactly the tensor
/// asked for.
fn never_wrong(r: &Reader, n: usize) -> (usize, usize, usize) {
    let (mut ok, mut missing, mut errors) = (0, 0, 0);
    for i in 0..n {
        match r.get(name(i)) {
            Ok(Some(v)) => {
                assert_eq!(v.name(), name(i).as_bytes());
                assert_eq!(v.as_slice::<f32>().unwrap(), &[i as f32, -(i as f32)]);
                ok += 1;
            }
            Ok(None) => missing += 1,
            Err(_) => errors += 1,
        }
    }
    (ok, missing, errors)
}

#[test]
fn hostile_hash_blocks_never_return_another_tensor() {
    let n = 400;
    let good = write(n, opts(true, true));
    let h = hash_handle(&good).unwrap();
    let pages = (fixed32(&good, h.offset as usize + 4) as usize).div_ceil(64);
    let slots_at = h.offset as usize + 16 + 4 * pages;
    let slots_end = (h.offset + h.size) as usize;
    let data_blocks = Table::open(&good, TableReadOptions::default())
        .unwrap()
        .data_blocks() as u64;

    // Every slot shifted to the next block, restart point, or swapped with its neighbour:
    // lookups miss or fail, never return a wrong tensor; verify reports the block.
    // (what, new slot value from the slot's value and another slot's).
    type Rewrite = Box<dyn Fn(u64, u64) -> u64>;
    let rewrites: Vec<(&str, Rewrite)> = vec![
        (
            "next block",
            Box::new(|v, _| if v == 0 { 0 } else { v + 1 }),
        ),
        (
            "next restart",
            Box::new(|v, _| if v == 0 { 0 } else { v + (1 << 32) }),
        ),
        (
            "another key's block and restart",
            Box::new(|v, w| {
                if v == 0 || w == 0 {
                    v
                } else {
                    (v & (0xff << 56)) | (w & !(0xff << 56))
                }
            }),
        ),
        (
            "block out of range",
            Box::new(move |v, _| {
                if v == 0 {
                    0
                } else {
                    (v & !0xffff_ffff) | (data_blocks + 7)
                }
            }),
        ),
        (
            "restart out of range",
            Box::new(|v, _| if v == 0 { 0 } else { v | (0xff_ffff << 32) }),
        ),
    ];
    for (what, f) in rewrites {
        let mut bad = good.clone();
        let orig: Vec<u64> = (slots_at..slots_end)
            .step_by(8)
            .map(|p| fixed64(&good, p))
            .collect();
        for (k, p) in (slots_at..slots_end).step_by(8).enumerate() {
            // The slot in the same place of the bucket 5 buckets on (another key's).
            let other = orig.get(k + 40).copied().unwrap_or(0);
            let v = f(orig[k], other);
            bad[p..p + 8].copy_from_slice(&v.to_le_bytes());
        }
        reseal(&mut bad, h);
        let r = Reader::from_bytes(bad).unwrap();
        let (ok, missing, errors) = never_wrong(&r, n);
        assert!(missing + errors > 0, "{what}: {ok} {missing} {errors}");
        assert!(r.verify().is_err(), "{what}: verify accepts it");
    }

    // A slot dropped: that tensor is missing through get, and verify says so.
    let mut bad = good.clone();
    let key = name(17);
    let hash = crc32c(key.as_bytes());
    let pos = (slots_at..slots_end)
        .step_by(8)
        .find(|&p| {
            let v = fixed64(&good, p);
            v != 0 && v >> 56 == u64::from(hash & 0xff)
        })
        .unwrap();
    bad[pos..pos + 8].fill(0);
    reseal(&mut bad, h);
    let r = Reader::from_bytes(bad).unwrap();
    never_wrong(&r, n);
    let e = r.verify().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");

    // A page changed without its CRC: the lookup reports a checksum error.
    let mut bad = good.clone();
    bad[slots_at + 3] ^= 0x40;
    let r = Reader::from_bytes(bad.clone()).unwrap();
    let (_, _, errors) = never_wrong(&r, n);
    assert!(errors > 0);
    assert!(matches!(
        r.get(name(0))
            .err()
            .or_else(|| (0..n).find_map(|i| r.get(name(i)).err())),
        Some(Error::ChecksumMismatch { .. })
    ));
    // With block verification off the page is not checked, and still nothing wrong is read.
    let r = Reader::from_bytes_with(
        bad,
        ReadOptions {
            verify_blocks: false,
            ..ReadOptions::default()
        },
    )
    .unwrap();
    never_wrong(&r, n);

    // A header changed: every lookup by name fails (the file still opens: open reads no hash
    // block), and so does verify.
    for at in [0usize, 4, 8, 9, 10, 11, 12] {
        let mut bad = good.clone();
        bad[h.offset as usize + at] ^= 1;
        let r = Reader::from_bytes(bad.clone()).unwrap();
        assert!(r.get(name(3)).is_err(), "header byte {at}");
        assert!(r.verify().is_err());
        // Resealed, a header that breaks a rule is still refused; another number of home
        // buckets (byte 0) is a valid header that sends lookups to other buckets: they miss,
        // never return another tensor, and verify reports the block.
        if at < 12 {
            reseal(&mut bad, h);
            let r = Reader::from_bytes(bad).unwrap();
            if at == 0 {
                let (_, missing, _) = never_wrong(&r, n);
                assert!(missing > 0);
                assert!(r.verify().is_err());
            } else {
                assert!(r.get(name(3)).is_err(), "resealed header byte {at}");
            }
        }
    }

    // A metaindex pointing the block elsewhere (into the data blocks, past the metaindex).
    let t = Table::open(&good, TableReadOptions::default()).unwrap();
    let m = t.footer().metaindex;
    for (offset, size) in [
        (t.block_handle(0).offset, h.size),
        (h.offset, h.size + 1),
        (h.offset + 1, h.size),
        (m.offset, 8),
    ] {
        let mut meta = paramdex::raw::table::BlockBuilder::new(16);
        let mut v = Vec::new();
        BlockHandle { offset, size }.encode_to(&mut v);
        meta.add(HASH_INDEX_KEY, &v);
        let contents = meta.finish().to_vec();
        if contents.len() as u64 != m.size {
            continue; // a handle of another length would move the index block
        }
        let mut bad = good.clone();
        let ms = m.offset as usize;
        bad[ms..ms + contents.len()].copy_from_slice(&contents);
        let tr = support::block_trailer(&contents);
        bad[ms + contents.len()..ms + contents.len() + 5].copy_from_slice(&tr);
        let r = Reader::from_bytes(bad).unwrap();
        assert!(r.get(name(3)).is_err(), "hash handle {offset}+{size}");
    }
}

#[test]
fn readers_that_ignore_the_block_read_the_same() {
    // A reader that does not use the block (as every reader before it): the same answers.
    let file = write(500, opts(true, true));
    let t = Table::open(
        &file,
        TableReadOptions {
            hash_index: false,
            ..TableReadOptions::default()
        },
    )
    .unwrap();
    let mut it = t.iter();
    let mut n = 0;
    while it.next().unwrap() {
        n += 1;
    }
    assert_eq!(n, 501);
    assert_eq!(t.verify_all_blocks().unwrap(), t.data_blocks() as u64 + 3);
}

#[test]
fn sharded_indexes_and_rewrites_get_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let save = paramdex::SaveId::random();
    for k in 0..2u32 {
        let mut w = paramdex::ShardWriter::create(
            &prefix,
            k,
            2,
            save,
            WriterOptions {
                sync: false,
                ..WriterOptions::default()
            },
        )
        .unwrap();
        for i in 0..50 {
            let d = support::f32_bytes(&[i as f32]);
            w.add(format!("r{k}.t{i}"), Tensor::new(DType::Float32, &[1], &d))
                .unwrap();
        }
        w.finish().unwrap();
    }
    paramdex::merge_shards(&prefix, &paramdex::MergeShardsOptions::default()).unwrap();
    let index = std::fs::read(format!("{}.index", prefix.display())).unwrap();
    assert!(hash_handle(&index).is_some());
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(
        r.tensor("r1.t42").unwrap().as_slice::<f32>().unwrap(),
        &[42.0]
    );
    r.verify().unwrap();

    // A metadata change in place writes a new table with the block.
    let path = dir.path().join("m.pdx");
    std::fs::write(&path, write(20, opts(false, false))).unwrap();
    let mut meta = paramdex::Metadata::new();
    meta.insert("step", paramdex::MetaValue::Int(3)).unwrap();
    paramdex::rewrite_in_place(&path, &meta, false).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(hash_handle(&bytes).is_some());
    let r = Reader::open(&path).unwrap();
    assert_eq!(
        r.tensor(name(7)).unwrap().as_slice::<f32>().unwrap(),
        &[7.0, -7.0]
    );
    r.verify().unwrap();
}
