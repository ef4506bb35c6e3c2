//! List any checkpoint paramdex reads — native, TensorFlow, Paddle, safetensors — through one
//! interface, and print its first tensor's values.
//!
//! `cargo run --example any_format -- PATH` (default: the safetensors test fixture)

use paramdex::prelude::*;

fn main() -> Result<()> {
    let path = std::env::args_os().nth(1).map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/safetensors/model.safetensors")
        },
        std::path::PathBuf::from,
    );
    let store = open_any(&path)?; // detected by content, not extension
    println!("{} is a {}", path.display(), store.format().name());
    let list = store.list()?;
    for t in &list {
        println!(
            "  {:<40} {:<10} {:?}",
            paramdex::name::display(&t.name),
            t.kind.name(),
            t.shape
        );
    }
    if let Some(first) = list.iter().find(|t| t.kind.numeric().is_some()) {
        let t = store
            .load(&first.name)?
            .expect("listed tensors can be loaded");
        if let (Kind::Numeric(d), TensorData::Bytes(b)) = (t.info.kind, &t.data) {
            let (v, _) = paramdex::interop::json::to_json(d, &t.info.shape, b, 8);
            println!("{} = {v}", paramdex::name::display(&first.name));
        }
    }
    Ok(())
}
