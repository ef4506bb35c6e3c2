//! `diff A B`.

use std::cmp::Ordering;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use indicatif::ProgressBar;
use paramdex::interop::{open_any, Kind, TensorData, TensorInfo, TensorInfos};
use paramdex::{name, Progress, Result};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::ls::shape_str;
use super::numbers::{compare_across, Tolerance};
use super::output::{count, count_s, write_json};
use super::style::{BAD, DIM, GOOD, HEAD};
use super::{stdout_err, Ui, EXIT_DIFFER};

/// A name in JSON output: itself when it is UTF-8 (JSON escapes it, once), else its escaped
/// display form (`name::display`, which `ls --json` also gives with `name_hex`).
fn json_name(n: &[u8]) -> String {
    name::as_utf8(n).map_or_else(|| name::display(n), str::to_owned)
}

/// A JSON object about tensor `n`: `name` (and `name_hex` when not UTF-8) and `fields`.
fn about(n: &[u8], fields: Value) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("name".into(), json!(json_name(n)));
    if name::as_utf8(n).is_none() {
        o.insert("name_hex".into(), json!(name::to_hex(n)));
    }
    if let Value::Object(f) = fields {
        o.extend(f);
    }
    Value::Object(o)
}

#[derive(Default)]
struct Report {
    only_a: Vec<String>,
    only_b: Vec<String>,
    dtype: Vec<Value>,
    shape: Vec<Value>,
    lod: Vec<Value>,
    values: Vec<Value>,
    metadata: Vec<Value>,
    identical: u64,
    /// Tensors whose bytes differ but whose every element is equal under the tolerance.
    within_tolerance: u64,
    /// Text lines, kept apart by kind so that they print in the order they always have (names
    /// only in A, then only in B, then the common tensors' differences in name order, then
    /// metadata) while the two listings are read side by side.
    lines_only_a: Vec<String>,
    lines_only_b: Vec<String>,
    lines: Vec<String>,
}

/// Pairs two listings sorted by name (each name once): `(Some, Some)` for a name in both,
/// else the side it is in. Holds one pending item of each side, so memory does not grow with
/// the number of tensors.
struct MergeJoin<'a> {
    a: std::iter::Peekable<TensorInfos<'a>>,
    b: std::iter::Peekable<TensorInfos<'a>>,
}

impl Iterator for MergeJoin<'_> {
    type Item = Result<(Option<TensorInfo>, Option<TensorInfo>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let order = match (self.a.peek(), self.b.peek()) {
            (None, None) => return None,
            // An error is passed on as soon as it is next on either side.
            (Some(Err(_)), _) | (Some(Ok(_)), None) => Ordering::Less,
            (_, Some(Err(_))) | (None, Some(Ok(_))) => Ordering::Greater,
            (Some(Ok(x)), Some(Ok(y))) => x.name.cmp(&y.name),
        };
        match order {
            Ordering::Less => self.a.next().map(|x| x.map(|x| (Some(x), None))),
            Ordering::Greater => self.b.next().map(|y| y.map(|y| (None, Some(y)))),
            Ordering::Equal => {
                let (x, y) = (self.a.next()?, self.b.next()?);
                Some(x.and_then(|x| Ok((Some(x), Some(y?)))))
            }
        }
    }
}

/// Records a tensor found in one input only: its name, and its report line.
fn only_in(side: &str, t: &TensorInfo, names: &mut Vec<String>, lines: &mut Vec<String>) {
    let s = name::display(&t.name);
    lines.push(format!(
        "{BAD}only in {side}:{BAD:#} {s} {DIM}({} {}){DIM:#}",
        t.kind.name(),
        shape_str(&t.shape)
    ));
    names.push(json_name(&t.name));
}

/// Steps of [`Sides`]' bar for each listing.
const SIDE_STEPS: u64 = 1000;

/// [`Sides`]' total of a listing that has not started.
const NOT_STARTED: u64 = u64::MAX;

