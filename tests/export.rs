//! Writing through the one export interface (`interop::export`) and merging
//! (`interop::merge`): every output format read back through `open_any`, the rules of what each
//! format can hold, progress, and merge conflicts.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use paramdex::interop::{
    export, merge, open_any, paddle, ExportOptions, ExportReport, Kind, MergeInput, MergeOptions,
    OutputFormat, TensorInfo, TensorStore,
};
use paramdex::{DType, Error, MetaValue, Metadata, Progress, Reader, Tensor, Unit, Writer};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// Bytes `0, 1, 2, ...` (wrapping), `n` of them; booleans would need 0/1, none are used.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// A native file holding what the output formats disagree on: plain tensors, complex128, a
/// LoD tensor and a name that is not UTF-8, plus typed metadata.
fn sample(dir: &Path) -> PathBuf {
    let p = dir.join("sample.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add("a/b.w", Tensor::new(DType::Float32, &[2, 3], &bytes(24, 1)))
        .unwrap();
    w.add("a/c.bias", Tensor::new(DType::BFloat16, &[3], &bytes(6, 2)))
        .unwrap();
    w.add("cplx", Tensor::new(DType::Complex128, &[2], &bytes(32, 3)))
        .unwrap();
    w.add("i8", Tensor::new(DType::Int8, &[5], &bytes(5, 4)))
        .unwrap();
    let lod = [vec![0u64, 1, 4]];
    w.add(
        "lod",
        Tensor::new(DType::Float32, &[4], &bytes(16, 5)).with_lod(&lod),
    )
    .unwrap();
    w.add(b"raw\xff", Tensor::new(DType::UInt8, &[2], &[9, 8]))
        .unwrap();
    w.insert_metadata("step", 7i64).unwrap();
    w.insert_metadata("name", "x").unwrap();
    w.finish().unwrap();
    p
}

/// Every tensor of a store: name -> (description, data bytes).
fn contents(s: &dyn TensorStore) -> BTreeMap<Vec<u8>, (TensorInfo, Vec<u8>)> {
    s.list()
        .unwrap()
        .into_iter()
        .map(|t| {
            let d = s.load(&t.name).unwrap().unwrap().data.raw_bytes().to_vec();
            (t.name.clone(), (t, d))
        })
        .collect()
}

fn opts() -> ExportOptions<'static> {
    ExportOptions::default()
}

fn skipping() -> ExportOptions<'static> {
    ExportOptions {
        skip_unsupported: true,
        ..ExportOptions::default()
    }
}

/// Records what it is told: each pass's total, unit and progress.
#[derive(Default)]
struct Recorder {
    passes: Mutex<Vec<(u64, Unit, u64)>>,
}

impl Progress for Recorder {
    fn start(&self, total: u64, unit: Unit) {
        self.passes.lock().unwrap().push((total, unit, 0));
    }
    fn advance(&self, n: u64) {
        self.passes.lock().unwrap().last_mut().expect("started").2 += n;
    }
}

impl Recorder {
    /// Checks the passes: the listing of `listed` tensors first, if given, then the bytes of
    /// what was written, each run to its end.
    fn check(&self, rep: &ExportReport, listed: Option<u64>) {
        let mut want = Vec::new();
        if let Some(n) = listed {
            want.push((n, Unit::Tensors, n));
        }
        want.push((rep.data_bytes, Unit::Bytes, rep.data_bytes));
        assert_eq!(*self.passes.lock().unwrap(), want, "{:?}", rep.format);
    }
}

fn names(rep: &ExportReport) -> Vec<&[u8]> {
    rep.skipped.iter().map(|s| s.name.as_slice()).collect()
}

