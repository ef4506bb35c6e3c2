//! Import a safetensors file into a native paramdex file (its `__metadata__` becomes paramdex
//! metadata), add typed metadata, and export it back to safetensors.
//!
//! `cargo run --example safetensors_roundtrip -- [IN.safetensors]`

use paramdex::interop::safetensors::SafetensorsStore;
use paramdex::interop::{export, ExportOptions, OutputFormat};
use paramdex::prelude::*;

fn main() -> Result<()> {
    let src = std::env::args_os().nth(1).map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/data/safetensors/model.safetensors")
        },
        std::path::PathBuf::from,
    );
    let dir = tempfile::tempdir().map_err(|e| Error::io("creating a temporary directory", e))?;

    // safetensors -> paramdex, metadata included.
    let st = SafetensorsStore::open(&src)?;
    let mut metadata = st.metadata()?;
    metadata.insert("converted_by", "paramdex")?;
    metadata.insert("tensors", st.list()?.len() as i64)?;
    let pdx = dir.path().join("model.pdx");
    let mut w = Writer::create(&pdx)?;
    w.set_metadata(metadata)?;
    for info in st.list()? {
        let t = st.load(&info.name)?.expect("listed");
        let (Kind::Numeric(dtype), TensorData::Bytes(data)) = (t.info.kind, &t.data) else {
            continue;
        };
        w.add(&info.name, Tensor::new(dtype, &info.shape, data))?;
    }
    w.finish()?;
    let r = Reader::open(&pdx)?;
    println!(
        "{} tensors; metadata {}",
        r.len(),
        r.header().metadata.to_json()
    );

    // paramdex -> safetensors: non-string metadata values go out as JSON text.
    let back = dir.path().join("back.safetensors");
    let rep = export(
        &r,
        OutputFormat::Safetensors,
        &back,
        &ExportOptions::default(),
    )?;
    println!("wrote {} tensors, {} bytes", rep.tensors, rep.output_bytes);
    let again = SafetensorsStore::open(&back)?;
    println!("__metadata__ back: {}", again.metadata()?.to_json());
    Ok(())
}
