//! A writer driven by an arbitrary operation sequence (adds with duplicate names, bad shapes,
//! bad LoD and wrong data lengths; streamed tensors written short, long or abandoned), optionally
//! over a backend that fails after N bytes (cleanly or with a torn write) or at fsync, then
//! `finish` and reopen, all checked against a model:
//!
//! - every operation succeeds exactly when the model says the input is valid, unless the
//!   injected fault fired (then only I/O errors, and the writer refuses everything after);
//! - a finished file holds exactly the model's tensors (names, dtypes, shapes, LoD, data) and
//!   verifies;
//! - when `finish` fails, the final path still holds its previous bytes and no temporary file is
//!   left behind.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use paramdex::{DType, Error, Reader, Tensor, WriteBackend, Writer, WriterOptions};

#[derive(Arbitrary, Debug)]
enum NameSel {
    Pool(u8),
    Raw(Vec<u8>),
}

const POOL: [&[u8]; 8] = [b"a", b"b", b"a\0", b"\xff", b"model.w", b"ab", b"", b"a"];

impl NameSel {
    fn bytes(&self) -> Vec<u8> {
        match self {
            NameSel::Pool(i) => POOL[usize::from(*i) % POOL.len()].to_vec(),
            NameSel::Raw(v) => v.iter().take(40).copied().collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Desc {
    name: NameSel,
    dtype: u8,
    /// Dims: small values, with two codes for huge ones (overflow checks).
    dims: Vec<u16>,
    lod: Vec<Vec<u8>>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Add {
        desc: Desc,
        len_delta: i8,
        seed: u8,
    },
    Stream {
        desc: Desc,
        chunks: Vec<u16>,
        finish: bool,
        seed: u8,
    },
    /// A bytes value (SPEC.md 6.1): any bytes under a name.
    AddBytes {
        name: NameSel,
        value: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    align_log2: u8,
    block_size: u16,
    restart_interval: u8,
    snappy: bool,
    sync: bool,
    /// Fail the backend once this many bytes have been written.
    fail_after: Option<u16>,
    /// Whether the failing write stores its first bytes before failing (a torn write).
    torn: bool,
    fail_sync: bool,
    ops: Vec<Op>,
    finish: bool,
}

/// A backend over the temporary file that fails after a byte budget or at fsync.
struct Faulty {
    file: File,
    budget: Option<u64>,
    torn: bool,
    fail_sync: bool,
    fired: Arc<AtomicBool>,
}

impl Write for Faulty {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.fired.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected: device gone"));
        }
        if let Some(b) = self.budget {
            if buf.len() as u64 > b {
                self.fired.store(true, Ordering::SeqCst);
                if self.torn {
                    self.file.write_all(&buf[..b as usize])?;
                }
                return Err(io::Error::other("injected: write failed"));
            }
            self.budget = Some(b - buf.len() as u64);
        }
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for Faulty {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

impl WriteBackend for Faulty {
    fn sync(&mut self) -> io::Result<()> {
        if self.fail_sync {
            self.fired.store(true, Ordering::SeqCst);
            return Err(io::Error::other("injected: fsync failed"));
        }
        self.file.sync_all()
    }
}

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::common::scratch_dir("pdx-fuzz-w"))
}

struct Expect {
    /// The value, for a bytes value (whose dtype, shape and data are its encoding's).
    bytes: Option<Vec<u8>>,
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    data: Vec<u8>,
}

fn dims_of(d: &[u16]) -> Vec<u64> {
    d.iter()
        .take(300)
        .map(|&x| match x {
            0xffff => u64::MAX / 2,
            0xfffe => 1 << 40,
            x => u64::from(x % 5),
        })
        .collect()
}

/// The model's opinion of a tensor description: its data length, or why it is invalid.
fn model_len(dtype: DType, shape: &[u64], lod: &[Vec<u64>]) -> Option<u64> {
    if shape.len() > 254 || lod.len() > 32 {
        return None;
    }
    let len = if shape.contains(&0) {
        0
    } else {
        shape
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d))?
    };
    if !lod.is_empty() {
        let rows = *shape.first()?;
        for (i, level) in lod.iter().enumerate() {
            if level.first() != Some(&0) || level.windows(2).any(|w| w[1] < w[0]) {
                return None;
            }
            let limit = match lod.get(i + 1) {
                // An empty next level is invalid (it has no leading 0): checked in its turn.
                Some(next) => (next.len() as u64).checked_sub(1)?,
                None => rows,
            };
            if *level.last()? != limit {
                return None;
            }
        }
    }
    Some(len)
}

fn fill(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(167).wrapping_add(seed))
        .collect()
}

