//! Write a checkpoint from typed slices with metadata, read tensors back by name, zero-copy.
//!
//! `cargo run --example quickstart [-- OUT.pdx]`

use paramdex::prelude::*;

fn main() -> Result<()> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("creating a temporary directory", e))?;
    let path = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("quickstart.pdx"));

    // Write: typed slices (the dtype comes from the element type), plus typed metadata.
    let mut w = Writer::create(&path)?;
    for layer in 0..3 {
        let weight: Vec<f32> = (0..16).map(|i| (layer * 16 + i) as f32 * 0.01).collect();
        w.add_values(format!("layers.{layer}.weight"), &[4, 4], &weight)?;
        w.add_values(
            format!("layers.{layer}.bias"),
            &[4],
            &[f16::from_f32(0.5); 4],
        )?;
    }
    w.add_values(
        "embed",
        &[2, 2],
        &[bf16::ONE, bf16::ZERO, bf16::NEG_ONE, bf16::MAX],
    )?;
    w.insert_metadata("step", 1200i64)?;
    w.insert_metadata("lr", 3e-4)?;
    w.insert_metadata(
        "stages",
        vec![MetaValue::from("warmup"), MetaValue::from("cosine")],
    )?;
    let stats = w.finish()?; // index, footer, fsync, atomic rename
    println!("wrote {} tensors to {}", stats.tensors, path.display());

    // Read: open touches the footer and the index block only; get is two binary searches.
    let r = Reader::open(&path)?;
    let w1 = r.tensor("layers.1.weight")?;
    let values: &[f32] = w1.as_slice()?; // a view into the mapped file
    println!("layers.1.weight {:?} first {:?}", w1.shape(), &values[..4]);
    let bias = r.tensor("layers.2.bias")?;
    let b: &[f16] = bias.as_slice()?; // borrowed from the view, which borrows the reader
    println!("layers.2.bias = {b:?}");
    for t in r.prefix("layers.0.") {
        let t = t?;
        println!("  {} {} {:?}", t.display_name(), t.dtype(), t.shape());
    }
    for (k, v) in r.header().metadata.iter() {
        println!("  meta {k} = {}", v.to_json());
    }
    let rep = r.verify()?;
    println!("verified {} tensors", rep.tensors);
    Ok(())
}
