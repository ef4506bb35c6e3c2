//! Helpers of the `interop::CheckpointManager` tests (`checkpoint_manager.rs` and
//! `checkpoint_manager_garage.rs`).

use paramdex::interop::KeepPolicy;
use paramdex::{MetaValue, Metadata};

/// The metadata of a save: `step` (an integer) and `acc` (a float).
pub fn meta(step: u64, acc: f64) -> Metadata {
    let mut m = Metadata::new();
    m.insert("step", MetaValue::Int(step as i64)).unwrap();
    m.insert("acc", MetaValue::Float(acc)).unwrap();
    m
}

/// The policy that keeps the `n` checkpoints of the highest steps, and nothing else.
pub fn keep_last(n: usize) -> KeepPolicy {
    KeepPolicy {
        last: Some(n),
        ..Default::default()
    }
}
