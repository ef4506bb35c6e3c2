//! `diff A B`.

use std::cmp::Ordering;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use indicatif::ProgressBar;
use paramdex::interop::{open_any, Kind, TensorData, TensorInfo, TensorInfos};
use paramdex::{name, DType, Progress, Result};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::inspect::shape_str;
use super::style::{BAD, DIM, GOOD, HEAD};
use super::{stdout_err, Ui, EXIT_DIFFER};

/// Element `i` of `b` (of `dtype`) as a complex number (real types: imaginary 0).
fn value(dtype: DType, b: &[u8], i: usize) -> (f64, f64) {
    let s = dtype.size();
    let e = &b[i * s..(i + 1) * s];
    let f32_at = |o: usize| f64::from(f32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]));
    let f64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&e[o..o + 8]);
        f64::from_le_bytes(a)
    };
    let mut a8 = [0u8; 8];
    a8[..s.min(8)].copy_from_slice(&e[..s.min(8)]);
    let re = match dtype {
        DType::Bool | DType::UInt8 => f64::from(e[0]),
        DType::Int8 => f64::from(e[0] as i8),
        DType::Int16 => f64::from(i16::from_le_bytes([e[0], e[1]])),
        DType::UInt16 => f64::from(u16::from_le_bytes([e[0], e[1]])),
        DType::Int32 => f64::from(i32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        DType::UInt32 => f64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        DType::Int64 => i64::from_le_bytes(a8) as f64,
        DType::UInt64 => u64::from_le_bytes(a8) as f64,
        DType::Float16 => half::f16::from_le_bytes([e[0], e[1]]).to_f64(),
        DType::BFloat16 => half::bf16::from_le_bytes([e[0], e[1]]).to_f64(),
        DType::Float32 | DType::Complex64 => f32_at(0),
        DType::Float64 | DType::Complex128 => f64_at(0),
        DType::Float8E4M3FN => f64::from(paramdex::interop::json::f8_e4m3fn_to_f32(e[0])),
        DType::Float8E5M2 => f64::from(paramdex::interop::json::f8_e5m2_to_f32(e[0])),
        _ => f64::NAN,
    };
    let im = match dtype {
        DType::Complex64 => f32_at(4),
        DType::Complex128 => f64_at(8),
        _ => 0.0,
    };
    (re, im)
}

/// How two same-dtype, same-shape data buffers differ: elements whose bytes differ, and the
/// largest absolute difference (NaN when a NaN meets a number; `|a − b|` for complex).
fn compare(dtype: DType, a: &[u8], b: &[u8]) -> (u64, f64) {
    let s = dtype.size();
    let n = a.len().min(b.len()) / s;
    let mut count = 0u64;
    let mut max = 0f64;
    for i in 0..n {
        if a[i * s..(i + 1) * s] == b[i * s..(i + 1) * s] {
            continue;
        }
        count += 1;
        let (ar, ai) = value(dtype, a, i);
        let (br, bi) = value(dtype, b, i);
        let d = if ar.is_nan() && br.is_nan() && ai == bi {
            0.0 // two NaNs with different payloads
        } else {
            (ar - br).hypot(ai - bi)
        };
        if d.is_nan() || max.is_nan() {
            max = f64::NAN;
        } else if d > max {
            max = d;
        }
    }
    (count, max)
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
    names.push(s);
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
        if ta.kind != tb.kind {
            let s = name::display(n);
            r.lines.push(format!(
                "{red}dtype:{red:#} {s}: {} vs {}",
                ta.kind.name(),
                tb.kind.name()
            ));
            r.dtype
                .push(json!({"name": s, "a": ta.kind.name(), "b": tb.kind.name()}));
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
                .push(json!({"name": s, "a": ta.shape, "b": tb.shape}));
            continue;
        }
        let lod_differs = ta.lod != tb.lod;
        if lod_differs {
            let s = name::display(n);
            r.lines.push(format!(
                "{red}lod:{red:#} {s}: {:?} vs {:?}",
                ta.lod, tb.lod
            ));
            r.lod.push(json!({"name": s, "a": ta.lod, "b": tb.lod}));
        }
        let da = a.load(n)?.ok_or_else(|| missing(n, a_path))?;
        let db = b.load(n)?.ok_or_else(|| missing(n, b_path))?;
        match (&da.data, &db.data, ta.kind) {
            (TensorData::Bytes(x), TensorData::Bytes(y), Kind::Numeric(d)) => {
                if x == y {
                    r.identical += u64::from(!lod_differs);
                    continue;
                }
                let s = name::display(n);
                let (count, max) = compare(d, x, y);
                let numel = x.len() / d.size().max(1);
                let max_json = if max.is_nan() {
                    json!("NaN")
                } else {
                    json!(max)
                };
                let shown = if max.is_nan() {
                    "NaN (a NaN against a number)".to_string()
                } else {
                    format!("{max:e}")
                };
                r.lines.push(format!(
                    "{red}values:{red:#} {s}: {count} of {numel} elements differ, max |a-b| = {shown}"
                ));
                r.values.push(json!({
                    "name": s,
                    "dtype": d.name(),
                    "differing_elements": count,
                    "elements": numel,
                    "max_abs_diff": max_json,
                }));
            }
            // Not decoded (TensorFlow variant, quantized types): byte-equal or not.
            (TensorData::Bytes(x), TensorData::Bytes(y), Kind::Opaque(_)) if x == y => {
                r.identical += u64::from(!lod_differs);
                continue;
            }
            (TensorData::Strings(x), TensorData::Strings(y), _) => {
                if x == y {
                    r.identical += u64::from(!lod_differs);
                    continue;
                }
                let s = name::display(n);
                let count = x.iter().zip(y).filter(|(p, q)| p != q).count();
                r.lines.push(format!(
                    "{red}values:{red:#} {s}: {count} of {} strings differ",
                    x.len()
                ));
                r.values.push(json!({
                    "name": s,
                    "dtype": "string",
                    "differing_elements": count,
                    "elements": x.len(),
                    "max_abs_diff": Value::Null,
                }));
            }
            _ => {
                let s = name::display(n);
                r.lines
                    .push(format!("{red}values:{red:#} {s}: stored differently"));
                r.values.push(json!({"name": s, "dtype": ta.kind.name()}));
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
        });
        serde_json::to_writer_pretty(&mut out, &o)
            .map_err(|e| stdout_err(std::io::Error::other(e)))?;
        writeln!(out).map_err(stdout_err)?;
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
        if differ {
            writeln!(
                out,
                "{red}differ:{red:#} {} only in A, {} only in B, {} dtype, {} shape, {} LoD, {} values, {} metadata; {} tensors identical",
                r.only_a.len(),
                r.only_b.len(),
                r.dtype.len(),
                r.shape.len(),
                r.lod.len(),
                r.values.len(),
                r.metadata.len(),
                r.identical
            )
            .map_err(stdout_err)?;
        } else {
            writeln!(
                out,
                "{GOOD}equal:{GOOD:#} {} tensors identical",
                r.identical
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_counts_and_measures() {
        let a: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b: Vec<u8> = [1.0f32, 2.5, 1.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(compare(DType::Float32, &a, &b), (2, 2.0));
        let n: Vec<u8> = [1.0f32, f32::NAN, 3.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let (c, m) = compare(DType::Float32, &a, &n);
        assert_eq!(c, 1);
        assert!(m.is_nan());
        let a: Vec<u8> = [3.0f64, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [0.0f64, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(compare(DType::Complex128, &a, &b), (1, 5.0));
        assert_eq!(compare(DType::Int8, &[1, 0xff], &[1, 1]), (1, 2.0));
    }
}
