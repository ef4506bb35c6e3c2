//! `convert` and `export-tf`.

use std::path::Path;
use std::process::ExitCode;

use paramdex::{open_any, Compression, Result, WriterOptions};

use super::{human_bytes, CompressArg, Target};

pub struct ConvertArgs<'a> {
    pub src: &'a Path,
    pub dst: &'a Path,
    pub to: Target,
    pub align: u64,
    pub compress: CompressArg,
    pub block_size: usize,
}

pub fn convert(a: ConvertArgs<'_>) -> Result<ExitCode> {
    let store = open_any(a.src)?;
    let opts = WriterOptions {
        alignment: a.align,
        block_size: a.block_size,
        compression: match a.compress {
            CompressArg::None => Compression::None,
            CompressArg::Snappy => Compression::Snappy,
        },
        ..WriterOptions::default()
    };
    let start = std::time::Instant::now();
    match a.to {
        Target::Paramdex => {
            let stats = paramdex::convert::to_native(store.as_ref(), a.dst, opts, &mut |_, _| {})?;
            println!(
                "wrote {} ({} tensors, {}) from {} in {:.1?}",
                a.dst.display(),
                stats.tensors,
                human_bytes(stats.file_len),
                store.format().name(),
                start.elapsed()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