#[test]
fn every_format_round_trips_through_open_any() {
    let dir = tempfile::tempdir().unwrap();
    let src = Reader::open(sample(dir.path())).unwrap();
    let want = contents(&src);
    let md = src.header().metadata.clone();
    for format in OutputFormat::ALL {
        let dst = dir.path().join(format!("out-{}", format.name()));
        let progress = Recorder::default();
        let rep = export(
            &src,
            format,
            &dst,
            &ExportOptions {
                progress: Some(&progress),
                ..skipping()
            },
        )
        .unwrap();
        progress.check(&rep, Some(src.len()));
        assert_eq!(rep.format, format);
        let len: u64 = rep
            .paths
            .iter()
            .map(|p| fs::metadata(p).unwrap().len())
            .sum();
        assert_eq!(rep.output_bytes, len, "{format:?}");
        let dropped = if format.carries_metadata() { 0 } else { 2 };
        assert_eq!(rep.metadata_dropped, dropped, "{format:?}");
        assert_eq!(rep.native.is_some(), format == OutputFormat::Native);
        // What the format cannot hold is left out and said why; everything else comes back.
        let left_out: Vec<&[u8]> = match format {
            OutputFormat::Safetensors => vec![b"cplx", b"lod", b"raw\xff"],
            // GGUF has no complex128, no uint8, no LoD.
            OutputFormat::Gguf => vec![b"cplx", b"lod", b"raw\xff"],
            // The program beside the records names its variables in UTF-8.
            OutputFormat::PaddleCombined | OutputFormat::PaddleMerged => vec![b"raw\xff"],
            _ => vec![],
        };
        assert_eq!(names(&rep), left_out, "{format:?}");
        let mut kept = want.clone();
        kept.retain(|n, _| !left_out.contains(&n.as_slice()));
        assert_eq!(rep.tensors, kept.len() as u64, "{format:?}");
        assert_eq!(
            rep.data_bytes,
            kept.values().map(|(t, _)| t.nbytes).sum::<u64>()
        );
        if format == OutputFormat::PaddleCombined {
            // The records, and the program naming them (read back below).
            assert_eq!(
                rep.paths,
                [
                    dir.path().join("out-paddle.pdiparams"),
                    dir.path().join("out-paddle.pdmodel"),
                    dir.path().join("out-paddle.json")
                ]
            );
        }
        if format == OutputFormat::PaddleMerged {
            // The size-prefixed records at DST itself, and the program naming them.
            assert_eq!(
                rep.paths,
                [
                    dir.path().join("out-paddle-merged"),
                    dir.path().join("out-paddle-merged.pdmodel")
                ]
            );
        }
        let back = open_any(&dst).unwrap();
        let got = contents(back.as_ref());
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            kept.keys().collect::<Vec<_>>(),
            "{format:?}"
        );
        for (name, (t, d)) in &kept {
            let (bt, bd) = &got[name];
            assert_eq!(
                (&bt.kind, &bt.shape, bd),
                (&t.kind, &t.shape, d),
                "{format:?}"
            );
            // TensorFlow has no LoD; the others keep it (safetensors left it out).
            let lod = if format == OutputFormat::TensorFlow {
                vec![]
            } else {
                t.lod.clone()
            };
            assert_eq!(bt.lod, lod, "{format:?}");
        }
        let back_md = back.metadata().unwrap();
        match format {
            OutputFormat::Native => assert_eq!(back_md, md),
            OutputFormat::Safetensors => assert_eq!(
                back_md,
                Metadata::from_strings([("step", "7"), ("name", "x")]).unwrap()
            ),
            // Strings too, in key order, their GGUF types listed as GGUF metadata is read.
            OutputFormat::Gguf => {
                let mut m = Metadata::from_strings([("step", "7"), ("name", "x")]).unwrap();
                let pair = |k: &str| MetaValue::List(vec![k.into(), "string".into()]);
                m.insert(
                    paramdex::interop::gguf::TYPES_KEY,
                    vec![pair("name"), pair("step")],
                )
                .unwrap();
                assert_eq!(back_md, m);
            }
            _ => assert!(back_md.is_empty(), "{format:?}"),
        }
    }
    // A combined file is the tensor files of the same tensors, one after the other.
    let mut concat = Vec::new();
    for p in export(
        &src,
        OutputFormat::PaddleTensors,
        &dir.path().join("again"),
        &opts(),
    )
    .unwrap()
    .paths
    {
        // Less the tensor whose name a Paddle program cannot declare.
        if p.file_name().unwrap().as_encoded_bytes() != b"raw\xff" {
            concat.extend(fs::read(p).unwrap());
        }
    }
    assert_eq!(
        fs::read(dir.path().join("out-paddle.pdiparams")).unwrap(),
        concat
    );
}

#[test]
fn paddle_combined_round_trips_with_its_program() {
    let dir = tempfile::tempdir().unwrap();
    let model = data("paddle/inference/legacy/model");
    let src = open_any(&model).unwrap();
    let out = dir.path().join("m");
    let rep = export(src.as_ref(), OutputFormat::PaddleCombined, &out, &opts()).unwrap();
    // The model's own program is copied beside the parameters: the output is that model.
    assert_eq!(
        rep.paths,
        [dir.path().join("m.pdiparams"), dir.path().join("m.pdmodel")]
    );
    assert_eq!(
        fs::read(dir.path().join("m.pdmodel")).unwrap(),
        fs::read(data("paddle/inference/legacy/model.pdmodel")).unwrap()
    );
    let back = open_any(&out).unwrap();
    assert_eq!(contents(back.as_ref()), contents(src.as_ref()));
}

