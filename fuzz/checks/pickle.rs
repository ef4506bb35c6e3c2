//! The restricted unpickler (`interop::pickle`) over arbitrary bytes, with each format's
//! allow-list: it must return (never panic, hang or allocate beyond the input's size), a
//! parsed value must stay inside the stream, and walking it for names must return too (a
//! self-reference or deep nesting is an error, not a stack overflow). The same bytes as a
//! Paddle dygraph pickle, as a `torch.save` zip and as a torch DCP `.metadata` must list,
//! load and verify without panicking, and `load` must find every listed tensor.

use paramdex::interop::paddle::dygraph::DygraphStore;
use paramdex::interop::pickle::{
    parse, Bytes, Value, NUMPY_GLOBALS, PADDLE_GLOBALS, TORCH_GLOBALS,
};
use paramdex::interop::torch::dcp::{DcpStore, DCP_GLOBALS};
use paramdex::interop::torch::TorchStore;
use paramdex::interop::TensorStore;

fn exercise(store: &dyn TensorStore) {
    let _ = store.verify(1);
    let Ok(items) = store.scan(b"") else {
        return;
    };
    for t in items.flatten() {
        let loaded = store.load(&t.name);
        if let Ok(l) = loaded {
            let l = l.expect("a listed tensor loads");
            assert_eq!(
                l.data.raw_bytes().len() as u64,
                t.nbytes,
                "nbytes of a load"
            );
        }
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
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
        exercise(&store);
    }
    if let Ok(Some(store)) = TorchStore::from_bytes(data.to_vec()) {
        exercise(&store);
    }
    if let Ok(store) = DcpStore::from_metadata_bytes(data) {
        exercise(&store);
    }
}