/// One bar for the two listings `diff` reads side by side: each listing's fraction read (in its
/// own unit, tensors or index bytes) counts for half.
struct Sides {
    bar: ProgressBar,
    total: [AtomicU64; 2],
    done: [AtomicU64; 2],
}

impl Sides {
    fn update(&self) {
        let step = |i: usize| {
            let (t, d) = (self.total[i].load(Relaxed), self.done[i].load(Relaxed));
            match t {
                NOT_STARTED => 0,
                0 => SIDE_STEPS,
                t => (u128::from(d.min(t)) * u128::from(SIDE_STEPS) / u128::from(t)) as u64,
            }
        };
        self.bar.set_position(step(0) + step(1));
    }
}

/// The progress of listing `.1` (0: A, 1: B) of a [`Sides`].
struct Side<'a>(&'a Sides, usize);

impl Progress for Side<'_> {
    fn start(&self, total: u64, _unit: paramdex::Unit) {
        self.0.total[self.1].store(total, Relaxed);
        self.0.done[self.1].store(0, Relaxed);
        self.0.update();
    }
    fn advance(&self, n: u64) {
        self.0.done[self.1].fetch_add(n, Relaxed);
        self.0.update();
    }
}

pub fn diff(
    ui: Ui,
    a_path: &Path,
    b_path: &Path,
    as_json: bool,
    no_meta: bool,
    tol: Tolerance,
) -> Result<ExitCode> {
    let a = open_any(a_path)?;
    let b = open_any(b_path)?;
    let mut r = Report::default();
    let red = BAD;
    let sides = Sides {
        bar: ui.fraction_bar(2 * SIDE_STEPS, "comparing"),
        total: [AtomicU64::new(NOT_STARTED), AtomicU64::new(NOT_STARTED)],
        done: Default::default(),
    };
    let (side_a, side_b) = (Side(&sides, 0), Side(&sides, 1));
    let pairs = if sides.bar.is_hidden() {
        MergeJoin {
            a: a.scan(b"")?.peekable(),
            b: b.scan(b"")?.peekable(),
        }
    } else {
        MergeJoin {
            a: a.scan_with_progress(&side_a)?.peekable(),
            b: b.scan_with_progress(&side_b)?.peekable(),
        }
    };
    for pair in pairs {
        let (ta, tb) = match pair? {
            (Some(ta), Some(tb)) => (ta, tb),
            (Some(t), None) => {
                only_in("A", &t, &mut r.only_a, &mut r.lines_only_a);
                continue;
            }
            (None, Some(t)) => {
                only_in("B", &t, &mut r.only_b, &mut r.lines_only_b);
                continue;
            }
            (None, None) => unreachable!("the join yields at least one side"),
        };
        let n = &ta.name;
        // With a tolerance, numbers of different dtypes are compared as numbers (a bfloat16
        // export against its float32 master); without, a dtype difference is one.
        let across = matches!((&ta.kind, &tb.kind), (Kind::Numeric(x), Kind::Numeric(y)) if x != y);
        if ta.kind != tb.kind && !(across && tol.numeric()) {
            let s = name::display(n);
            let hint = if across {
                " (--atol/--rtol compare the values across dtypes)"
            } else {
                ""
            };
            r.lines.push(format!(
                "{red}dtype:{red:#} {s}: {} vs {}{hint}",
                ta.kind.name(),
                tb.kind.name()
            ));
            r.dtype
                .push(about(n, json!({"a": ta.kind.name(), "b": tb.kind.name()})));
            continue;
        }
        if ta.shape != tb.shape {
            let s = name::display(n);
            r.lines.push(format!(
                "{red}shape:{red:#} {s}: {} vs {}",
                shape_str(&ta.shape),
                shape_str(&tb.shape)
            ));
            r.shape
                .push(about(n, json!({"a": ta.shape, "b": tb.shape})));
            continue;
        }
        let lod_differs = ta.lod != tb.lod;
        if lod_differs {
            let s = name::display(n);
            r.lines.push(format!(
                "{red}lod:{red:#} {s}: {:?} vs {:?}",
                ta.lod, tb.lod
            ));
            r.lod.push(about(n, json!({"a": ta.lod, "b": tb.lod})));
        }
        let da = a.load(n)?.ok_or_else(|| missing(n, a_path))?;
        let db = b.load(n)?.ok_or_else(|| missing(n, b_path))?;
        match (&da.data, &db.data, &ta.kind, &tb.kind) {
            (TensorData::Bytes(x), TensorData::Bytes(y), Kind::Numeric(d), Kind::Numeric(e)) => {
                let (d, e) = (*d, *e);
                if d == e && x == y {
                    r.identical += u64::from(!lod_differs);
                    continue;
                }
                let c = compare_across(d, x, e, y, tol);
                if c.differing == 0 {
                    // Every element within the tolerance.
                    r.within_tolerance += u64::from(!lod_differs);
                    continue;
                }
                let s = name::display(n);
                let numel = (x.len() / d.size().max(1)) as u64;
                let mut special = Vec::new();
                if c.nan > 0 {
                    special.push(format!("{} with NaN", c.nan));
                }
                if c.inf > 0 {
                    special.push(format!("{} with an infinity", c.inf));
                }
                let special = if special.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", special.join(", "))
                };
                // Over the pairs of finite numbers: NaNs and infinities are counted above.
                let max = match c.max_abs_diff {
                    Some(m) => format!(", max |a-b| = {m:e}"),
                    None => String::new(),
                };
                let dtypes = if d == e {
                    String::new()
                } else {
                    format!(" ({} vs {})", d.name(), e.name())
                };
                r.lines.push(format!(
                    "{red}values:{red:#} {s}: {} of {numel} {}{dtypes}{special}{max}",
                    c.differing,
                    if c.differing == 1 {
                        "elements differs"
                    } else {
                        "elements differ"
                    },
                ));
                let mut v = json!({
                    "dtype": d.name(),
                    "differing_elements": c.differing,
                    "elements": numel,
                    "nan_mismatches": c.nan,
                    "inf_mismatches": c.inf,
                    "max_abs_diff": c.max_abs_diff,
                });
                if d != e {
                    v["dtype_b"] = json!(e.name());
                }
                r.values.push(about(n, v));
            }
            // Not decoded (TensorFlow variant, quantized types): byte-equal or not.
            (TensorData::Bytes(x), TensorData::Bytes(y), Kind::Opaque(_) | Kind::Foreign(_), _)
                if x == y =>
            {
                r.identical += u64::from(!lod_differs);
                continue;
            }
            // Bytes values: equal, or how many bytes differ.
            (TensorData::Bytes(x), TensorData::Bytes(y), Kind::Bytes, Kind::Bytes) => {
                if x == y {
                    r.identical += u64::from(!lod_differs);
                    continue;
                }
                let s = name::display(n);
                let count = x.iter().zip(y.iter()).filter(|(p, q)| p != q).count()
                    + x.len().abs_diff(y.len());
                r.lines.push(format!(
                    "{red}values:{red:#} {s}: bytes values differ ({count} of {} vs {} bytes)",
                    x.len(),
                    y.len()
                ));
                r.values.push(about(
                    n,
                    json!({
                        "dtype": "bytes",
                        "differing_elements": count,
                        "elements": x.len().max(y.len()),
                        "nan_mismatches": 0,
                        "inf_mismatches": 0,
                        "max_abs_diff": Value::Null,
                    }),
                ));
            }
            (TensorData::Strings(x), TensorData::Strings(y), _, _) => {
                if x == y {
                    r.identical += u64::from(!lod_differs);
                    continue;
                }
                let s = name::display(n);
                let count = x.iter().zip(y).filter(|(p, q)| p != q).count();
                r.lines.push(format!(
                    "{red}values:{red:#} {s}: {count} of {} {}",
                    x.len(),
                    if count == 1 {
                        "strings differs"
                    } else {
                        "strings differ"
                    },
                ));
                r.values.push(about(
                    n,
                    json!({
                        "dtype": "string",
                        "differing_elements": count,
                        "elements": x.len(),
                        "nan_mismatches": 0,
                        "inf_mismatches": 0,
                        "max_abs_diff": Value::Null,
                    }),
                ));
            }
            _ => {
                let s = name::display(n);
                r.lines
                    .push(format!("{red}values:{red:#} {s}: stored differently"));
                r.values.push(about(n, json!({"dtype": ta.kind.name()})));
            }
        }
    }
    sides.bar.finish_and_clear();
    if !no_meta {
        let ma = a.metadata()?;
        let mb = b.metadata()?;
        let keys: std::collections::BTreeSet<&str> =
            ma.iter().chain(mb.iter()).map(|(k, _)| k).collect();
        for k in keys {
            let (x, y) = (ma.get(k), mb.get(k));
            if x != y {
                let show = |v: Option<&paramdex::MetaValue>| {
                    v.map_or_else(|| "(absent)".to_string(), |v| v.to_json().to_string())
                };
                r.lines.push(format!(
                    "{red}metadata:{red:#} {k}: {} vs {}",
                    show(x),
                    show(y)
                ));
                r.metadata.push(json!({
                    "key": k,
                    "a": x.map(|v| v.to_json()),
                    "b": y.map(|v| v.to_json()),
                }));
            }
        }
    }
    let differ = !(r.only_a.is_empty()
        && r.only_b.is_empty()
        && r.dtype.is_empty()
        && r.shape.is_empty()
        && r.lod.is_empty()
        && r.values.is_empty()
        && r.metadata.is_empty());
    let mut out = super::stdout_for(as_json);
    if as_json {
        let o = json!({
            "equal": !differ,
            "a": a_path.display().to_string(),
            "b": b_path.display().to_string(),
            "only_in_a": r.only_a,
            "only_in_b": r.only_b,
            "dtype": r.dtype,
            "shape": r.shape,
            "lod": r.lod,
            "values": r.values,
            "metadata": r.metadata,
            "identical": r.identical,
            "within_tolerance": r.within_tolerance,
            "tolerance": if tol.numeric() {
                json!({"atol": tol.atol, "rtol": tol.rtol, "equal_nan": tol.equal_nan})
            } else {
                Value::Null
            },
        });
        write_json(&mut out, &o).map_err(stdout_err)?;
    } else if !ui.quiet {
        writeln!(
            out,
            "{HEAD}A{HEAD:#} {} ({})\n{HEAD}B{HEAD:#} {} ({})",
            a_path.display(),
            a.format().name(),
            b_path.display(),
            b.format().name()
        )
        .map_err(stdout_err)?;
        for l in r.lines_only_a.iter().chain(&r.lines_only_b).chain(&r.lines) {
            writeln!(out, "{l}").map_err(stdout_err)?;
        }
        let close = if r.within_tolerance > 0 {
            format!(
                ", {} within tolerance",
                count(r.within_tolerance, "tensor", None)
            )
        } else {
            String::new()
        };
        if differ {
            writeln!(
                out,
                "{red}differ:{red:#} {} only in A, {} only in B, {} dtype, {} shape, {} LoD, {} values, {} metadata; {} identical{close}",
                r.only_a.len(),
                r.only_b.len(),
                r.dtype.len(),
                r.shape.len(),
                r.lod.len(),
                r.values.len(),
                r.metadata.len(),
                count_s(r.identical, "tensor"),
            )
            .map_err(stdout_err)?;
        } else {
            writeln!(
                out,
                "{GOOD}equal:{GOOD:#} {} identical{close}",
                count_s(r.identical, "tensor")
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(if differ {
        ExitCode::from(EXIT_DIFFER)
    } else {
        ExitCode::SUCCESS
    })
}

fn missing(n: &[u8], p: &Path) -> paramdex::Error {
    paramdex::Error::NotFound {
        name: name::display(n),
        path: p.display().to_string(),
    }
}