/// `--to paddle` from an input without a program writes, beside the parameters, a legacy
/// `ProgramDesc` (`DST.pdmodel`) and a PIR program (`DST.json`, what Paddle 3 reads in its
/// default mode) declaring the same tensors: paramdex's own PIR reader parses the JSON and
/// finds every tensor, with its dtype and dims, and the pair opens by either program.
#[test]
fn paddle_combined_writes_a_pir_program() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("odd.pdx");
    let mut w = Writer::create(&p).unwrap();
    let odd = [
        ("enc/layer 0/w", DType::Float32, vec![2u64, 3]),
        ("q\"uote\\back\tslash", DType::Float64, vec![2]),
        ("ünï.b@GRAD", DType::BFloat16, vec![]),
        ("steps", DType::Int64, vec![1, 1]),
        ("f8", DType::Float8E4M3FN, vec![4]),
        ("flag", DType::Bool, vec![3]),
    ];
    for (name, dtype, shape) in &odd {
        let n: u64 = shape.iter().product();
        let len = n as usize * dtype.size();
        let data = if *dtype == DType::Bool {
            vec![1; len]
        } else {
            bytes(len, 3)
        };
        w.add(*name, Tensor::new(*dtype, shape, &data)).unwrap();
    }
    let lod = [vec![0u64, 1, 2]];
    w.add(
        "seq",
        Tensor::new(DType::Int32, &[2, 1], &bytes(8, 4)).with_lod(&lod),
    )
    .unwrap();
    w.finish().unwrap();
    let src = Reader::open(&p).unwrap();
    let out = dir.path().join("m");
    let rep = export(&src, OutputFormat::PaddleCombined, &out, &opts()).unwrap();
    let json_path = dir.path().join("m.json");
    assert_eq!(paddle::pir_program_path(&out), json_path);
    assert_eq!(
        rep.paths,
        [
            dir.path().join("m.pdiparams"),
            dir.path().join("m.pdmodel"),
            json_path.clone()
        ]
    );
    let prog = paddle::load_program(&json_path).unwrap();
    assert_eq!(prog.kind, paddle::ProgramKind::PirJson);
    let mut want: Vec<paddle::ParamDecl> = odd
        .iter()
        .map(|(name, dtype, shape)| paddle::ParamDecl {
            name: name.as_bytes().to_vec(),
            dtype: Some(*dtype),
            dims: Some(shape.iter().map(|&d| d as i64).collect()),
        })
        .collect();
    want.push(paddle::ParamDecl {
        name: b"seq".to_vec(),
        dtype: Some(DType::Int32),
        dims: Some(vec![2, 1]),
    });
    want.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(prog.params, want);
    // Valid JSON as Paddle reads it: one region, one block, one parameter op per tensor, in
    // the order of the records, each persistable with a value id of its own.
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["base_code"]["magic"], "pir");
    let ops = v["program"]["regions"][0]["blocks"][0]["ops"]
        .as_array()
        .unwrap();
    let got: Vec<(&str, &str, i64, i64)> = ops
        .iter()
        .map(|o| {
            (
                o["#"].as_str().unwrap(),
                o["A"][3].as_str().unwrap(),
                o["OA"][0].as_i64().unwrap(),
                o["O"]["%"].as_i64().unwrap(),
            )
        })
        .collect();
    let expect: Vec<(&str, &str, i64, i64)> = want
        .iter()
        .enumerate()
        .map(|(i, d)| ("p", std::str::from_utf8(&d.name).unwrap(), 1, i as i64 + 1))
        .collect();
    assert_eq!(got, expect);
    // The prefix, the records and either program open the same tensors.
    let all = contents(&src);
    for open in [
        out.clone(),
        json_path.clone(),
        dir.path().join("m.pdmodel"),
        dir.path().join("m.pdiparams"),
    ] {
        let back = open_any(&open).unwrap();
        assert_eq!(contents(back.as_ref()), all, "{}", open.display());
    }

    // Other tensors: both programs are paramdex's own, replaced together when asked.
    let small = dir.path().join("small.pdx");
    let mut w = Writer::create(&small).unwrap();
    w.add("only", Tensor::new(DType::Float16, &[2], &bytes(4, 9)))
        .unwrap();
    w.finish().unwrap();
    let small = Reader::open(&small).unwrap();
    let force = ExportOptions {
        overwrite: true,
        ..ExportOptions::default()
    };
    let e = export(&small, OutputFormat::PaddleCombined, &out, &opts()).unwrap_err();
    assert!(matches!(e, Error::OutputExists { .. }), "{e}");
    export(&small, OutputFormat::PaddleCombined, &out, &force).unwrap();
    for prog in ["m.json", "m.pdmodel"] {
        let names: Vec<Vec<u8>> = paddle::load_program(&dir.path().join(prog))
            .unwrap()
            .params
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names, [b"only".to_vec()], "{prog}");
    }

    // An output of an older paramdex (the ProgramDesc alone) gains its PIR program when the
    // same tensors are written again; the ProgramDesc is kept as it is.
    fs::remove_file(&json_path).unwrap();
    let desc = fs::read(dir.path().join("m.pdmodel")).unwrap();
    let rep = export(&small, OutputFormat::PaddleCombined, &out, &force).unwrap();
    assert_eq!(
        rep.paths,
        [dir.path().join("m.pdiparams"), json_path.clone()]
    );
    assert_eq!(fs::read(dir.path().join("m.pdmodel")).unwrap(), desc);
    assert_eq!(paddle::load_program(&json_path).unwrap().params.len(), 1);

    // A model's PIR graph at the prefix is never replaced, nor is a model's ProgramDesc
    // beside paramdex's PIR program.
    fs::copy(data("paddle/inference/pir/model.json"), &json_path).unwrap();
    let e = export(&src, OutputFormat::PaddleCombined, &out, &force).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    fs::remove_file(&json_path).unwrap();
    fs::remove_file(dir.path().join("m.pdmodel")).unwrap();
    export(&small, OutputFormat::PaddleCombined, &out, &force).unwrap();
    fs::copy(
        data("paddle/inference/legacy/model.pdmodel"),
        dir.path().join("m.pdmodel"),
    )
    .unwrap();
    let e = export(&src, OutputFormat::PaddleCombined, &out, &force).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(_)) && e.to_string().contains("m.pdmodel"),
        "{e}"
    );
}

