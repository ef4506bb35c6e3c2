//! Sharded checkpoints and slices: `merge-shards`, `clean-shards`, `demo --ranks` (with its
//! hidden per-rank child, `demo-rank`), the region of `get --slice`, and what `stat` and `recover`
//! say about the files of a sharded checkpoint and those a failed save left.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::StoreLayout;
use paramdex::{
    merge_shards, shard_files, DType, Error, MergeShardsOptions, MergeStep, PartialTensors, Reader,
    Region, Result, SaveId, Saved, ShardFile, ShardFileKind, ShardProblem, ShardWriter, Tensor,
    WriterOptions,
};
use serde_json::{json, Map, Value};

use super::{human_bytes, os_bytes, stdout_err, Ui};

/// `println!` that reports a failed write (a closed pipe) as an error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        writeln!(std::io::stdout(), $($arg)*).map_err(stdout_err)?
    }};
}

/// `paramdex merge-shards PREFIX` (a path, or `s3://bucket/dir/PREFIX`).
pub fn merge(
    ui: Ui,
    prefix: &Path,
    partial: &[OsString],
    all_partial: bool,
    save: Option<&str>,
) -> Result<ExitCode> {
    let save_id = save
        .map(|s| {
            SaveId::from_hex(s).ok_or_else(|| {
                Error::InvalidArgument(format!("--save: {s:?} is not a save id (32 hex digits)"))
            })
        })
        .transpose()?;
    let partial = if all_partial {
        PartialTensors::All
    } else if partial.is_empty() {
        PartialTensors::None
    } else {
        PartialTensors::Named(partial.iter().map(os_bytes).collect())
    };
    let start = Instant::now();
    let opts = MergeShardsOptions {
        save_id,
        partial,
        ..MergeShardsOptions::default()
    };
    // A prefix in a bucket (s3://bucket/dir/PREFIX) too: the library reads the shards' footers
    // and indexes by ranged GETs and writes the index last (SPEC.md 12.6).
    let rep = merge_shards(prefix, &opts)?;
    let n = rep.data_paths.len();
    ui.say(format!(
        "committed {} ({n} data files of save {}): {} tensors, {} slices{}{}; read {} of the \
         shards' {} (their indexes), wrote a {} index in {:.1?}",
        rep.index_path.display(),
        rep.save_id,
        rep.tensors,
        rep.slices,
        if rep.partial > 0 {
            format!(", {} partial tensors", rep.partial)
        } else {
            String::new()
        },
        if rep.reused_tensors > 0 {
            format!(
                ", {} tensors ({}) reused from {} earlier data files",
                rep.reused_tensors,
                human_bytes(rep.reused_bytes),
                rep.reused_files
            )
        } else {
            String::new()
        },
        human_bytes(rep.bytes_read),
        human_bytes(rep.shard_bytes),
        human_bytes(rep.index_len),
        start.elapsed()
    ))?;
    for p in &rep.removed {
        ui.note(format!(
            "removed {}, a data file of the previous checkpoint",
            p.display()
        ));
    }
    for p in &rep.ignored {
        ui.note(format!(
            "left {}: a pending shard of another save",
            p.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn kind_name(k: ShardFileKind) -> &'static str {
    match k {
        ShardFileKind::Committed => "data file",
        ShardFileKind::Pending => "pending shard",
        ShardFileKind::Orphan => "orphan shard",
        ShardFileKind::Temporary => "temporary file",
        _ => "file",
    }
}

/// What a file that [`shard_files`] lists is, in words.
fn what_file(f: &ShardFile) -> &'static str {
    let name = f
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if f.kind == ShardFileKind::Pending && name.contains(".refs-") {
        "references file of a pending shard"
    } else if f.kind == ShardFileKind::Pending && name.contains(".reused-") {
        "earlier data file linked by a pending save"
    } else {
        kind_name(f.kind)
    }
}

fn describe_file(f: &ShardFile) -> String {
    let who = f
        .shard
        .map(|s| {
            format!(
                ", shard {} of {} of save {}",
                s.shard_id, s.num_shards, s.save_id
            )
        })
        .unwrap_or_default();
    format!(
        "{} ({}, {}{who})",
        f.path.display(),
        what_file(f),
        human_bytes(f.len)
    )
}

/// `paramdex clean-shards PREFIX` (a path, or `s3://bucket/dir/PREFIX`).
pub fn clean(ui: Ui, prefix: &Path, dry_run: bool) -> Result<ExitCode> {
    let files = if dry_run {
        left_behind(shard_files(prefix)?)
    } else {
        paramdex::clean_shards(prefix)?
    };
    let verb = if dry_run { "would remove" } else { "removed" };
    for f in &files {
        ui.say(format!("{verb} {}", describe_file(f)))?;
    }
    ui.say(format!(
        "{verb} {} files left at {} by saves that did not finish",
        files.len(),
        prefix.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// The files of `files` that are not the committed checkpoint's.
fn left_behind(files: Vec<ShardFile>) -> Vec<ShardFile> {
    files
        .into_iter()
        .filter(|f| f.kind != ShardFileKind::Committed)
        .collect()
}

/// What `stat` adds for a sharded checkpoint (its data files, from the library's layout, the
/// same from a path and a URL) and the files failed saves left at its prefix.
pub fn stat_fields(layout: &StoreLayout, o: &mut Map<String, Value>) -> Result<()> {
    let Some(prefix) = &layout.checkpoint_prefix else {
        return Ok(());
    };
    let mut data = Vec::new();
    let mut total = 0u64;
    for f in &layout.data_files {
        let s = &f.shard;
        total += s.file_len;
        data.push(json!({
            "path": f.location,
            "bytes": s.file_len,
            "save_id": s.shard.save_id.to_string(),
            "shard": s.shard.shard_id,
            "of": s.shard.num_shards,
            "reused": s.reused,
        }));
    }
    o.insert("data_files".into(), Value::Array(data));
    o.insert("data_files_bytes".into(), json!(total));
    let left: Vec<Value> = shard_files(prefix)?
        .iter()
        .filter(|f| f.kind != ShardFileKind::Committed)
        .map(|f| {
            json!({
                "path": f.path.display().to_string(),
                "kind": what_file(f),
                "bytes": f.len,
            })
        })
        .collect();
    o.insert("leftovers".into(), Value::Array(left));
    Ok(())
}

/// The text rows `stat` prints for the fields of [`stat_fields`].
pub fn stat_rows(o: &Map<String, Value>, rows: &mut Vec<(String, String)>) {
    if let Some(files) = o.get("data_files").and_then(Value::as_array) {
        for f in files {
            rows.push((
                "  data file".into(),
                format!(
                    "{} ({}{})",
                    f["path"].as_str().unwrap_or(""),
                    human_bytes(f["bytes"].as_u64().unwrap_or(0)),
                    if f["reused"].as_bool() == Some(true) {
                        format!(", reused from save {}", f["save_id"].as_str().unwrap_or(""))
                    } else {
                        String::new()
                    }
                ),
            ));
        }
    }
    if let Some(left) = o.get("leftovers").and_then(Value::as_array) {
        for f in left {
            rows.push((
                "  left over".into(),
                format!(
                    "{} ({}, {}; `paramdex clean-shards` removes it)",
                    f["path"].as_str().unwrap_or(""),
                    f["kind"].as_str().unwrap_or(""),
                    human_bytes(f["bytes"].as_u64().unwrap_or(0))
                ),
            ));
        }
    }
}

/// When `path` names no checkpoint but a save left files at that prefix: the error that
/// explains them (after listing them on standard output, unless quiet).
pub fn explain_leftovers(ui: Ui, path: &Path) -> Option<Error> {
    if path.exists() || paramdex::interop::tf::index_path(path).exists() {
        return None;
    }
    let files = shard_files(path).ok()?;
    if files.is_empty() {
        return None;
    }
    for f in &files {
        ui.say(format!("left over: {}", describe_file(f))).ok()?;
    }
    let pending = files
        .iter()
        .filter(|f| matches!(f.kind, ShardFileKind::Pending | ShardFileKind::Orphan))
        .count();
    Some(Error::Shard {
        path: path.display().to_string(),
        problem: ShardProblem::Leftover,
        detail: format!(
            "no checkpoint (no {}), but {} files left by a save that did not finish ({pending} \
             shards): `paramdex merge-shards {}` commits the save if all its shards are there, \
             `paramdex clean-shards {}` removes them",
            paramdex::interop::tf::index_path(path).display(),
            files.len(),
            path.display(),
            path.display()
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// demo --ranks

/// Hidden size, vocabulary, MLP width and layers of the demo model.
const HIDDEN: u64 = 256;
const VOCAB: u64 = 3000;
const MLP: u64 = 688;
const LAYERS: u64 = 4;

/// A tensor of the demo model and how ranks hold it: `split` is the dimension it is cut along
/// (`None`: whole, held by rank 0).
struct Planned {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    split: Option<usize>,
}

fn model() -> Vec<Planned> {
    let p = |name: String, dtype, shape: &[u64], split| Planned {
        name,
        dtype,
        shape: shape.to_vec(),
        split,
    };
    let mut v = vec![
        // Vocabulary-parallel embedding: rows split across ranks.
        p(
            "model.embed_tokens.weight".into(),
            DType::BFloat16,
            &[VOCAB, HIDDEN],
            Some(0),
        ),
        p("model.norm.weight".into(), DType::Float32, &[HIDDEN], None),
    ];
    for l in 0..LAYERS {
        let at = |s: &str| format!("model.layers.{l}.{s}");
        for q in ["q_proj", "k_proj", "v_proj"] {
            // Column-parallel: output features split.
            v.push(p(
                at(&format!("self_attn.{q}.weight")),
                DType::Float32,
                &[HIDDEN, HIDDEN],
                Some(0),
            ));
        }
        // Row-parallel: input features split.
        v.push(p(
            at("self_attn.o_proj.weight"),
            DType::Float32,
            &[HIDDEN, HIDDEN],
            Some(1),
        ));
        // bfloat16, not float16: TensorFlow assembles slices of bfloat16 but not of float16.
        v.push(p(
            at("mlp.up_proj.weight"),
            DType::BFloat16,
            &[MLP, HIDDEN],
            Some(0),
        ));
        v.push(p(
            at("mlp.down_proj.weight"),
            DType::BFloat16,
            &[HIDDEN, MLP],
            Some(1),
        ));
        v.push(p(
            at("input_layernorm.weight"),
            DType::Float32,
            &[HIDDEN],
            None,
        ));
    }
    v
}

/// The part of dimension `dim` that rank `k` of `ranks` holds: (start, length).
fn share(dim: u64, k: u64, ranks: u64) -> (u64, u64) {
    let start = dim * k / ranks;
    (start, dim * (k + 1) / ranks - start)
}

/// The region rank `k` of `ranks` holds of `t` (`None` if it holds nothing of it).
fn region_of(t: &Planned, k: u32, ranks: u32) -> Option<Region> {
    match t.split {
        None => (k == 0).then(|| Region::full(&t.shape)),
        Some(d) => {
            let mut r = Region::full(&t.shape);
            let (s, l) = share(t.shape[d], u64::from(k), u64::from(ranks));
            r.start[d] = s;
            r.len[d] = l;
            (l > 0).then_some(r)
        }
    }
}

/// Appends the bytes of element `i` of tensor `name`: a function of both, so every process
/// computes the same values. `seed` is [`seed_of`] the name.
fn push_element(out: &mut Vec<u8>, seed: u64, dtype: DType, i: u64) {
    let mut x = (i ^ seed).wrapping_mul(0x2545_f491_4f6c_dd1d);
    x ^= x >> 29;
    let v = ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
    match dtype {
        DType::BFloat16 => out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
}

fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0x9e37_79b9u64, |a, b| {
        a.wrapping_mul(31).wrapping_add(u64::from(b))
    })
}

/// Whether training step `step` changed tensor `name` (the demo's second save trains only the
/// last layer and the final norm; the rest is frozen).
fn trained(name: &str, step: u32) -> bool {
    step >= 2
        && (name.starts_with(&format!("model.layers.{}.", LAYERS - 1))
            || name == "model.norm.weight")
}

/// The row-major bytes of `region` of tensor `t` (rank 1 or 2) at step 1.
fn region_bytes(t: &Planned, region: &Region) -> Vec<u8> {
    region_bytes_at(t, region, 1)
}

/// The row-major bytes of `region` of tensor `t` (rank 1 or 2) after training step `step`.
fn region_bytes_at(t: &Planned, region: &Region, step: u32) -> Vec<u8> {
    let seed = seed_of(&t.name)
        ^ if trained(&t.name, step) {
            u64::from(step) << 32
        } else {
            0
        };
    let mut out = Vec::with_capacity(region.numel().unwrap_or(0) as usize * t.dtype.size());
    let (rows, cols, width) = match t.shape.len() {
        1 => (0..1, region.start[0]..region.start[0] + region.len[0], 0),
        _ => (
            region.start[0]..region.start[0] + region.len[0],
            region.start[1]..region.start[1] + region.len[1],
            t.shape[1],
        ),
    };
    for r in rows {
        for c in cols.clone() {
            push_element(&mut out, seed, t.dtype, r * width + c);
        }
    }
    out
}

/// `paramdex demo-rank` (hidden): rank `rank` of a `demo --ranks` save writes its shard of
/// training step `step`; with `base`, incrementally (what is unchanged since `base` is reused).
pub fn demo_rank(
    prefix: &Path,
    rank: u32,
    ranks: u32,
    save: &str,
    base: Option<&Path>,
    step: u32,
) -> Result<ExitCode> {
    let save_id = SaveId::from_hex(save)
        .ok_or_else(|| Error::InvalidArgument(format!("{save:?} is not a save id")))?;
    let t0 = Instant::now();
    let mut w = ShardWriter::create(prefix, rank, ranks, save_id, WriterOptions::default())?;
    if let Some(b) = base {
        w = w.with_base(std::sync::Arc::new(Reader::open(b)?))?;
    }
    let (mut whole, mut slices, mut bytes) = (0u64, 0u64, 0u64);
    for t in model() {
        let Some(r) = region_of(&t, rank, ranks) else {
            continue;
        };
        let data = region_bytes_at(&t, &r, step);
        let saved = if r.is_full(&t.shape) {
            whole += 1;
            w.add_or_reuse(&t.name, Tensor::new(t.dtype, &t.shape, &data))?
        } else {
            slices += 1;
            w.add_slice_or_reuse(&t.name, t.dtype, &t.shape, &r, &data)?
        };
        if saved == Saved::Written {
            bytes += data.len() as u64;
        }
    }
    w.insert_metadata("ranks", i64::from(ranks))?;
    w.insert_metadata("step", i64::from(step))?;
    let path = w.pending_path().to_path_buf();
    let reused = w.reused();
    w.finish()?;
    let reused = if reused.tensors > 0 {
        format!(
            "; reused {} unchanged ({}) from {} data file{} of the base",
            reused.tensors,
            human_bytes(reused.bytes),
            reused.files,
            if reused.files == 1 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    out!(
        "  rank {rank} (pid {}): {} ({whole} whole tensors, {slices} slices): wrote {}{reused} \
         in {:.1?}",
        std::process::id(),
        path.display(),
        human_bytes(bytes),
        t0.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `ranks` `demo-rank` processes saving step `step` at `prefix` (against `base`), and
/// prints what they say.
fn run_ranks(prefix: &Path, ranks: u32, step: u32, base: Option<&Path>) -> Result<SaveId> {
    let save = SaveId::random();
    let exe = std::env::current_exe().map_err(|e| Error::io("finding the paramdex binary", e))?;
    let children: Vec<_> = (0..ranks)
        .map(|k| {
            let mut c = std::process::Command::new(&exe);
            c.arg("demo-rank")
                .arg(prefix)
                .args(["--rank", &k.to_string(), "--ranks", &ranks.to_string()])
                .args(["--save", &save.to_string(), "--step", &step.to_string()]);
            if let Some(b) = base {
                c.arg("--base").arg(b);
            }
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| Error::io(format!("starting rank {k} ({})", exe.display()), e))
        })
        .collect::<Result<_>>()?;
    for (k, c) in children.into_iter().enumerate() {
        let o = c
            .wait_with_output()
            .map_err(|e| Error::io(format!("waiting for rank {k}"), e))?;
        let text = String::from_utf8_lossy(&o.stdout);
        write!(std::io::stdout(), "{text}").map_err(stdout_err)?;
        if !o.status.success() {
            return Err(Error::InvalidArgument(format!(
                "rank {k} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
    }
    Ok(save)
}

/// The demo's second save: training step 2 changed the last layer and the final norm; the
/// ranks save `demo_ckpt_step2` against `base`, reusing every unchanged tensor and slice. Then
/// the base is removed, and the new checkpoint verified and read. Returns its prefix.
fn incremental_step(dir: &Path, base: &Path, ranks: u32, base_bytes: u64) -> Result<PathBuf> {
    let prefix = dir.join("demo_ckpt_step2");
    out!(
        "step 2 trained the last layer and the final norm, the rest is frozen: {ranks} \
         processes save {} incrementally (unchanged tensors and slices are compared with {}'s \
         and reused, not written)",
        prefix.display(),
        base.display()
    );
    let t0 = Instant::now();
    run_ranks(&prefix, ranks, 2, Some(base))?;
    let rep = merge_shards(&prefix, &MergeShardsOptions::default())?;
    out!(
        "  committed in {:.1?}: {} of its tensors and slices ({}) are step 1's, in {} of its {} \
         data files (brought in whole: hard links in a directory, server-side copies in a \
         bucket); the shards wrote {}, {:.0} % of step 1's {}",
        t0.elapsed(),
        rep.reused_tensors,
        human_bytes(rep.reused_bytes),
        rep.reused_files,
        rep.data_paths.len(),
        human_bytes(rep.shard_bytes),
        100.0 * rep.shard_bytes as f64 / base_bytes.max(1) as f64,
        human_bytes(base_bytes)
    );
    let mut removed = 0;
    let stem = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for e in
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
    {
        let e = e.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{stem}.")) {
            std::fs::remove_file(e.path())
                .map_err(|err| Error::io(format!("removing {}", e.path().display()), err))?;
            removed += 1;
        }
    }
    let r = Reader::open(&prefix)?;
    let v = r.verify()?;
    let plan = model();
    let mut ok = true;
    for name in [
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.3.mlp.up_proj.weight",
    ] {
        if let Some(t) = plan.iter().find(|t| t.name == name) {
            let all = Region::full(&t.shape);
            let got = r.get_slice(name, &all)?;
            ok &= got.is_some_and(|g| g.data() == region_bytes_at(t, &all, 2).as_slice());
        }
    }
    out!(
        "removed step 1 ({removed} files); step 2 verified without it: {} tensors, {} slices, {}; \
         a frozen and a trained tensor read back: values {}",
        v.tensors,
        v.slices,
        human_bytes(v.data_bytes),
        if ok { "match" } else { "DIFFER" }
    );
    if !ok {
        return Err(Error::InvalidArgument(
            "the demo read wrong values after the incremental save".into(),
        ));
    }
    Ok(prefix)
}

/// `paramdex demo --ranks R`: R processes save one checkpoint, which is merged, then loaded as
/// if by another number of ranks; then they save the next step incrementally.
pub fn demo(ranks: u32, dir: Option<PathBuf>) -> Result<ExitCode> {
    if ranks == 0 || ranks > 64 {
        return Err(Error::InvalidArgument(format!(
            "--ranks {ranks}: the demo runs 1 to 64 ranks"
        )));
    }
    let temp;
    let keep = dir.is_some();
    let dir = match dir {
        Some(d) => {
            std::fs::create_dir_all(&d)
                .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
            d
        }
        None => {
            temp =
                tempfile::tempdir().map_err(|e| Error::io("creating a temporary directory", e))?;
            temp.path().to_path_buf()
        }
    };
    let prefix = dir.join("demo_ckpt");
    out!(
        "saving {} with {ranks} writer processes, each writing its own shard",
        prefix.display()
    );
    let t0 = Instant::now();
    run_ranks(&prefix, ranks, 1, None)?;
    out!("  all {ranks} shards written in {:.1?}", t0.elapsed());
    out!("merging (reads only the shards' indexes):");
    let on_step = |s: MergeStep| {
        let line = match s {
            MergeStep::Checked => "shards checked against each other".to_string(),
            MergeStep::IndexWritten => "new index written and synced".to_string(),
            MergeStep::PreviousRemoved => "previous index removed".to_string(),
            MergeStep::PreviousDataRemoved => "previous data files removed".to_string(),
            MergeStep::ShardRenamed(k) => format!("shard {k} renamed to its final name"),
            MergeStep::Committed => "index renamed into place: the checkpoint exists".to_string(),
            _ => format!("{s:?}"),
        };
        let _ = writeln!(std::io::stdout(), "  {line}");
    };
    let t0 = Instant::now();
    let rep = merge_shards(
        &prefix,
        &MergeShardsOptions {
            on_step: Some(&on_step),
            ..MergeShardsOptions::default()
        },
    )?;
    out!(
        "  committed in {:.1?}: {} tensors, {} slices; read {} of {} (indexes only)",
        t0.elapsed(),
        rep.tensors,
        rep.slices,
        human_bytes(rep.bytes_read),
        human_bytes(rep.shard_bytes)
    );

    let t0 = Instant::now();
    let r = Reader::open(&prefix)?;
    out!(
        "opened {} in {:.1?}: {} tensors in {} data files (each opened when first read)",
        prefix.display(),
        t0.elapsed(),
        r.len(),
        r.header().shards.len()
    );
    // A resharded load: 3 ranks each take a third of the rows of tensors saved in column and
    // row slices by the saving ranks.
    let plan = model();
    let loads = 3u32;
    out!("loading as {loads} ranks (each reads a third of every tensor's rows):");
    for name in [
        "model.layers.0.self_attn.o_proj.weight",
        "model.embed_tokens.weight",
    ] {
        let Some(t) = plan.iter().find(|t| t.name == name) else {
            continue;
        };
        for k in 0..loads {
            let mut region = Region::full(&t.shape);
            let (s, l) = share(t.shape[0], u64::from(k), u64::from(loads));
            region.start[0] = s;
            region.len[0] = l;
            let t0 = Instant::now();
            let got = r.get_slice(name, &region)?.ok_or_else(|| Error::NotFound {
                name: name.to_string(),
                path: prefix.display().to_string(),
            })?;
            let dt = t0.elapsed();
            let ok = got.data() == region_bytes(t, &region).as_slice();
            out!(
                "  rank {k}: {name} rows {s}..{}: {} {} in {dt:.1?} ({}), values {}",
                s + l,
                human_bytes(got.data().len() as u64),
                if got.is_borrowed() {
                    "borrowed from one slice"
                } else {
                    "copied from the slices holding them"
                },
                if got.is_borrowed() {
                    "zero-copy"
                } else {
                    "one strided copy"
                },
                if ok { "match" } else { "DIFFER" }
            );
            if !ok {
                return Err(Error::InvalidArgument(format!(
                    "the demo read wrong values of {name}"
                )));
            }
        }
    }
    // A region inside one saved slice is one run of its bytes: borrowed, not copied.
    if let Some(t) = plan.iter().find(|t| t.name == "model.embed_tokens.weight") {
        let region =
            Region::new(vec![10, 0], vec![20, HIDDEN]).unwrap_or_else(|| Region::full(&t.shape));
        let got = r
            .get_slice(&t.name, &region)?
            .ok_or_else(|| Error::NotFound {
                name: t.name.clone(),
                path: prefix.display().to_string(),
            })?;
        out!(
            "  rows 10..30 of {}, inside rank 0's slice: {} ({}), values {}",
            t.name,
            human_bytes(got.data().len() as u64),
            if got.is_borrowed() {
                "zero-copy, borrowed from the mapped file"
            } else {
                "copied"
            },
            if got.data() == region_bytes(t, &region).as_slice() {
                "match"
            } else {
                "DIFFER"
            }
        );
    }
    let t0 = Instant::now();
    let v = r.verify()?;
    out!(
        "verified every data file and the index against them: {} tensors, {} slices, {} in {:.1?}: OK",
        v.tensors,
        v.slices,
        human_bytes(v.data_bytes),
        t0.elapsed()
    );
    let prefix = incremental_step(&dir, &prefix, ranks, rep.shard_bytes)?;
    if keep {
        out!(
            "try: paramdex ls {0}; paramdex stat {0}; paramdex get {0} model.embed_tokens.weight --slice 0:4,0:4",
            prefix.display()
        );
    } else {
        out!("(the temporary directory is removed on exit; pass --dir DIR to keep the checkpoint)");
    }
    Ok(ExitCode::SUCCESS)
}
