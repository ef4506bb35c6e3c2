//! The restricted unpickler (`interop::pickle`) over arbitrary bytes, with each format's
//! allow-list: it must return (never panic, hang or allocate beyond the input's size: the
//! crate running the check measures what it allocates against [`alloc_bound`]), a
//! parsed value must stay inside the stream, and walking it for names must return too (a
//! self-reference or deep nesting is an error, not a stack overflow). The same bytes as a
//! Paddle dygraph pickle, as a `torch.save` zip and as a torch DCP `.metadata` must list,
//! load and verify without panicking, and `load` must find every listed tensor.
#![allow(dead_code)] // tests/fuzz_regressions.rs replays `check` without its bound

use paramdex::interop::paddle::dygraph::DygraphStore;
use paramdex::interop::pickle::{
    parse, Bytes, Value, NUMPY_GLOBALS, PADDLE_GLOBALS, TORCH_GLOBALS,
};
use paramdex::interop::torch::dcp::{DcpStore, DCP_GLOBALS};
use paramdex::interop::torch::TorchStore;
use paramdex::interop::TensorStore;

/// Most bytes the checks of one input may allocate in all (every allocation counted, freed or
/// not), per byte of the input, beyond the tensor bytes that loads return ([`check`]'s
/// result). The input is parsed seven times (four allow-lists, three readers), and each parse
/// may hold per byte: a stack item (24 bytes), a container (about 80 with its offset and
/// depth), a memo entry (about 40), four container items (96), each doubled by `Vec` growth;
/// each walk of it may make eight leaves (48 bytes each, doubled) and 64 bytes of names per
/// byte; the readers 64 bytes of records per byte. That is at most about 2 KiB per parse and
/// walk: 16 KiB over all seven. A reader that expands shared values (a copy per path to
/// them) allocates thousands of times more on a few hundred bytes of `DUP`s, and fails here.
pub const ALLOC_PER_BYTE: u64 = 16 << 10;
/// What the checks may allocate on any input however short: the walks' and readers' floors
/// (64 KiB of names, 1 MiB of records, each), a zip's by-name map, messages.
pub const ALLOC_FLOOR: u64 = 16 << 20;

/// The most bytes [`check`] may allocate on an input of `len` bytes whose loads returned
/// `loaded` bytes of tensors.
pub fn alloc_bound(len: usize, loaded: u64) -> u64 {
    ALLOC_PER_BYTE * len as u64 + ALLOC_FLOOR + loaded
}

/// Loads every tensor `store` lists; returns the bytes of tensor data the loads returned
/// (what a gathered view allocates is its size, up to the reader's own limit on views that
/// repeat their storage).
fn exercise(store: &dyn TensorStore) -> u64 {
    let _ = store.verify(1);
    let Ok(items) = store.scan(b"") else {
        return 0;
    };
    let mut loaded = 0u64;
    for t in items.flatten() {
        let loaded_one = store.load(&t.name);
        if let Ok(l) = loaded_one {
            let l = l.expect("a listed tensor loads");
            assert_eq!(
                l.data.raw_bytes().len() as u64,
                t.nbytes,
                "nbytes of a load"
            );
            loaded += t.nbytes;
        }
    }
    loaded
}

/// Runs the checks on one input (the body of the fuzz target); returns the bytes of tensor
/// data its loads returned, which [`alloc_bound`] allows beyond the input's size.
pub fn check(data: &[u8]) -> u64 {
    let mut loaded = 0;
    for allowed in [TORCH_GLOBALS, NUMPY_GLOBALS, PADDLE_GLOBALS, DCP_GLOBALS] {
        let Ok(p) = parse(data, "<fuzz>", allowed) else {
            continue;
        };
        assert!(p.end() <= data.len(), "STOP past the end of the input");
        if let Ok(leaves) = p.named_leaves("<fuzz>") {
            for (_, v) in &leaves {
                if let Value::Bytes(b @ Bytes::Span(_)) = v {
                    assert!(
                        p.bytes(b, data).is_some(),
                        "a bytes value outside the input"
                    );
                }
            }
        }
    }
    if let Ok(store) = DygraphStore::from_bytes(data.to_vec()) {
        loaded += exercise(&store);
    }
    if let Ok(Some(store)) = TorchStore::from_bytes(data.to_vec()) {
        loaded += exercise(&store);
    }
    if let Ok(store) = DcpStore::from_metadata_bytes(data) {
        loaded += exercise(&store);
    }
    loaded
}

/// [`check`], with what it allocated (read from `allocated`, the running count of the
/// crate's global allocator, while no other thread allocates) checked against
/// [`alloc_bound`].
pub fn check_bounded(data: &[u8], allocated: &dyn Fn() -> u64) {
    let before = allocated();
    let loaded = check(data);
    let used = allocated() - before;
    let bound = alloc_bound(data.len(), loaded);
    assert!(
        used <= bound,
        "the checks allocated {used} bytes on a {}-byte input (at most {ALLOC_PER_BYTE} per \
         byte + {ALLOC_FLOOR} + {loaded} bytes of tensors loaded = {bound})",
        data.len()
    );
}