/// PIR has no type for `uint16`, `uint32` and `uint64`: with such a tensor only the
/// `ProgramDesc` is written, and the report says so; a PIR program of paramdex's at the
/// prefix, which cannot be written again, is removed rather than left to shadow the new
/// `ProgramDesc`.
#[test]
fn paddle_combined_without_a_pir_type() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("u.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add("u", Tensor::new(DType::UInt32, &[2], &bytes(8, 1)))
        .unwrap();
    w.add("w", Tensor::new(DType::Float32, &[2], &bytes(8, 2)))
        .unwrap();
    w.finish().unwrap();
    let src = Reader::open(&p).unwrap();
    let out = dir.path().join("m");
    let rep = export(&src, OutputFormat::PaddleCombined, &out, &opts()).unwrap();
    assert_eq!(
        rep.paths,
        [dir.path().join("m.pdiparams"), dir.path().join("m.pdmodel")]
    );
    assert!(!dir.path().join("m.json").exists());
    // Said, not left for Paddle's JSON parser to stumble on.
    assert!(
        matches!(rep.notes.as_slice(), [n] if n.contains("tensor u is uint32")
            && n.contains("m.pdmodel") && n.contains("legacy mode")),
        "{:?}",
        rep.notes
    );
    let back = open_any(&out).unwrap();
    assert_eq!(contents(back.as_ref()), contents(&src));

    let q = dir.path().join("f.pdx");
    let mut w = Writer::create(&q).unwrap();
    w.add("w", Tensor::new(DType::Float32, &[2], &bytes(8, 2)))
        .unwrap();
    w.finish().unwrap();
    let f = Reader::open(&q).unwrap();
    let out = dir.path().join("g");
    export(&f, OutputFormat::PaddleCombined, &out, &opts()).unwrap();
    let force = ExportOptions {
        overwrite: true,
        ..ExportOptions::default()
    };
    assert!(dir.path().join("g.json").is_file());
    let rep = export(&src, OutputFormat::PaddleCombined, &out, &force).unwrap();
    assert_eq!(
        rep.paths,
        [dir.path().join("g.pdiparams"), dir.path().join("g.pdmodel")]
    );
    assert_eq!(rep.notes.len(), 1, "{:?}", rep.notes);
    assert!(!dir.path().join("g.json").exists());
    let back = open_any(&out).unwrap();
    assert_eq!(contents(back.as_ref()), contents(&src));
}

#[test]
fn what_each_format_cannot_hold() {
    let t = |name: &[u8], kind: Kind, lod: Vec<Vec<u64>>| TensorInfo {
        name: name.to_vec(),
        kind,
        shape: vec![2],
        lod,
        nbytes: 0,
    };
    let qint8 = 11; // TensorFlow's DT_QINT8
    let cases = [
        t(b"f", Kind::Numeric(DType::Float32), vec![]),
        t(b"c", Kind::Numeric(DType::Complex128), vec![]),
        t(b"l", Kind::Numeric(DType::Float32), vec![vec![0, 2]]),
        t(b"\xff", Kind::Numeric(DType::Float32), vec![]),
        t(b"s", Kind::String, vec![]),
        t(b"q", Kind::Opaque(qint8), vec![]),
    ];
    use OutputFormat::*;
    // (format, which of the cases it refuses)
    let refused = [
        (Native, [false, false, false, false, true, true]),
        (TensorFlow, [false, false, false, false, false, true]),
        // A program names its variables in UTF-8.
        (PaddleCombined, [false, false, false, true, true, true]),
        (PaddleTensors, [false, false, false, false, true, true]),
        (Safetensors, [false, true, true, true, true, true]),
    ];
    for (format, want) in refused {
        for (case, want) in cases.iter().zip(want) {
            let why = format.cannot_hold(case);
            assert_eq!(why.is_some(), want, "{format:?} {case:?}: {why:?}");
        }
    }
    assert_eq!(
        Safetensors.cannot_hold(&cases[1]).unwrap(),
        "complex128, which safetensors lacks"
    );
    assert_eq!(
        Native.cannot_hold(&cases[5]).unwrap(),
        "a qint8 tensor, which paramdex does not decode"
    );
    assert_eq!(Native.cannot_hold(&cases[4]).unwrap(), "a string tensor");
}

