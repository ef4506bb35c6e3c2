//! Helpers of the `interop::CheckpointManager` tests (`checkpoint_manager.rs` and
//! `checkpoint_manager_garage.rs`).

use paramdex::interop::{BestBy, KeepPolicy};
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

/// The `n` checkpoints of the highest steps and the one of the highest `acc`.
pub fn keep_last_and_best_acc(n: usize) -> KeepPolicy {
    KeepPolicy {
        best: Some(BestBy {
            key: "acc".into(),
            count: 1,
            higher_is_better: true,
        }),
        ..keep_last(n)
    }
}
