//! The restricted unpickler (`interop::pickle`) over arbitrary bytes, with each format's
//! allow-list: it must return (never panic, hang or allocate beyond the input's size), a
//! parsed value must stay inside the stream, and walking it for names must return too (a
//! self-reference or deep nesting is an error, not a stack overflow).

use paramdex::interop::pickle::{parse, Bytes, Value, NUMPY_GLOBALS, TORCH_GLOBALS};

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    for allowed in [TORCH_GLOBALS, NUMPY_GLOBALS] {
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
}