#[test]
fn unsupported_tensors_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let src = Reader::open(sample(dir.path())).unwrap();
    let dst = dir.path().join("o.safetensors");
    let e = export(&src, OutputFormat::Safetensors, &dst, &opts()).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert_eq!(
        e.to_string(),
        "unsupported: tensor cplx is complex128, which safetensors lacks, which safetensors \
         output cannot hold (3 such tensors); pass --skip-unsupported to leave such tensors out"
    );
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "nothing written"
    );

    // String tensors: a native file, Paddle and safetensors refuse them; TensorFlow keeps them.
    // Scalar strings (the TF2 object graph among them) are bytes values: a native file keeps
    // them, Paddle and safetensors refuse them as such.
    let strings = open_any(data("tf/strings/tf2/ckpt-1")).unwrap();
    let graph = b"_CHECKPOINTABLE_OBJECT_GRAPH".as_slice();
    for format in [
        OutputFormat::Native,
        OutputFormat::PaddleCombined,
        OutputFormat::Safetensors,
    ] {
        let out = dir.path().join(format!("s-{}", format.name()));
        let e = export(strings.as_ref(), format, &out, &opts()).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        let want = format!("which {} output cannot hold", format.name());
        assert!(e.to_string().contains(&want), "{e}");
        let rep = export(strings.as_ref(), format, &out, &skipping()).unwrap();
        let keeps_bytes = format == OutputFormat::Native;
        assert_eq!(names(&rep).contains(&graph), !keeps_bytes, "{format:?}");
        assert_eq!(
            rep.skipped
                .iter()
                .filter(|s| s.reason == "a string tensor")
                .count(),
            3,
            "{format:?}"
        );
        assert!(rep.skipped.iter().all(
            |s| s.reason == "a string tensor" || (!keeps_bytes && s.reason == "a bytes value")
        ));
    }
    let prefix = dir.path().join("s-tf");
    let rep = export(strings.as_ref(), OutputFormat::TensorFlow, &prefix, &opts()).unwrap();
    assert!(rep.skipped.is_empty());
    assert_eq!(
        contents(open_any(&prefix).unwrap().as_ref()),
        contents(strings.as_ref())
    );

    // Opaque TensorFlow types: no output holds them.
    let q = open_any(data("tf_opaque/quantized/ckpt")).unwrap();
    for format in OutputFormat::ALL {
        let out = dir.path().join(format!("q-{}", format.name()));
        let e = export(q.as_ref(), format, &out, &opts()).unwrap_err();
        assert!(
            e.to_string()
                .contains("q8 is a qint8 tensor, which paramdex does not decode"),
            "{format:?}: {e}"
        );
    }
}