/// Runs the checks on one input (the body of the fuzz target): the bytes are decoded into
/// an [`Input`] the way libFuzzer's typed targets do, and undecodable bytes are skipped.
pub fn check(data: &[u8]) {
    let Ok(input) = <Input as Arbitrary>::arbitrary_take_rest(arbitrary::Unstructured::new(data))
    else {
        return;
    };
    check_input(input);
}

fn check_input(input: Input) {
    let d = dir();
    let path = d.join("out.pdx");
    let previous = b"previous complete file".to_vec();
    std::fs::write(&path, &previous).expect("write previous file");
    let opts = WriterOptions {
        alignment: 1 << (input.align_log2 % 14),
        block_size: usize::from(input.block_size % 2048),
        restart_interval: usize::from(input.restart_interval % 20),
        compression: if input.snappy {
            paramdex::Compression::Snappy
        } else {
            paramdex::Compression::None
        },
        sync: input.sync,
        // From bits the other fields leave free (restart intervals are taken modulo 20), so
        // that stored inputs keep decoding as they did.
        hash_index: input.restart_interval & 0x80 == 0,
        header_alone: input.restart_interval & 0x40 == 0,
        // Version 3's layout on most inputs; the earlier one when a bit the block size
        // (taken modulo 2048) leaves free is set.
        index_v3: input.block_size & 0x8000 == 0,
        // Half the inputs spill their index entries every few hundred bytes, so the spill
        // runs and their merge are exercised (the outcome must not depend on it).
        index_memory: if input.restart_interval.is_multiple_of(2) {
            256
        } else {
            usize::MAX
        },
        // A bit `block_size % 2048` leaves free: half the inputs compress their records
        // (tensors of at least 4 KiB that shrink), whose outcome must be the same bytes.
        data_compression: if input.block_size & 0x8000 != 0 {
            paramdex::DataCompression::Lossless
        } else {
            paramdex::DataCompression::None
        },
    };
    let fired = Arc::new(AtomicBool::new(false));
    let backend_fired = fired.clone();
    let (budget, torn, fail_sync) = (input.fail_after.map(u64::from), input.torn, input.fail_sync);
    let mut w = match Writer::create_with_backend(&path, opts.clone(), move |file| {
        Box::new(Faulty {
            file,
            budget,
            torn,
            fail_sync,
            fired: backend_fired,
        })
    }) {
        Ok(w) => {
            assert!(opts.alignment <= 4096 && opts.block_size >= 1 && opts.restart_interval >= 1);
            w
        }
        Err(e) => {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            return;
        }
    };
    let mut model: BTreeMap<Vec<u8>, Expect> = BTreeMap::new();
    let mut poisoned = false;
    // A file holding a compressed record reserves names starting with NUL (SPEC.md 3.4), and
    // once such a name is in, the writer compresses nothing more: the model follows both.
    let lossless = opts.data_compression == paramdex::DataCompression::Lossless;
    let (mut compressed, mut nul_added) = (false, false);
    for op in input.ops.iter().take(64) {
        let (desc, is_stream) = match op {
            Op::Add { desc, .. } => (desc, false),
            Op::Stream { desc, .. } => (desc, true),
            Op::AddBytes { name, value } => {
                let name = name.bytes();
                let value: Vec<u8> = value.iter().take(4096).copied().collect();
                let nul_refused = compressed && name.first() == Some(&0);
                let expect_ok =
                    !poisoned && !name.is_empty() && !model.contains_key(&name) && !nul_refused;
                match w.add_bytes(&name, &value) {
                    Ok(()) => {
                        assert!(
                            expect_ok,
                            "add_bytes accepted what the model rejects: {op:?}"
                        );
                        nul_added |= name.first() == Some(&0);
                        model.insert(
                            name,
                            Expect {
                                bytes: Some(value),
                                dtype: DType::Bytes,
                                shape: Vec::new(),
                                lod: Vec::new(),
                                data: Vec::new(),
                            },
                        );
                    }
                    Err(Error::Io { .. }) => {
                        assert!(fired.load(Ordering::SeqCst), "I/O error without a fault");
                        poisoned = true;
                    }
                    Err(e) => {
                        assert!(!expect_ok, "add_bytes rejected a valid value: {e}");
                        if !poisoned && !name.is_empty() {
                            assert!(
                                matches!(e, Error::DuplicateName { .. })
                                    || (nul_refused && matches!(e, Error::InvalidArgument(_))),
                                "{e}"
                            );
                        }
                    }
                }
                continue;
            }
        };
        let name = desc.name.bytes();
        let dtype = DType::ALL[usize::from(desc.dtype) % DType::ALL.len()];
        let shape = dims_of(&desc.dims);
        let lod: Vec<Vec<u64>> = desc
            .lod
            .iter()
            .take(34)
            .map(|l| l.iter().map(|&x| u64::from(x % 8)).collect())
            .collect();
        let valid_len = model_len(dtype, &shape, &lod);
        let nul_refused = compressed && name.first() == Some(&0);
        let name_ok = !name.is_empty() && !model.contains_key(&name) && !nul_refused;
        match op {
            Op::Add {
                len_delta, seed, ..
            } => {
                let want = valid_len.unwrap_or(3);
                // Clamped first: a huge `want` (u64::MAX / 2 elements) must not overflow.
                let len =
                    (want.min(1 << 17) as i64 + i64::from(*len_delta)).clamp(0, 1 << 16) as u64;
                if want > 1 << 16 && *len_delta == 0 {
                    continue; // too big to materialize: covered by the overflow cases
                }
                let data = fill(len as usize, *seed);
                let r = w.add(&name, Tensor::new(dtype, &shape, &data).with_lod(&lod));
                let expect_ok = !poisoned && valid_len == Some(len) && name_ok;
                match r {
                    Ok(()) => {
                        assert!(expect_ok, "add accepted what the model rejects: {op:?}");
                        nul_added |= name.first() == Some(&0);
                        compressed |= lossless
                            && !nul_added
                            && dtype != DType::Bytes
                            && data.len() >= paramdex::MIN_COMPRESSED_LEN
                            && paramdex::raw::record::lossless::encode(dtype, &data, 0).is_some();
                        model.insert(
                            name,
                            Expect {
                                bytes: None,
                                dtype,
                                shape,
                                lod,
                                data,
                            },
                        );
                    }
                    Err(Error::Io { .. }) => {
                        assert!(fired.load(Ordering::SeqCst), "I/O error without a fault");
                        poisoned = true;
                    }
                    Err(e) => {
                        assert!(!expect_ok, "add rejected a valid tensor: {e}");
                        if !poisoned && valid_len == Some(len) && !name.is_empty() {
                            assert!(
                                matches!(e, Error::DuplicateName { .. })
                                    || (nul_refused && matches!(e, Error::InvalidArgument(_))),
                                "{e}"
                            );
                        }
                    }
                }
            }
            Op::Stream {
                chunks,
                finish,
                seed,
                ..
            } => {
                let _ = is_stream;
                let expect_ok = !poisoned && valid_len.is_some() && name_ok;
                let tw = w.begin(&name, dtype, &shape, &lod);
                let mut tw = match tw {
                    Ok(tw) => {
                        assert!(expect_ok, "begin accepted what the model rejects: {op:?}");
                        nul_added |= name.first() == Some(&0);
                        tw
                    }
                    Err(Error::Io { .. }) => {
                        assert!(fired.load(Ordering::SeqCst), "I/O error without a fault");
                        poisoned = true;
                        continue;
                    }
                    Err(e) => {
                        assert!(!expect_ok, "begin rejected a valid tensor: {e}");
                        continue;
                    }
                };
                let expected = valid_len.expect("begin succeeded");
                let mut data = Vec::new();
                let mut io_failed = false;
                for &c in chunks.iter().take(16) {
                    let chunk = fill(usize::from(c % 3000), seed.wrapping_add(data.len() as u8));
                    let fits = data.len() as u64 + chunk.len() as u64 <= expected;
                    match tw.write(&chunk) {
                        Ok(n) => {
                            assert!(fits, "a write past the tensor's size was accepted");
                            assert_eq!(n, chunk.len());
                            data.extend_from_slice(&chunk);
                        }
                        Err(e) => {
                            if fits {
                                assert!(fired.load(Ordering::SeqCst), "write failed: {e}");
                                io_failed = true;
                                break;
                            }
                        }
                    }
                }
                // Complete the tensor exactly when asked and the data is short by a bit.
                if *finish && !io_failed && (expected - data.len() as u64) < 4096 {
                    let rest = fill(
                        (expected - data.len() as u64) as usize,
                        seed.wrapping_add(data.len() as u8),
                    );
                    if tw.write_all(&rest).is_err() {
                        assert!(fired.load(Ordering::SeqCst));
                        io_failed = true;
                    } else {
                        data.extend_from_slice(&rest);
                    }
                }
                if !*finish {
                    drop(tw);
                    poisoned = true;
                    continue;
                }
                let complete = data.len() as u64 == expected;
                match tw.finish() {
                    Ok(()) => {
                        assert!(complete && !io_failed);
                        model.insert(
                            name,
                            Expect {
                                bytes: None,
                                dtype,
                                shape,
                                lod,
                                data,
                            },
                        );
                    }
                    Err(e) => {
                        assert!(
                            !complete || io_failed || fired.load(Ordering::SeqCst),
                            "finishing a complete streamed tensor failed: {e}"
                        );
                        poisoned = true;
                    }
                }
                if io_failed {
                    poisoned = true;
                }
            }
            // Handled (and continued past) before the tensor description is read.
            Op::AddBytes { .. } => unreachable!("bytes values are added above"),
        }
    }
    if !input.finish {
        drop(w);
        assert_eq!(std::fs::read(&path).expect("final path"), previous);
        assert_eq!(
            std::fs::read_dir(d).expect("dir").count(),
            1,
            "temporary file left"
        );
        return;
    }
    let result = w.finish();
    let faulted = fired.load(Ordering::SeqCst);
    match result {
        Ok(stats) => {
            assert!(!poisoned && !faulted, "finish succeeded after a failure");
            assert_eq!(stats.tensors, model.len() as u64);
            let r = Reader::open(&path).expect("reopen a finished file");
            assert_eq!(r.len(), model.len() as u64);
            let listed: Vec<Vec<u8>> = r.iter().map(|t| t.expect("iter").name().to_vec()).collect();
            assert_eq!(listed, model.keys().cloned().collect::<Vec<_>>());
            for (name, e) in &model {
                if let Some(value) = &e.bytes {
                    let got = r.get_bytes(name).expect("a bytes value reads back");
                    assert_eq!(got.as_deref(), Some(value.as_slice()));
                    continue;
                }
                let t = r.tensor(name).expect("tensor in the model");
                assert_eq!(t.dtype(), e.dtype);
                assert_eq!(t.shape(), e.shape.as_slice());
                assert_eq!(t.data(), e.data.as_slice());
                assert_eq!(t.lod().expect("lod").to_vec(), e.lod);
                assert_eq!(t.data_offset() % opts.alignment, 0);
            }
            r.verify_with(paramdex::VerifyOptions {
                load: None,
                threads: 1,
                progress: None,
            })
            .expect("verify a finished file");
        }
        Err(e) => {
            assert!(
                poisoned || faulted || (input.fail_sync && input.sync),
                "finish failed without a reason: {e}"
            );
            assert_eq!(std::fs::read(&path).expect("final path"), previous);
            assert_eq!(
                std::fs::read_dir(d).expect("dir").count(),
                1,
                "temporary file left"
            );
        }
    }
}
