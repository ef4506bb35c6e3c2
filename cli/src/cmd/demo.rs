//! `paramdex demo`: writes a transformer-shaped checkpoint and reads it back by name.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use paramdex::{DType, Reader, Result, Tensor, Writer};

use super::output::count_s;
use super::{human_bytes, Ui};

/// `println!` that reports a failed write (a closed pipe) as an error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*).map_err(super::stdout_err)?
    }};
}

/// A small deterministic generator (xorshift64*), so the demo needs no dependency and its
/// output is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A float in [-0.05, 0.05), like an initialised weight.
    fn weight(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1
    }
}

/// Element bytes for `n` values of `dtype`.
fn fill(rng: &mut Rng, dtype: DType, n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity((n as usize).saturating_mul(dtype.size()));
    for i in 0..n {
        match dtype {
            DType::Float32 => out.extend_from_slice(&rng.weight().to_le_bytes()),
            DType::Float16 => {
                out.extend_from_slice(&half::f16::from_f32(rng.weight()).to_le_bytes())
            }
            DType::BFloat16 => {
                out.extend_from_slice(&half::bf16::from_f32(rng.weight()).to_le_bytes())
            }
            DType::Int64 => out.extend_from_slice(&(i as i64).to_le_bytes()),
            _ => out.extend(std::iter::repeat_n(0u8, dtype.size())),
        }
    }
    out
}

/// One planned tensor.
struct Planned {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
}

/// The most tensors `demo --tensors` writes: about 2.3 GiB of file (see [`BYTES_PER_TENSOR`]),
/// more than the largest checkpoints it stands in for (3 million tensors in BENCHMARKS.md).
pub const MAX_TENSORS: u64 = 10_000_000;

/// File bytes per tiny tensor of `demo --tensors` (record, alignment padding and index entry;
/// 228 measured at 300,000 tensors, names grow with the layer number), for the size estimate
/// checked against the limit and the free disk space before anything is written.
pub const BYTES_PER_TENSOR: u64 = 240;

/// `--tensors N`: 1 to [`MAX_TENSORS`]; the message says why a value is refused.
pub fn parse_tensors(s: &str) -> std::result::Result<u64, String> {
    let n: u64 = s
        .parse()
        .map_err(|e| format!("{e} (a whole number from 1 to {MAX_TENSORS} is expected)"))?;
    if n == 0 {
        return Err(format!(
            "the demo writes at least 1 tensor (its LoD tensor); give 1 to {MAX_TENSORS}"
        ));
    }
    if n > MAX_TENSORS {
        return Err(format!(
            "at most {MAX_TENSORS} tensors: each takes about {BYTES_PER_TENSOR} bytes of file, so \
             {n} would need about {}",
            human_bytes(n.saturating_mul(BYTES_PER_TENSOR))
        ));
    }
    Ok(n)
}

/// The shapes of the demo model: a real-sized small model by default, tiny shapes when a
/// tensor count is asked for (so that millions of tensors stay small).
#[derive(Clone, Copy)]
struct Dims {
    hidden: u64,
    inter: u64,
    vocab: u64,
}

/// Tensor `i` of a decoder-only transformer, layer by layer: 4 model-wide tensors, then 9 per
/// layer. Computed from `i` alone, so that a plan of millions of tensors is never held.
fn planned(i: u64, d: Dims) -> Planned {
    let Dims {
        hidden,
        inter,
        vocab,
    } = d;
    let p = |name: &str, dtype, shape: &[u64]| Planned {
        name: name.to_string(),
        dtype,
        shape: shape.to_vec(),
    };
    match i {
        0 => p(
            "model.embed_tokens.weight",
            DType::BFloat16,
            &[vocab, hidden],
        ),
        1 => p("model.norm.weight", DType::Float32, &[hidden]),
        2 => p("lm_head.weight", DType::BFloat16, &[vocab, hidden]),
        3 => p("model.position_ids", DType::Int64, &[1, 128]),
        _ => {
            let (layer, j) = ((i - 4) / 9, (i - 4) % 9);
            let (suffix, dtype, shape): (&str, DType, &[u64]) = match j {
                0 => ("self_attn.q_proj.weight", DType::Float32, &[hidden, hidden]),
                1 => ("self_attn.k_proj.weight", DType::Float32, &[hidden, hidden]),
                2 => ("self_attn.v_proj.weight", DType::Float32, &[hidden, hidden]),
                3 => ("self_attn.o_proj.weight", DType::Float32, &[hidden, hidden]),
                4 => ("mlp.gate_proj.weight", DType::Float16, &[inter, hidden]),
                5 => ("mlp.up_proj.weight", DType::Float16, &[inter, hidden]),
                6 => ("mlp.down_proj.weight", DType::Float16, &[hidden, inter]),
                7 => ("input_layernorm.weight", DType::Float32, &[hidden]),
                _ => ("post_attention_layernorm.weight", DType::Float32, &[hidden]),
            };
            p(&format!("model.layers.{layer}.{suffix}"), dtype, shape)
        }
    }
}