#[test]
fn metadata_can_be_given() {
    let dir = tempfile::tempdir().unwrap();
    let src = Reader::open(sample(dir.path())).unwrap();
    let mut md = Metadata::new();
    md.insert("only", true).unwrap();
    let out = dir.path().join("m.pdx");
    export(
        &src,
        OutputFormat::Native,
        &out,
        &ExportOptions {
            metadata: Some(&md),
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(Reader::open(&out).unwrap().header().metadata, md);
}

/// Writes a native file of `tensors` (float32 [1] each: the value) and `metadata`.
fn native(path: &Path, tensors: &[(&str, f32)], metadata: &[(&str, &str)]) -> PathBuf {
    let mut w = Writer::create(path).unwrap();
    for (n, v) in tensors {
        w.add_values(n, &[1], &[*v]).unwrap();
    }
    for (k, v) in metadata {
        w.insert_metadata(*k, *v).unwrap();
    }
    w.finish().unwrap();
    path.to_path_buf()
}

fn merged(
    stores: &[(PathBuf, Box<dyn TensorStore>)],
    dst: &Path,
    opts: &MergeOptions<'_>,
) -> paramdex::Result<paramdex::interop::MergeReport> {
    let inputs: Vec<MergeInput<'_>> = stores
        .iter()
        .map(|(p, s)| MergeInput {
            store: s.as_ref(),
            path: p,
        })
        .collect();
    merge(&inputs, dst, opts)
}

fn open_all(paths: &[PathBuf]) -> Vec<(PathBuf, Box<dyn TensorStore>)> {
    paths
        .iter()
        .map(|p| (p.clone(), open_any(p).unwrap()))
        .collect()
}

#[test]
fn merge_conflicts_are_errors_unless_overridden() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = native(
        &d.join("x.pdx"),
        &[("shared", 1.0), ("x_only", 2.0)],
        &[("from", "x"), ("same", "s")],
    );
    let y = native(
        &d.join("y.pdx"),
        &[("shared", 9.0)],
        &[("from", "y"), ("same", "s")],
    );
    let z = native(&d.join("z.pdx"), &[("shared", 5.0), ("z_only", 3.0)], &[]);
    let out = d.join("out.pdx");
    // A tensor in two inputs is named first (with both inputs), then metadata.
    let stores = open_all(&[x.clone(), y.clone(), z.clone()]);
    let e = merged(&stores, &out, &MergeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "invalid argument: tensor shared is in both {} and {}; pass --allow-override to keep \
             the later one",
            x.display(),
            y.display()
        )
    );
    assert!(!out.exists());
    // A metadata key with two values.
    let w = native(&d.join("w.pdx"), &[("w_only", 0.5)], &[("from", "w")]);
    let e = merged(&open_all(&[x.clone(), w]), &out, &MergeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(
        e.to_string().contains("metadata key \"from\" is \"x\" in"),
        "{e}"
    );
    assert!(!out.exists());
    // Overridden: the latest input wins, tensors and metadata.
    let rep = merged(
        &stores,
        &out,
        &MergeOptions {
            allow_override: true,
            ..MergeOptions::default()
        },
    )
    .unwrap();
    assert_eq!(rep.replaced, 2);
    assert_eq!(rep.written.tensors, 3);
    assert_eq!(rep.written.paths, std::slice::from_ref(&out));
    let r = Reader::open(&out).unwrap();
    assert!(r.header().records_sorted);
    assert_eq!(
        r.tensor("shared").unwrap().as_slice::<f32>().unwrap(),
        [5.0]
    );
    assert_eq!(
        r.tensor("x_only").unwrap().as_slice::<f32>().unwrap(),
        [2.0]
    );
    assert_eq!(
        r.header().metadata.get("from"),
        Some(&MetaValue::String("y".into()))
    );
    // An existing output is replaced only when asked, before anything is read.
    let e = merged(
        &open_all(std::slice::from_ref(&y)),
        &out,
        &MergeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutputExists { .. }), "{e}");
    let replacing = MergeOptions {
        export: ExportOptions {
            overwrite: true,
            ..opts()
        },
        ..MergeOptions::default()
    };
    // Equal metadata values are no conflict; disjoint inputs need no flag.
    let e = merged(&open_all(&[x, z]), &out, &replacing).unwrap_err();
    assert!(e.to_string().contains("shared"), "shared is in both: {e}");
    let v = native(&d.join("v.pdx"), &[("v_only", 1.5)], &[("same", "s")]);
    let rep = merged(&open_all(&[y, v]), &out, &replacing).unwrap();
    assert_eq!(rep.replaced, 0);
    assert_eq!(rep.written.tensors, 2);
}

#[test]
fn merge_checks_only_the_tensors_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let strings = data("tf/strings/tf2/ckpt-1");
    // A string tensor (not a scalar: scalar strings are bytes values, which a native file holds).
    let refused = "s_empty/.ATTRIBUTES/VARIABLE_VALUE";
    let out = d.join("out.pdx");
    let stores = open_all(std::slice::from_ref(&strings));
    let e = merged(&stores, &out, &MergeOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    let e = e.to_string();
    assert!(e.contains(refused) && e.contains("(3 such tensors)"), "{e}");
    assert!(!out.exists());
    let progress = Recorder::default();
    let rep = merged(
        &stores,
        &out,
        &MergeOptions {
            export: ExportOptions {
                progress: Some(&progress),
                ..skipping()
            },
            ..MergeOptions::default()
        },
    )
    .unwrap();
    progress.check(&rep.written, None);
    assert!(names(&rep.written).contains(&refused.as_bytes()));
    assert!(!names(&rep.written).contains(&b"_CHECKPOINTABLE_OBJECT_GRAPH".as_slice()));
    // A later numeric tensor of the same name replaces the string tensor: it is not refused
    // (the first refused is the next string tensor, and there is one fewer).
    let over = native(&d.join("over.pdx"), &[(refused, 1.0)], &[]);
    let stores = open_all(&[strings, over]);
    let e = merged(
        &stores,
        &out,
        &MergeOptions {
            allow_override: true,
            export: ExportOptions {
                overwrite: true,
                ..opts()
            },
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("tensor s_mat/.ATTRIBUTES/VARIABLE_VALUE is a string tensor")
            && e.contains("(2 such tensors)"),
        "{e}"
    );
}

#[test]
fn merge_interleaves_inputs_like_a_map() {
    let dir = tempfile::tempdir().unwrap();
    // Deterministic pseudo-random names over a small alphabet, spread over three inputs with
    // overlaps; the model is a map where later inputs overwrite earlier ones.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut model = BTreeMap::new();
    let mut paths = Vec::new();
    for input in 0..3u32 {
        let mut tensors = BTreeMap::new();
        for _ in 0..60 {
            let r = next();
            let name: String = (0..1 + r % 4)
                .map(|i| (b'a' + ((r >> (8 * i + 8)) % 3) as u8) as char)
                .collect();
            tensors.insert(name, (input * 1000) as f32 + (r % 100) as f32);
        }
        let list: Vec<(&str, f32)> = tensors.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        paths.push(native(&dir.path().join(format!("{input}.pdx")), &list, &[]));
        model.extend(tensors);
    }
    let out = dir.path().join("out.pdx");
    let rep = merged(
        &open_all(&paths),
        &out,
        &MergeOptions {
            allow_override: true,
            ..MergeOptions::default()
        },
    )
    .unwrap();
    assert_eq!(rep.written.tensors, model.len() as u64);
    let r = Reader::open(&out).unwrap();
    let got: BTreeMap<String, f32> = r
        .iter()
        .map(|t| {
            let t = t.unwrap();
            (
                String::from_utf8(t.name().to_vec()).unwrap(),
                t.as_slice::<f32>().unwrap()[0],
            )
        })
        .collect();
    assert_eq!(got, model);
}

/// A merge to a `file://` URL writes the path the URL names (as `export` does), never a
/// local path spelled like the URL; an existing output is refused there as at the path.
#[cfg(feature = "s3")]
#[test]
fn merge_to_a_file_url_writes_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let x = native(&dir.path().join("x.pdx"), &[("a", 1.0), ("b", 2.0)], &[]);
    let out = dir.path().join("out.pdx");
    let url = format!("file://{}", out.display());
    let stores = open_all(&[x]);
    let rep = merged(&stores, Path::new(&url), &MergeOptions::default()).unwrap();
    assert_eq!(rep.written.tensors, 2);
    let r = Reader::open(&out).unwrap();
    assert_eq!(r.tensor("b").unwrap().as_slice::<f32>().unwrap(), &[2.0]);
    assert!(!Path::new("file:").exists());
    match merged(&stores, Path::new(&url), &MergeOptions::default()) {
        Err(Error::OutputExists { path }) => assert_eq!(path, out.display().to_string()),
        other => panic!("expected OutputExists, got {:?}", other.map(|_| ())),
    }
}

