//! `stat`: what an input holds (counts and bytes by dtype) and how its bytes are laid out (the
//! library's `TensorStore::layout`), the same from a path and a URL.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use paramdex::interop::open_any;
use paramdex::Result;
use serde_json::{json, Map, Value};

use super::output::{count, count_s, write_json};
use super::style::HEAD;
use super::{human_bytes, stdout_err, Bar, Ui};

use super::ls::Unlisted;

pub fn stat(ui: Ui, file: &Path, as_json: bool) -> Result<ExitCode> {
    let store = match open_any(file) {
        Ok(s) => s,
        // A prefix where a save left files but no checkpoint: say what is there.
        Err(e) => {
            let ui = Ui {
                quiet: ui.quiet || as_json,
            };
            return Err(super::shards::explain_leftovers(ui, file).unwrap_or(e));
        }
    };
    let metadata = store.metadata()?;
    // One pass over the listing: counts and bytes by dtype, nothing kept per tensor.
    let mut by_dtype: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut n = 0u64;
    let mut data_bytes = 0u64;
    let bar = Bar::new(ui, "reading");
    let listing = if bar.visible() {
        store.scan_with_progress(&bar)?
    } else {
        store.scan(b"")?
    };
    let mut unlisted = Unlisted::default();
    for t in unlisted.filter(listing) {
        let e = by_dtype.entry(t.kind.name().to_string()).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(t.nbytes);
        n += 1;
        data_bytes = data_bytes.saturating_add(t.nbytes);
    }
    bar.finish();
    let mut o = Map::new();
    o.insert("file".into(), json!(file.display().to_string()));
    // A checkpoint directory (or DIR@STEP): which checkpoint was read.
    let resolved = paramdex::interop::resolve_checkpoint_dir(file)?.map(|index| {
        let prefix = index.with_extension("");
        let step = prefix
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(paramdex::interop::step_of);
        (prefix, step)
    });
    if let Some((prefix, step)) = &resolved {
        o.insert("checkpoint".into(), json!(prefix.display().to_string()));
        o.insert("step".into(), json!(step));
    }
    o.insert("format".into(), json!(store.format().name()));
    o.insert("tensors".into(), json!(n));
    o.insert("data_bytes".into(), json!(data_bytes));
    o.insert(
        "by_dtype".into(),
        Value::Object(
            by_dtype
                .iter()
                .map(|(d, (c, b))| (d.to_string(), json!({"tensors": c, "bytes": b})))
                .collect(),
        ),
    );
    // The layout figures the library computes for any store, from a path or a URL alike.
    let layout = store.layout()?;
    let put = |o: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    };
    put(&mut o, "file_bytes", layout.file_bytes.map(|v| json!(v)));
    put(
        &mut o,
        "format_version",
        layout.format_version.map(|v| json!(v)),
    );
    put(
        &mut o,
        "records_bytes",
        layout.records_bytes.map(|v| json!(v)),
    );
    put(&mut o, "shards", layout.shards.map(|v| json!(v)));
    if let Some(index_bytes) = layout.index_bytes {
        put(&mut o, "index_bytes", Some(json!(index_bytes)));
        put(
            &mut o,
            "index_bytes_per_tensor",
            Some(json!(index_bytes as f64 / n.max(1) as f64)),
        );
    }
    if let Some(f) = &layout.table {
        // A table's blocks, each with its own CRC32C (what `verify` counts).
        put(&mut o, "index_blocks", Some(json!(f.checksummed_blocks())));
        put(&mut o, "hash_index", Some(json!(f.hash_index)));
        put(&mut o, "index_data_blocks", Some(json!(f.data_blocks)));
        put(&mut o, "index_compression", Some(json!(f.compression())));
        put(
            &mut o,
            "compression_ratio",
            Some(json!(f.raw_bytes as f64 / f.stored_bytes.max(1) as f64)),
        );
    }
    // A native file with compressed records (SPEC.md 3.4): what its data takes stored, from
    // the index alone (no record is decoded).
    if let Some(r) = store.as_native() {
        let (mut stored, mut decoded) = (0u64, 0u64);
        for e in r.list_from(b"")? {
            stored = stored.saturating_add(e.stored_size);
            decoded = decoded.saturating_add(e.size);
        }
        if stored != decoded {
            put(&mut o, "stored_data_bytes", Some(json!(stored)));
            put(
                &mut o,
                "data_compression_ratio",
                Some(json!(decoded as f64 / stored.max(1) as f64)),
            );
        }
    }
    put(&mut o, "dead_bytes", layout.dead_bytes.map(|v| json!(v)));
    put(&mut o, "alignment", layout.alignment.map(|v| json!(v)));
    // A sharded checkpoint: its data files and what failed saves left beside them.
    super::shards::stat_fields(&layout, &mut o)?;
    put(
        &mut o,
        "records_sorted",
        layout.records_sorted.map(|v| json!(v)),
    );
    o.insert("metadata_entries".into(), json!(metadata.len()));
    let mut out = super::stdout_for(as_json);
    if as_json {
        write_json(&mut out, &Value::Object(o)).map_err(stdout_err)?;
    } else {
        let get = |k: &str| o.get(k).cloned().unwrap_or(Value::Null);
        let num = |k: &str| get(k).as_u64();
        let mut rows: Vec<(String, String)> = vec![("file".into(), file.display().to_string())];
        if let Some((prefix, step)) = &resolved {
            let step = step.map_or_else(|| "?".to_string(), |s| s.to_string());
            // `DIR`, not `DIR@STEP`: the checkpoint its state names.
            let at_step = file
                .to_str()
                .and_then(|s| s.rsplit_once('@'))
                .is_some_and(|(_, d)| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
            let latest = if at_step { "" } else { ", the latest" };
            rows.push((
                "checkpoint".into(),
                format!("{} (step {step}{latest})", prefix.display()),
            ));
        }
        rows.extend([
            (
                "format".into(),
                match num("format_version") {
                    Some(v) => format!("{} (format version {v})", store.format().name()),
                    None => store.format().name().to_string(),
                },
            ),
            ("tensors".into(), n.to_string()),
            (
                "data".into(),
                format!("{} ({data_bytes} bytes)", human_bytes(data_bytes)),
            ),
        ]);
        for (d, (c, b)) in &by_dtype {
            rows.push((
                format!("  {d}"),
                format!("{} in {}", human_bytes(*b), count_s(*c, "tensor")),
            ));
        }
        if let Some(s) = num("stored_data_bytes") {
            rows.push((
                "data stored".into(),
                format!(
                    "{} ({s} bytes; lossless compression, ratio {:.3})",
                    human_bytes(s),
                    get("data_compression_ratio").as_f64().unwrap_or(1.0)
                ),
            ));
        }
        if let Some(f) = num("file_bytes") {
            rows.push(("file size".into(), human_bytes(f)));
        }
        if let Some(r) = num("records_bytes") {
            rows.push(("records".into(), human_bytes(r)));
        }
        if let Some(i) = num("index_bytes") {
            let per = get("index_bytes_per_tensor").as_f64().unwrap_or(0.0);
            rows.push((
                "index".into(),
                format!("{} ({per:.1} bytes per tensor)", human_bytes(i)),
            ));
        }
        if let Some(b) = num("index_blocks") {
            let data = num("index_data_blocks").unwrap_or(0);
            rows.push((
                "index blocks".into(),
                format!(
                    "{b} ({}, {}the metaindex and the index block)",
                    count_s(data, "data block"),
                    if get("hash_index").as_bool() == Some(true) {
                        "the hash index block, "
                    } else {
                        ""
                    }
                ),
            ));
            rows.push((
                "compression".into(),
                format!(
                    "{} (ratio {:.2})",
                    get("index_compression").as_str().unwrap_or("none"),
                    get("compression_ratio").as_f64().unwrap_or(1.0)
                ),
            ));
        }
        if let Some(d) = num("dead_bytes") {
            let note = if d > 0 {
                " (old indexes left by `meta --set`; `convert` drops them)"
            } else {
                ""
            };
            rows.push(("dead bytes".into(), format!("{}{note}", human_bytes(d))));
        }
        if let Some(a) = num("alignment") {
            rows.push(("alignment".into(), a.to_string()));
        }
        if let Some(s) = num("shards") {
            rows.push(("shards".into(), s.to_string()));
        }
        super::shards::stat_rows(&o, &mut rows);
        if let Some(s) = get("records_sorted").as_bool() {
            rows.push((
                "records sorted".into(),
                if s { "yes" } else { "no" }.to_string(),
            ));
        }
        rows.push((
            "metadata".into(),
            count(metadata.len() as u64, "entry", Some("entries")),
        ));
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(out, "{HEAD}{k:<w$}{HEAD:#}  {v}").map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(unlisted.finish(ui, n))
}
