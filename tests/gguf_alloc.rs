//! Listing a GGUF file does not decode its metadata (issue 42): a file of a 150,000-token
//! vocabulary (tokens, scores) and 300 tensors is opened and listed allocating a few hundred KB,
//! while decoding its metadata (`meta`) allocates the vocabulary's strings, many MB. Measured
//! with the counting global allocator of the fuzz checks (`fuzz/checks/alloc.rs`: every byte
//! allocated, freed or not), never a clock; this file holds a single test so that no other test
//! thread allocates while it counts.

use paramdex::interop::gguf::GgufStore;
use paramdex::interop::TensorStore;

#[path = "../fuzz/checks/alloc.rs"]
mod alloc;

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting::new();

fn allocated_by<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = COUNTING.allocated();
    let out = f();
    (out, COUNTING.allocated() - before)
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A GGUF v3 file: `vocab` tokens and their float32 scores, then `tensors` float32 [64]
/// tensors, alignment 32.
fn vocabulary_file(vocab: u64, tensors: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&tensors.to_le_bytes());
    out.extend_from_slice(&2u64.to_le_bytes());
    put_str(&mut out, b"tokenizer.ggml.tokens");
    out.extend_from_slice(&9u32.to_le_bytes());
    out.extend_from_slice(&8u32.to_le_bytes());
    out.extend_from_slice(&vocab.to_le_bytes());
    for i in 0..vocab {
        put_str(&mut out, format!("tok_{i:06}").as_bytes());
    }
    put_str(&mut out, b"tokenizer.ggml.scores");
    out.extend_from_slice(&9u32.to_le_bytes());
    out.extend_from_slice(&6u32.to_le_bytes());
    out.extend_from_slice(&vocab.to_le_bytes());
    for i in 0..vocab {
        out.extend_from_slice(&(-(i as f32)).to_le_bytes());
    }
    for i in 0..tensors {
        put_str(&mut out, format!("blk.{i}.weight").as_bytes());
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&64u64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(i * 256).to_le_bytes());
    }
    let start = out.len().next_multiple_of(32);
    out.resize(start + (tensors as usize) * 256, 0);
    out
}

#[test]
fn listing_a_150k_token_vocabulary_does_not_decode_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.gguf");
    std::fs::write(&path, vocabulary_file(150_000, 300)).unwrap();
    let (listed, used) = allocated_by(|| {
        let st = GgufStore::open(&path).unwrap();
        let n = st.list().unwrap().len();
        let keys = st.keys().count();
        (st, n, keys)
    });
    let (st, n, keys) = listed;
    assert_eq!((n, keys), (300, 2));
    eprintln!("open + list: {used} bytes allocated");
    assert!(used < 512 << 10, "open + list allocated {used} bytes");
    let (meta, decoded) = allocated_by(|| st.metadata().unwrap());
    eprintln!("metadata: {decoded} bytes allocated");
    assert_eq!(meta.len(), 3);
    // The 150k strings of the vocabulary, decoded only now.
    assert!(decoded > 8 << 20, "metadata allocated {decoded} bytes");
}