/// Every format's outputs: an existing one is refused before anything is read (the store here
/// could not even be listed), unless `overwrite`; then it is replaced by the new output. A file
/// output never replaces a directory. Missing parent directories are created.
#[test]
fn existing_outputs_are_replaced_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let src = Reader::open(sample(dir.path())).unwrap();
    for format in OutputFormat::ALL {
        let dst = dir.path().join(format!("new/dir/out-{}", format.name()));
        let outputs = format.outputs(&dst);
        assert!(!outputs.is_empty());
        // Written into directories that do not exist yet.
        let rep = export(&src, format, &dst, &skipping()).unwrap();
        for p in &outputs {
            assert!(p.exists(), "{format:?}: {}", p.display());
        }
        let before: Vec<_> = rep.paths.iter().map(|p| fs::read(p).unwrap()).collect();
        let e = export(&src, format, &dst, &skipping()).unwrap_err();
        match &e {
            Error::OutputExists { path } => {
                assert_eq!(path, &outputs[0].display().to_string(), "{format:?}")
            }
            e => panic!("{format:?}: {e}"),
        }
        let after: Vec<_> = rep.paths.iter().map(|p| fs::read(p).unwrap()).collect();
        assert_eq!(before, after, "{format:?}: untouched");
        let again = ExportOptions {
            overwrite: true,
            ..skipping()
        };
        let rep2 = export(&src, format, &dst, &again).unwrap();
        if matches!(
            format,
            OutputFormat::PaddleCombined | OutputFormat::PaddleMerged
        ) {
            // The program written the first time declares exactly these tensors: it is kept,
            // and only the parameters are written again.
            assert_eq!(rep2.paths, rep.paths[..1], "{format:?}");
            assert_eq!(fs::read(&rep.paths[1]).unwrap(), before[1]);
        } else {
            assert_eq!(rep2.paths, rep.paths, "{format:?}");
        }
        // Nothing staged is left beside the outputs.
        let parent = outputs[0].parent().unwrap();
        for e in fs::read_dir(parent).unwrap() {
            let n = e.unwrap().file_name();
            assert!(!n.to_string_lossy().starts_with('.'), "{format:?}: {n:?}");
        }
        fs::remove_dir_all(dir.path().join("new")).unwrap();
    }
    // A directory where a file output goes is refused, even with overwrite.
    let d = dir.path().join("a-directory");
    fs::create_dir(&d).unwrap();
    for format in [OutputFormat::Native, OutputFormat::Safetensors] {
        for overwrite in [false, true] {
            let o = ExportOptions {
                overwrite,
                ..skipping()
            };
            let e = export(&src, format, &d, &o).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
            assert!(e.to_string().contains("is a directory"), "{e}");
        }
    }
    // A stale TensorFlow shard of the prefix counts as an output.
    let prefix = dir.path().join("ckpt");
    fs::write(dir.path().join("ckpt.data-00001-of-00002"), b"old").unwrap();
    let e = export(&src, OutputFormat::TensorFlow, &prefix, &skipping()).unwrap_err();
    assert!(e.to_string().contains("ckpt.data-00001-of-00002"), "{e}");
}

