//! Helpers of the `interop::CheckpointManager` tests (`checkpoint_manager.rs` and
//! `checkpoint_manager_garage.rs`).

use paramdex::interop::{BestBy, CheckpointManager, KeepPolicy};
use paramdex::{DType, MetaValue, Metadata, Tensor};

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

/// Saves steps 1 to 3 of a model of three float32 tensors: `a` (1000 ones) and `b` (10 twos),
/// the same each step (an incremental save reuses them), and `c` (10 times the step). Returns
/// the bytes of `a`.
pub fn save_three_steps(m: &mut CheckpointManager, acc: f64) -> Vec<u8> {
    let a = super::f32_bytes(&[1.0; 1000]);
    let b = super::f32_bytes(&[2.0; 10]);
    for step in [1, 2, 3] {
        let c = super::f32_bytes(&[step as f32; 10]);
        m.save(
            step,
            [
                ("a", Tensor::new(DType::Float32, &[1000], &a)),
                ("b", Tensor::new(DType::Float32, &[10], &b)),
                ("c", Tensor::new(DType::Float32, &[10], &c)),
            ],
            meta(step, acc),
        )
        .unwrap();
    }
    a
}
