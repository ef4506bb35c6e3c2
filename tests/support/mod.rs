//! Helpers shared by the integration tests (`mod support;` in each test file): fixture paths,
//! manifests, hex and SHA-256, and SPEC.md's golden file built byte by byte; `garage` starts a
//! real 3-node Garage cluster for the object-storage tests, `s3` has their object_store clients,
//! runtime, puts and gets, and `AWS_*` environment; `ckpt` has the checkpoint manager tests'
//! metadata and keep policies.
//!
//! Each test file is its own crate and uses only some of these, hence the `allow(dead_code)`.
#![allow(dead_code)]

pub mod ckpt;
pub mod garage;
// object_store's clients: the library's own dependency, there with its `s3` feature only.
#[cfg(feature = "s3")]
pub mod s3;
pub mod torchzip;

use std::fs;
use std::path::{Path, PathBuf};

use paramdex::raw::format::{crc32c, mask_crc};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The repository root (where Cargo.toml is).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path under `tests/data/`.
pub fn data(rel: &str) -> PathBuf {
    root().join("tests/data").join(rel)
}

/// Parses a JSON file, panicking with its path on any error.
pub fn read_json(p: &Path) -> Value {
    let text = fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of a hex string; whitespace between digits is ignored (for annotated literals).
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    assert!(
        s.len().is_multiple_of(2),
        "odd number of hex digits in {s:?}"
    );
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Lower-case hex of the SHA-256 of `b`.
pub fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// A JSON array of non-negative integers.
pub fn u64_list(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("non-negative integer"))
        .collect()
}

/// A JSON array of LoD levels, each an array of offsets.
pub fn lod_list(v: &Value) -> Vec<Vec<u64>> {
    v.as_array()
        .expect("LoD levels")
        .iter()
        .map(u64_list)
        .collect()
}

/// Little-endian bytes of `v`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A block trailer (SPEC.md 4.1): compression type 0 and the masked CRC32C of the block
/// followed by that type byte.
pub fn block_trailer(block: &[u8]) -> Vec<u8> {
    let mut t = vec![0u8];
    let mut covered = block.to_vec();
    covered.push(0);
    t.extend_from_slice(&mask_crc(crc32c(&covered)).to_le_bytes());
    t
}

/// SPEC.md's golden file, byte by byte: one float32 tensor `w` = [1, 2], alignment 64, default
/// options. Only the CRCs are computed (by the crc32c crate).
///
/// `metadata` is the header entry's field 21 exactly as encoded (tag included; empty for none).
/// The handles move with it, so the caller spells them out: `index_handle` is the data block's
/// handle in the index block, `footer_handles` the metaindex and index handles of the footer.
pub fn golden_file(metadata: &[u8], index_handle: &[u8], footer_handles: &[u8]) -> Vec<u8> {
    let mut file: Vec<u8> = Vec::new();
    // Record (SPEC.md 3.1): outer version, lod_level 0, inner version, desc_size 44.
    file.extend_from_slice(&[0, 0, 0, 0]);
    file.extend_from_slice(&[0; 8]);
    file.extend_from_slice(&[0, 0, 0, 0]);
    file.extend_from_slice(&[0x2c, 0, 0, 0]);
    // TensorDesc (SPEC.md 3.2): data_type 5, dims [2], pdx_name "w", pdx_header_crc32c (of the
    // 28 bytes before it), pdx_data_crc32c, pdx_padding 21 zeros.
    file.extend_from_slice(&[0x08, 0x05, 0x10, 0x02]);
    file.extend_from_slice(&[0xc2, 0x3e, 0x01, b'w']);
    let header_crc = mask_crc(crc32c(&file));
    file.extend_from_slice(&[0xdd, 0x3e]);
    file.extend_from_slice(&header_crc.to_le_bytes());
    file.extend_from_slice(&[0xcd, 0x3e, 0x59, 0x3c, 0xe5, 0x35]);
    file.extend_from_slice(&[0xd2, 0x3e, 0x15]);
    file.extend_from_slice(&[0; 21]);
    assert_eq!(file.len(), 64, "data starts at the alignment");
    file.extend_from_slice(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
    assert_eq!(file.len(), 72, "records_len");

    // Data block (SPEC.md 4.1, 5.1, 5.2): the header entry, then "w".
    let header_len = u8::try_from(21 + metadata.len()).expect("a short metadata field");
    let mut block = vec![0x00, 0x00, header_len];
    block.extend_from_slice(&[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]); // num_shards 1, version{producer 1}
    block.extend_from_slice(&[0x80, 0x01, 0x01]); // format_version 1
    block.extend_from_slice(&[0x88, 0x01, 0x40]); // alignment 64
    block.extend_from_slice(&[0x90, 0x01, 0x48]); // records_len 72
    block.extend_from_slice(&[0x98, 0x01, 0x01]); // tensor_count 1
    block.extend_from_slice(&[0xa0, 0x01, 0x01]); // records_sorted
    block.extend_from_slice(metadata); // field 21 (SPEC.md 5.3)
    block.extend_from_slice(&[0x00, 0x01, 20, b'w']);
    block.extend_from_slice(&[0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02]); // dtype, shape [2]
    block.extend_from_slice(&[0x20, 0x40, 0x28, 0x08]); // offset 64, size 8
    block.extend_from_slice(&[0x35, 0x59, 0x3c, 0xe5, 0x35]); // crc32c
    block.extend_from_slice(&[0x80, 0x01, 0x40]); // record_header_len 64
    block.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0]); // restarts [0], count 1
    assert_eq!(block.len(), 56 + metadata.len());
    file.extend_from_slice(&block);
    file.extend_from_slice(&block_trailer(&block));
    // Metaindex: the empty block, with TensorFlow's exact trailer.
    file.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0xc0, 0xf2, 0xa1, 0xb0]);
    // Index block: separator "x" (successor of "w") -> the data block's handle.
    let mut index = vec![0x00, 0x01, 0x02, b'x'];
    index.extend_from_slice(index_handle);
    index.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0]);
    file.extend_from_slice(&index);
    file.extend_from_slice(&block_trailer(&index));
    // Footer: metaindex and index handles, zero padding to 40, magic.
    let mut footer = footer_handles.to_vec();
    footer.resize(40, 0);
    footer.extend_from_slice(&[0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb]);
    file.extend_from_slice(&footer);
    file
}

