//! Concurrency: many threads reading one `Reader` (lookups, scans, LoD, verification, the
//! shared block cache and "block verified" flags), and files replaced by rename while readers
//! hold the old ones. No test depends on timing: threads are coordinated with barriers and
//! channels, and every loop is bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

use paramdex::{Compression, DType, ReadOptions, Reader, Tensor, Writer, WriterOptions};

/// Deterministic data of tensor `i` in generation `generation`.
fn data(i: u32, generation: u32) -> Vec<u8> {
    let n = 4 + (i % 13) as usize * 8;
    (0..n)
        .map(|j| (j as u32 * 31 + i * 7 + generation * 101) as u8)
        .collect()
}

fn name(i: u32) -> String {
    format!("model.layers.{}.block.{}.weight", i % 37, i)
}

/// Writes `n` tensors of generation `generation` (its number is also stored as a tensor).
fn write(path: &std::path::Path, n: u32, generation: u32, compression: Compression) {
    let opts = WriterOptions {
        block_size: 512,
        restart_interval: 4,
        compression,
        sync: false,
        ..Default::default()
    };
    let mut w = Writer::create_with(path, opts).unwrap();
    for i in 0..n {
        let d = data(i, generation);
        let lod = [vec![0u64, 1, (d.len() / 4) as u64]];
        let shape = [(d.len() / 4) as u64];
        let t = Tensor::new(DType::Float32, &shape, &d);
        if i % 10 == 0 {
            w.add(name(i), t.with_lod(&lod)).unwrap();
        } else {
            w.add(name(i), t).unwrap();
        }
    }
    w.add(
        "generation",
        Tensor::new(DType::UInt32, &[], &generation.to_le_bytes()),
    )
    .unwrap();
    w.finish().unwrap();
}

fn generation_of(r: &Reader) -> u32 {
    let t = r.tensor("generation").unwrap();
    t.as_slice::<u32>().unwrap()[0]
}

/// Checks every tensor of a reader against generation `g`.
fn check_all(r: &Reader, n: u32, g: u32) {
    for i in 0..n {
        let t = r.tensor(name(i)).unwrap();
        assert_eq!(
            t.data(),
            data(i, g).as_slice(),
            "tensor {i} of generation {g}"
        );
    }
}

#[test]
fn many_threads_share_one_reader() {
    const N: u32 = 600;
    const THREADS: u32 = 16;
    for compression in [Compression::None, Compression::Snappy] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.pdx");
        write(&path, N, 0, compression);
        // A cache smaller than the index: threads evict each other's blocks constantly.
        let r = Arc::new(
            Reader::open_with(
                &path,
                ReadOptions {
                    verify_blocks: true,
                    verify_tensors: true,
                    block_cache_bytes: 2048,
                },
            )
            .unwrap(),
        );
        assert!(r.data_blocks() > 8, "{} blocks", r.data_blocks());
        let start = Arc::new(Barrier::new(THREADS as usize));
        let handles: Vec<_> = (0..THREADS)
            .map(|k| {
                let r = Arc::clone(&r);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    start.wait();
                    let mut seen = 0u32;
                    match k % 4 {
                        // Point lookups in a thread-specific order.
                        0 | 1 => {
                            for j in 0..N {
                                let i = (j * 7 + k * 13) % N;
                                let t = r.tensor(name(i)).unwrap();
                                assert_eq!(t.data(), data(i, 0).as_slice());
                                if i.is_multiple_of(10) {
                                    let lod = t.lod().unwrap().to_vec();
                                    assert_eq!(lod, vec![vec![0, 1, t.shape()[0]]]);
                                }
                                assert!(r.get(format!("{}x", name(i))).unwrap().is_none());
                                seen += 1;
                            }
                        }
                        // Full scans and prefix scans.
                        2 => {
                            let all: Vec<_> =
                                r.iter().map(|t| t.unwrap().name().to_vec()).collect();
                            assert_eq!(all.len() as u32, N + 1);
                            assert!(all.windows(2).all(|w| w[0] < w[1]));
                            for p in 0..37 {
                                let prefix = format!("model.layers.{p}.");
                                for t in r.prefix(&prefix) {
                                    let t = t.unwrap();
                                    assert!(t.name().starts_with(prefix.as_bytes()));
                                    seen += 1;
                                }
                            }
                        }
                        // Whole-file verification, on several threads of its own.
                        _ => {
                            let report = r
                                .verify_with(paramdex::VerifyOptions {
                                    load: None,
                                    threads: 2,
                                    progress: None,
                                })
                                .unwrap();
                            assert_eq!(report.tensors, u64::from(N) + 1);
                            seen += report.tensors as u32;
                        }
                    }
                    seen
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap() > 0);
        }
    }
}

#[test]
fn replaced_files_keep_serving_their_generation() {
    const N: u32 = 200;
    const GENERATIONS: u32 = 6;
    const READERS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.pdx");
    write(&path, N, 0, Compression::None);
    // Each round: every reader thread opens the current file (all see the same generation,
    // since the writer waits), then the writer replaces it while the readers hold their
    // Reader and read all of it, twice; the readers keep every Reader they opened and check
    // all of them again at the end.
    let opened = Arc::new(Barrier::new(READERS + 1));
    let replaced = Arc::new(Barrier::new(READERS + 1));
    let handles: Vec<_> = (0..READERS)
        .map(|_| {
            let path = path.clone();
            let opened = Arc::clone(&opened);
            let replaced = Arc::clone(&replaced);
            std::thread::spawn(move || {
                let mut held: BTreeMap<u32, Reader> = BTreeMap::new();
                for g in 0..GENERATIONS {
                    let r = Reader::open(&path).unwrap();
                    assert_eq!(generation_of(&r), g);
                    opened.wait();
                    check_all(&r, N, g); // races with the replacement
                    replaced.wait();
                    check_all(&r, N, g); // after it
                    r.verify().unwrap();
                    held.insert(g, r);
                }
                for (g, r) in &held {
                    check_all(r, N, *g);
                }
                held.len()
            })
        })
        .collect();
    for g in 0..GENERATIONS {
        opened.wait();
        write(&path, N, g + 1, Compression::None);
        replaced.wait();
    }
    for h in handles {
        assert_eq!(h.join().unwrap(), GENERATIONS as usize);
    }
    let r = Reader::open(&path).unwrap();
    assert_eq!(generation_of(&r), GENERATIONS);
    check_all(&r, N, GENERATIONS);
}

#[test]
fn opening_while_the_file_is_replaced_sees_a_complete_file() {
    // Readers open the path in a loop while a writer replaces it; every open sees one complete
    // generation (never a mixture, never a partial file). The loop is bounded by the writer:
    // readers stop after the generation they see is the last one.
    const N: u32 = 120;
    const GENERATIONS: u32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.pdx");
    write(&path, N, 0, Compression::Snappy);
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let path = path.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut last = 0;
                let mut opens = 0u32;
                while last < GENERATIONS {
                    let r = Reader::open(&path).unwrap();
                    let g = generation_of(&r);
                    assert!(g >= last, "generations go backwards: {g} after {last}");
                    check_all(&r, N, g);
                    last = g;
                    opens += 1;
                }
                tx.send(opens).unwrap();
            })
        })
        .collect();
    drop(tx);
    for g in 1..=GENERATIONS {
        write(&path, N, g, Compression::Snappy);
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(rx.iter().count(), 3);
}
