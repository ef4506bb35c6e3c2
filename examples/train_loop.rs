//! A training loop's checkpoints with `CheckpointManager`: saves in the background every few
//! steps, keeps the last 2 and the best by a metric, resumes from the latest.
//!
//! `cargo run --example train_loop -- DIR [STEPS]` (tests/interop/check_ckpt.py runs it and
//! reads DIR with TensorFlow's `tf.train.latest_checkpoint`). Tensor `w` of step S holds S.

use paramdex::interop::{BestBy, CheckpointManager, KeepPolicy, ManagerOptions};
use paramdex::{DType, MetaValue, Metadata, Tensor};

fn main() -> paramdex::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "train_loop_ckpts".into());
    let steps: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let opts = ManagerOptions {
        keep: KeepPolicy {
            last: Some(2),
            best: Some(BestBy {
                key: "loss".into(),
                count: 1,
                higher_is_better: false,
            }),
            ..Default::default()
        },
        max_in_flight: 2,
        ..Default::default()
    };
    let mut m = CheckpointManager::open(&dir, opts)?;
    // Resume after the latest checkpoint, if there is one.
    let start = match m.restore_latest() {
        Ok((step, _store)) => step + 1,
        Err(_) => 1,
    };
    for step in start..start + steps {
        let w: Vec<u8> = [step as f32; 4]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut md = Metadata::new();
        // The loss is lowest at step 1: the best-by-loss rule keeps it.
        md.insert("loss", MetaValue::Float(step as f64))?;
        let r = m.save_async(step, [("w", Tensor::new(DType::Float32, &[4], &w))], md)?;
        println!(
            "step {step}: blocked {:?}, copied {:?}",
            r.blocked, r.captured
        );
    }
    m.wait()?;
    println!("kept steps {:?}, latest {}", m.steps()?, m.latest()?.step);
    Ok(())
}