/// xorshift64: deterministic randomness without a dependency, for the model-based tests.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True `percent` times in 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    /// A random region inside `shape` (possibly empty).
    pub fn region_in(&mut self, shape: &[u64]) -> paramdex::Region {
        let mut r = paramdex::Region::full(shape);
        for (d, &dim) in shape.iter().enumerate() {
            r.start[d] = self.below(dim + 1);
            r.len[d] = self.below(dim - r.start[d] + 1);
        }
        r
    }
}

/// Runs this test binary's test `helper` alone as a child process with `envs`, waits until it
/// prints `PDX-STARTED`, lets it run 20 ms and up to `spread_ms` more (drawn from `rng`), then
/// kills it (SIGKILL) and reaps it: a writer process killed at a random moment.
pub fn kill_child_at_random_moment(
    helper: &str,
    envs: &[(&str, &std::ffi::OsStr)],
    rng: &mut Rng,
    spread_ms: u64,
) {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", helper, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped());
    let mut c = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("PDX-STARTED") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child exited");
    }
    let pause = 20 + rng.next() % spread_ms;
    std::thread::sleep(std::time::Duration::from_millis(pause));
    c.kill().unwrap();
    c.wait().unwrap();
}

/// A directory for the source of a test of what paramdex does when a hard link is impossible
/// (it copies instead): see [`other_file_system`].
pub struct OtherFileSystem {
    /// The new directory (removed when dropped).
    pub dir: tempfile::TempDir,
    /// `Some` when no place on another file system was found: hard links from `dir` are then
    /// refused on the calling thread (`paramdex::raw::testing::refuse_hard_links_from`) while
    /// this is alive, so the same copy runs. `None`: `dir` really is on another file system.
    pub refused: Option<paramdex::raw::testing::RefuseHardLinks>,
}

impl OtherFileSystem {
    /// A new directory in the system temporary directory, hard links from which are refused
    /// on this thread while the result is alive.
    pub fn links_refused() -> OtherFileSystem {
        let dir = tempfile::tempdir().unwrap();
        let refused = Some(paramdex::raw::testing::refuse_hard_links_from(dir.path()));
        OtherFileSystem { dir, refused }
    }
}

/// A new directory on another file system than `near`'s when one of the usual places is
/// (`/dev/shm`, `$XDG_RUNTIME_DIR`, `/var/tmp`, the system temporary directory, Cargo's
/// temporary directory for tests), so that a hard link from it into `near` fails for real;
/// otherwise [`OtherFileSystem::links_refused`]. Either way the test runs its assertions;
/// stderr says which case it was.
pub fn other_file_system(near: &Path) -> OtherFileSystem {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let near_dev = fs::metadata(near)
            .unwrap_or_else(|e| panic!("{}: {e}", near.display()))
            .dev();
        let mut places = vec![PathBuf::from("/dev/shm")];
        places.extend(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from));
        places.push(PathBuf::from("/var/tmp"));
        places.push(std::env::temp_dir());
        places.push(PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
        for place in places {
            if fs::metadata(&place).is_ok_and(|m| m.is_dir() && m.dev() != near_dev) {
                if let Ok(dir) = tempfile::tempdir_in(&place) {
                    eprintln!(
                        "cross-file-system test: source in {} (another file system than {})",
                        place.display(),
                        near.display()
                    );
                    return OtherFileSystem { dir, refused: None };
                }
            }
        }
    }
    eprintln!(
        "cross-file-system test: no other file system than {}'s found; hard links from the \
         source refused on this thread instead (paramdex::raw::testing::refuse_hard_links_from)",
        near.display()
    );
    OtherFileSystem::links_refused()
}
