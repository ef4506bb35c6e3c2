//! `paramdex demo`: writes a transformer-shaped checkpoint and reads it back by name.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use paramdex::{DType, Reader, Result, Tensor, Writer};

use super::human_bytes;
use super::output::count_s;

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

/// The tensors of a decoder-only transformer, layer by layer; `tiny` shrinks every shape so
/// that millions of tensors stay small.
fn plan(layers: u64, hidden: u64, inter: u64, vocab: u64, limit: Option<u64>) -> Vec<Planned> {
    let mut v = vec![
        Planned {
            name: "model.embed_tokens.weight".into(),
            dtype: DType::BFloat16,
            shape: vec![vocab, hidden],
        },
        Planned {
            name: "model.norm.weight".into(),
            dtype: DType::Float32,
            shape: vec![hidden],
        },
        Planned {
            name: "lm_head.weight".into(),
            dtype: DType::BFloat16,
            shape: vec![vocab, hidden],
        },
        Planned {
            name: "model.position_ids".into(),
            dtype: DType::Int64,
            shape: vec![1, 128],
        },
    ];
    let per_layer: [(&str, DType, [u64; 2]); 9] = [
        ("self_attn.q_proj.weight", DType::Float32, [hidden, hidden]),
        ("self_attn.k_proj.weight", DType::Float32, [hidden, hidden]),
        ("self_attn.v_proj.weight", DType::Float32, [hidden, hidden]),
        ("self_attn.o_proj.weight", DType::Float32, [hidden, hidden]),
        ("mlp.gate_proj.weight", DType::Float16, [inter, hidden]),
        ("mlp.up_proj.weight", DType::Float16, [inter, hidden]),
        ("mlp.down_proj.weight", DType::Float16, [hidden, inter]),
        ("input_layernorm.weight", DType::Float32, [hidden, 0]),
        (
            "post_attention_layernorm.weight",
            DType::Float32,
            [hidden, 0],
        ),
    ];
    let mut layer = 0;
    while limit.map_or(layer < layers, |n| (v.len() as u64) < n) {
        for (suffix, dtype, shape) in per_layer {
            let shape = if shape[1] == 0 {
                vec![shape[0]]
            } else {
                shape.to_vec()
            };
            v.push(Planned {
                name: format!("model.layers.{layer}.{suffix}"),
                dtype,
                shape,
            });
        }
        layer += 1;
    }
    if let Some(n) = limit {
        v.truncate(n.saturating_sub(1) as usize);
    }
    v
}

pub fn run(dir: Option<PathBuf>, tensors: Option<u64>) -> Result<ExitCode> {
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
    // A real-sized small model by default; tiny shapes when a tensor count is asked for.
    let planned = match tensors {
        None => plan(4, 256, 688, 1000, None),
        Some(n) => plan(0, 4, 8, 16, Some(n)),
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    out!(
        "writing {} ({} + 1 LoD tensor)",
        path.display(),
        count_s(planned.len() as u64, "tensor")
    );
    let t0 = Instant::now();
    let mut w = Writer::create(&path)?;
    let mut data_bytes = 0u64;
    for p in &planned {
        let n: u64 = p.shape.iter().product();
        let data = fill(&mut rng, p.dtype, n);
        data_bytes += data.len() as u64;
        w.add(&p.name, Tensor::new(p.dtype, &p.shape, &data))?;
    }
    // A ragged batch of 4 token sequences (lengths 3, 4, 5, 2), as Paddle stores sequences.
    let lod = vec![vec![0u64, 3, 7, 12, 14]];
    let tokens: Vec<u8> = (0..14i64).flat_map(|t| (1000 + t).to_le_bytes()).collect();
    w.add(
        "data.batch_tokens",
        Tensor::new(DType::Int64, &[14, 1], &tokens).with_lod(&lod),
    )?;
    let stats = w.finish()?;
    let write_time = t0.elapsed();
    out!(
        "  wrote {}, {} of data, {} file ({} index in {}: {} + metaindex + index) in {:.1?} ({}/s)",
        count_s(stats.tensors, "tensor"),
        human_bytes(data_bytes),
        human_bytes(stats.file_len),
        human_bytes(stats.index_len),
        // As `stat` and `verify` count them: every block of the index table has a checksum.
        count_s(stats.data_blocks + 2, "index block"),
        count_s(stats.data_blocks, "data block"),
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
    if let Some(last) = planned.last() {
        names.push(last.name.clone());
    }
    for p in planned
        .iter()
        .filter(|p| p.name.contains("down_proj"))
        .take(1)
    {
        names.push(p.name.clone());
    }
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