#[test]
fn listings_report_their_progress_in_the_unit_each_store_knows() {
    let dir = tempfile::tempdir().unwrap();
    let native_path = sample(dir.path());
    let tf = data("tf/basic/v1/model.ckpt");
    let tf_index = fs::metadata(data("tf/basic/v1/model.ckpt.index"))
        .unwrap()
        .len();
    for (input, unit) in [
        (native_path, Unit::Tensors),
        (data("safetensors/model.safetensors"), Unit::Tensors),
        (data("paddle/models/legacy/m"), Unit::Tensors),
        (tf, Unit::IndexBytes),
    ] {
        let store = open_any(&input).unwrap();
        let plain: Vec<_> = store.scan(b"").unwrap().map(Result::unwrap).collect();
        let progress = Recorder::default();
        let reported: Vec<_> = store
            .scan_with_progress(&progress)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(reported, plain, "{}", input.display());
        let total = match unit {
            Unit::IndexBytes => tf_index,
            _ => plain.len() as u64,
        };
        assert_eq!(
            *progress.passes.lock().unwrap(),
            [(total, unit, total)],
            "{}",
            input.display()
        );
    }
}

/// `interop::safetensors::serialize` (the bytes Python's `save`/`serialize` return) gives
/// exactly the file the safetensors exporter writes, which reads back as the same tensors and
/// metadata; a tensor safetensors cannot hold is refused by name, as by the exporter.
#[test]
fn safetensors_serialize_is_the_exported_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("plain.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add("b", Tensor::new(DType::Float32, &[2, 3], &bytes(24, 1)))
        .unwrap();
    w.add("a", Tensor::new(DType::BFloat16, &[3], &bytes(6, 2)))
        .unwrap();
    w.add("e", Tensor::new(DType::Int64, &[0, 2], &[])).unwrap();
    w.insert_metadata("note", "x").unwrap();
    w.finish().unwrap();
    let r = Reader::open(&p).unwrap();
    let mut m = Metadata::new();
    m.insert("note", "x").unwrap();
    let bytes_out = paramdex::interop::safetensors::serialize(&r, &m).unwrap();
    let out = dir.path().join("o.safetensors");
    export(&r, OutputFormat::Safetensors, &out, &opts()).unwrap();
    assert_eq!(fs::read(&out).unwrap(), bytes_out);
    let back = paramdex::interop::safetensors::SafetensorsStore::from_bytes(bytes_out).unwrap();
    assert_eq!(contents(&back), contents(&r));
    assert_eq!(back.metadata().unwrap(), m);

    let s = Reader::open(sample(dir.path())).unwrap();
    let e = paramdex::interop::safetensors::serialize(&s, &Metadata::new()).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("cplx"), "{e}");
}

/// A TensorFlow checkpoint has no LoD: converting a LoD tensor into one keeps its values, and
/// the report says, by a note naming the tensor, that its LoD was not kept (no silent loss).
/// Formats that keep LoD say nothing.
#[test]
fn lod_left_behind_by_tensorflow_output_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lod.pdx");
    let mut w = Writer::create(&src).unwrap();
    let lod = [vec![0u64, 1, 3]];
    w.add(b"plain", Tensor::new(DType::UInt8, &[2], &[1, 2]))
        .unwrap();
    w.add(
        b"tokens",
        Tensor::new(DType::UInt8, &[3], &[7, 8, 9]).with_lod(&lod),
    )
    .unwrap();
    w.finish().unwrap();
    let store = open_any(&src).unwrap();
    let rep = export(
        &*store,
        OutputFormat::TensorFlow,
        &dir.path().join("tf"),
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(rep.tensors, 2);
    let lod_notes: Vec<&String> = rep.notes.iter().filter(|n| n.contains("LoD")).collect();
    assert_eq!(lod_notes.len(), 1, "{:?}", rep.notes);
    assert!(lod_notes[0].contains("tensor tokens"), "{}", lod_notes[0]);
    let back = open_any(dir.path().join("tf")).unwrap();
    let t = back.load(b"tokens").unwrap().unwrap();
    assert_eq!(t.data.raw_bytes().as_ref(), &[7, 8, 9]);
    assert!(t.info.lod.is_empty());
    for format in [OutputFormat::Native, OutputFormat::PaddleTensors] {
        let rep = export(
            &*store,
            format,
            &dir.path().join(format!("{format:?}")),
            &ExportOptions::default(),
        )
        .unwrap();
        assert!(rep.notes.iter().all(|n| !n.contains("LoD")), "{format:?}");
    }
}