/// Fails when the directory holding `path` has less free space than `need` bytes (where the
/// free space can be known).
fn check_free_space(path: &std::path::Path, need: u64) -> Result<()> {
    #[cfg(unix)]
    {
        let dir = path.parent().unwrap_or(path);
        if let Ok(st) = rustix::fs::statvfs(dir) {
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if free < need {
                return Err(paramdex::Error::InvalidArgument(format!(
                    "the demo file would take about {}, but {} has only {} free",
                    human_bytes(need),
                    dir.display(),
                    human_bytes(free)
                )));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (path, need);
    Ok(())
}

pub fn run(ui: Ui, dir: Option<PathBuf>, tensors: Option<u64>) -> Result<ExitCode> {
    // A real-sized small model by default (4 layers); N − 1 tiny tensors plus the LoD tensor
    // when a count is asked for (1 ≤ N ≤ MAX_TENSORS, checked by `parse_tensors`).
    let (count, dims) = match tensors {
        None => (
            4 + 4 * 9,
            Dims {
                hidden: 256,
                inter: 688,
                vocab: 1000,
            },
        ),
        Some(n) => (
            n.clamp(1, MAX_TENSORS) - 1,
            Dims {
                hidden: 4,
                inter: 8,
                vocab: 16,
            },
        ),
    };
    let temp;
    let keep = dir.is_some();
    let dir = match dir {
        // Created (with missing parents) by the writer, as every output's directory is.
        Some(d) => d,
        None => {
            temp = tempfile::tempdir()
                .map_err(|e| paramdex::Error::io("creating a temporary directory", e))?;
            temp.path().to_path_buf()
        }
    };
    let path = dir.join("demo.pdx");
    if tensors.is_some() {
        check_free_space(&path, (count + 1).saturating_mul(BYTES_PER_TENSOR))?;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    out!(
        "writing {} ({} + 1 LoD tensor)",
        path.display(),
        count_s(count, "tensor")
    );
    let t0 = Instant::now();
    let mut w = Writer::create(&path)?;
    let mut data_bytes = 0u64;
    let bar = ui.count_bar(count, "writing", "tensors");
    let mut last = None;
    let mut down_proj = None;
    for i in 0..count {
        let p = planned(i, dims);
        let n: u64 = p.shape.iter().product();
        let data = fill(&mut rng, p.dtype, n);
        data_bytes += data.len() as u64;
        w.add(&p.name, Tensor::new(p.dtype, &p.shape, &data))?;
        bar.inc(1);
        if down_proj.is_none() && p.name.contains("down_proj") {
            down_proj = Some(p.name.clone());
        }
        if i + 1 == count {
            last = Some(p.name);
        }
    }
    bar.finish_and_clear();
    // A ragged batch of 4 token sequences (lengths 3, 4, 5, 2), as Paddle stores sequences.
    let lod = vec![vec![0u64, 3, 7, 12, 14]];
    let tokens: Vec<u8> = (0..14i64).flat_map(|t| (1000 + t).to_le_bytes()).collect();
    w.add(
        "data.batch_tokens",
        Tensor::new(DType::Int64, &[14, 1], &tokens).with_lod(&lod),
    )?;
    let stats = w.finish()?;
    let write_time = t0.elapsed();
    let hash_block = paramdex::WriterOptions::default().hash_index;
    out!(
        "  wrote {}, {} of data, {} file ({} index in {}: {} + {}metaindex + index) in {:.1?} ({}/s)",
        count_s(stats.tensors, "tensor"),
        human_bytes(data_bytes),
        human_bytes(stats.file_len),
        human_bytes(stats.index_len),
        // As `stat` and `verify` count them: every block of the index table has a checksum
        // (the default writer adds the hash index block, SPEC.md 4.5).
        count_s(stats.data_blocks + 2 + u64::from(hash_block), "index block"),
        count_s(stats.data_blocks, "data block"),
        if hash_block { "hash index + " } else { "" },
        write_time,
        human_bytes((data_bytes as f64 / write_time.as_secs_f64().max(1e-9)) as u64)
    );

    let t0 = Instant::now();
    let r = Reader::open(&path)?;
    out!(
        "opened in {:.1?}: {}, alignment {}",
        t0.elapsed(),
        count_s(r.len(), "tensor"),
        r.header().alignment
    );

    let mut names: Vec<String> = Vec::new();
    names.extend(last);
    names.extend(down_proj);
    names.push("model.embed_tokens.weight".into());
    names.push("data.batch_tokens".into());
    names.push("model.layers.999999.mlp.up_proj.weight".into());
    for name in &names {
        let t0 = Instant::now();
        let found = r.get(name)?;
        let dt = t0.elapsed();
        match found {
            Some(t) => {
                let first = paramdex::interop::json::to_json(t.dtype(), t.shape(), t.data(), 3).0;
                let lod = t.lod()?;
                out!(
                    "  get {name}: {} {:?}{} {} at offset {} (aligned: {}) in {:.1?}; first values {first}",
                    t.dtype(),
                    t.shape(),
                    if lod.is_empty() { String::new() } else { format!(" lod {:?}", lod.to_vec()) },
                    human_bytes(t.data().len() as u64),
                    t.data_offset(),
                    t.data_offset() % u64::from(r.header().alignment) == 0,
                    dt
                );
            }
            None => out!("  get {name}: not present ({dt:.1?})"),
        }
    }

    let t0 = Instant::now();
    let rep = r.verify()?;
    out!(
        "verified {} and {} ({} checksummed) in {:.1?}: OK",
        count_s(rep.tensors, "tensor"),
        count_s(rep.blocks, "index block"),
        human_bytes(rep.data_bytes),
        t0.elapsed()
    );
    if keep {
        out!("try: paramdex ls {}", path.display());
    } else {
        out!("(the temporary directory is removed on exit; pass --dir DIR to keep demo.pdx)");
    }
    Ok(ExitCode::SUCCESS)
}
