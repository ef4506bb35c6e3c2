//! Paddle interop without Paddle: every fixture written by PaddlePaddle 3.3.1 (tests/data/paddle)
//! read through `open_any` against its manifest, byte-exact round trips back to Paddle's own
//! files, detection of each input form, and the classic mistakes reported clearly.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use paramdex::interop::paddle::{self, PaddleStore, ProgramKind};
use paramdex::interop::{
    export, open_any, ExportOptions, Format, OutputFormat, TensorData, TensorStore,
};
use paramdex::{DType, Error, Reader};
use serde_json::Value;
use support::{lod_list, read_json, sha256_hex, u64_list};

/// Checks every tensor `want` lists (manifest entries) against `store`, which must hold
/// exactly those names, in bytewise order.
fn check_store(what: &str, store: &dyn TensorStore, want: &[&Value]) {
    let list = store.list().unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut names: Vec<Vec<u8>> = want
        .iter()
        .map(|t| t["name"].as_str().unwrap().as_bytes().to_vec())
        .collect();
    names.sort();
    let got: Vec<Vec<u8>> = list.iter().map(|t| t.name.clone()).collect();
    assert_eq!(got, names, "{what}: names in bytewise order");
    for t in want {
        let name = t["name"].as_str().unwrap();
        let info = list.iter().find(|i| i.name == name.as_bytes()).unwrap();
        let loaded = store
            .load(name.as_bytes())
            .unwrap_or_else(|e| panic!("{what} {name}: {e}"))
            .unwrap_or_else(|| panic!("{what}: {name} missing"));
        assert_eq!(loaded.info, *info, "{what} {name}: load agrees with list");
        assert_eq!(
            info.kind.name(),
            t["dtype"].as_str().unwrap(),
            "{what} {name}"
        );
        assert_eq!(info.shape, u64_list(&t["shape"]), "{what} {name}");
        let lod = lod_list(&t["lod"]);
        assert_eq!(info.lod, lod, "{what} {name}");
        assert_eq!(info.nbytes, t["nbytes"].as_u64().unwrap(), "{what} {name}");
        let TensorData::Bytes(b) = &loaded.data else {
            panic!("{what} {name}: not bytes")
        };
        assert_eq!(
            sha256_hex(b),
            t["sha256"].as_str().unwrap(),
            "{what} {name}: data"
        );
    }
    let sum = store
        .verify(1)
        .unwrap_or_else(|e| panic!("{what} verify: {e}"));
    assert_eq!(sum.tensors, want.len() as u64, "{what}");
}

#[test]
fn lod_fixtures_each_file_and_the_save_vars_dir() {
    let dir = support::data("paddle").join("lod");
    let m = read_json(&dir.join("manifest.json"));
    let tensors = m["tensors"].as_array().unwrap();
    let mut files = 0;
    for t in tensors {
        let file = t["file"].as_str().unwrap();
        if file.contains('/') {
            continue;
        }
        let store = open_any(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(store.format(), Format::PaddleTensor, "{file}");
        check_store(file, store.as_ref(), &[t]);
        files += 1;
    }
    assert_eq!(files, 16, "every single-tensor fixture");
    let sv: Vec<&Value> = tensors
        .iter()
        .filter(|t| t["file"].as_str().unwrap().starts_with("save_vars/"))
        .collect();
    assert_eq!(sv.len(), 2);
    let store = open_any(dir.join("save_vars")).unwrap();
    assert_eq!(store.format(), Format::PaddleDir);
    check_store("save_vars", store.as_ref(), &sv);
    // Two-level LoD and every dtype are among them.
    assert!(tensors
        .iter()
        .any(|t| t["lod"].as_array().unwrap().len() == 2));
}

#[test]
fn inference_models_legacy_and_pir() {
    let dir = support::data("paddle").join("inference");
    let m = read_json(&dir.join("manifest.json"));
    for model in m["models"].as_array().unwrap() {
        let params = model["params_file"].as_str().unwrap();
        let want: Vec<&Value> = m["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["file"] == params)
            .collect();
        let order: Vec<&str> = m["pdiparams_order"][params]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(want.len(), order.len());
        let prefix = dir.join(params.trim_end_matches(".pdiparams"));
        let store = open_any(&prefix).unwrap_or_else(|e| panic!("{params}: {e}"));
        assert_eq!(store.format(), Format::PaddleModel);
        check_store(params, store.as_ref(), &want);
        let names: Vec<Vec<u8>> = store.list().unwrap().into_iter().map(|t| t.name).collect();
        let order: Vec<Vec<u8>> = order.iter().map(|s| s.as_bytes().to_vec()).collect();
        assert_eq!(names, order, "{params}: the file's record order");
        // Each record is where Paddle put it.
        let ps = paddle::open_model(
            &dir.join(params),
            &dir.join(model["model_file"].as_str().unwrap()),
        )
        .unwrap();
        for t in &want {
            let (_, off, len) = ps
                .record_location(t["name"].as_str().unwrap().as_bytes())
                .unwrap();
            assert_eq!(off, t["record_offset"].as_u64().unwrap());
            assert_eq!(off + len, t["record_end"].as_u64().unwrap());
        }
        let kind = ps.program().unwrap().kind;
        let want_kind = if model["mode"] == "pir" {
            ProgramKind::PirJson
        } else {
            ProgramKind::ProgramDesc
        };
        assert_eq!(kind, want_kind);
    }
}

#[test]
fn generated_models_and_per_variable_dirs() {
    let dir = support::data("paddle").join("models");
    let m = read_json(&dir.join("manifest.json"));
    for model in m["models"].as_array().unwrap() {
        let prefix = dir.join(model["prefix"].as_str().unwrap());
        let want: Vec<&Value> = model["tensors"].as_array().unwrap().iter().collect();
        assert_eq!(want.len(), 8);
        let store = open_any(&prefix).unwrap_or_else(|e| panic!("{}: {e}", prefix.display()));
        assert_eq!(store.format(), Format::PaddleModel);
        check_store(model["prefix"].as_str().unwrap(), store.as_ref(), &want);
        let names: Vec<String> = store
            .list()
            .unwrap()
            .into_iter()
            .map(|t| String::from_utf8(t.name).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Zeta.w_fp16",
                "alpha.w_bf16",
                "beta_b",
                "layer.10.b",
                "layer.2.b",
                "layer_2.b",
                "steps_i64",
                "ünï.b"
            ],
            "bytewise order"
        );
    }
    for d in m["per_variable_dirs"].as_array().unwrap() {
        let path = dir.join(d["dir"].as_str().unwrap());
        let want: Vec<&Value> = d["tensors"].as_array().unwrap().iter().collect();
        let store = open_any(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(store.format(), Format::PaddleDir);
        check_store(d["dir"].as_str().unwrap(), store.as_ref(), &want);
    }
}

/// PIR programs Paddle 3.3.1 wrote that a reader of parameter ops can get wrong: an RNN's
/// non-persistable dropout state (declared, never stored), one parameter declared by several
/// ops (tied weights; the dropout state of every RNN layer), a model without parameters (no
/// `.pdiparams` at all).
#[test]
fn pir_cases_rnn_tied_and_parameterless() {
    let dir = support::data("paddle").join("pir_cases");
    let m = read_json(&dir.join("manifest.json"));
    let mut seen = Vec::new();
    for model in m["models"].as_array().unwrap() {
        let case = model["case"].as_str().unwrap();
        seen.push(case.to_string());
        let want: Vec<&Value> = model["tensors"].as_array().unwrap().iter().collect();
        for p in [
            dir.join(model["prefix"].as_str().unwrap()),
            dir.join(model["program"].as_str().unwrap()),
        ] {
            let store = open_any(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(store.format(), Format::PaddleModel);
            check_store(case, store.as_ref(), &want);
        }
        let json = fs::read_to_string(dir.join(model["program"].as_str().unwrap())).unwrap();
        match case {
            "rnn" => {
                assert_eq!(want.len(), 12);
                assert!(json.contains("dropout_state__non_persistable"));
                assert!(!want
                    .iter()
                    .any(|t| t["name"].as_str().unwrap().contains("dropout_state")));
            }
            "tied" => {
                assert_eq!(want.len(), 3);
                assert_eq!(json.matches("\"shared_w\"").count(), 2);
            }
            "noparams" => {
                assert!(want.is_empty());
                assert!(!dir.join("noparams/m.pdiparams").exists());
            }
            other => panic!("unexpected case {other}"),
        }
    }
    assert_eq!(seen, ["rnn", "tied", "noparams"]);
    // A program that declares parameters still needs its .pdiparams.
    let t = tmp();
    fs::copy(dir.join("tied/m.json"), t.path().join("m.json")).unwrap();
    let e = open_err(&t.path().join("m"));
    assert!(
        e.contains("declaring 3 parameters") && e.contains("does not exist"),
        "{e}"
    );
}

/// The same model through every way of naming it.
#[test]
fn model_detection_forms() {
    let d = support::data("paddle").join("inference");
    for p in [
        d.join("legacy/model"),
        d.join("legacy/model.pdiparams"),
        d.join("legacy/model.pdmodel"),
        d.join("legacy"),
        d.join("pir/model"),
        d.join("pir/model.pdiparams"),
        d.join("pir/model.json"),
        d.join("pir"),
    ] {
        let s = open_any(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(s.format(), Format::PaddleModel, "{}", p.display());
        assert_eq!(s.list().unwrap().len(), 4, "{}", p.display());
    }
    let m = support::data("paddle").join("models");
    for p in [
        m.join("separate_legacy/__model__"),
        m.join("separate_pir/__model__.json"),
    ] {
        let s = open_any(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(s.format(), Format::PaddleDir);
        assert_eq!(s.list().unwrap().len(), 8);
    }
    // A per-variable file alone is a tensor file named after itself.
    let s = open_any(m.join("pervar_nested/enc/sub/b")).unwrap();
    assert_eq!(s.list().unwrap()[0].name, b"b");
    // Nested per-variable names are relative paths.
    let s = paddle::open_dir(&m.join("pervar_nested")).unwrap();
    assert!(s.names().any(|n| n == b"enc/sub/b"));
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// A model copied into a temporary directory with its parameters replaced by `params`.
fn model_with_params(t: &Path, params: &[u8]) -> PathBuf {
    let src = support::data("paddle").join("inference/legacy/model.pdmodel");
    fs::copy(src, t.join("m.pdmodel")).unwrap();
    fs::write(t.join("m.pdiparams"), params).unwrap();
    t.join("m")
}

fn legacy_params() -> Vec<u8> {
    fs::read(support::data("paddle").join("inference/legacy/model.pdiparams")).unwrap()
}

fn open_err(p: &Path) -> String {
    match open_any(p) {
        Ok(s) => panic!("{} opened as {:?}", p.display(), s.format()),
        Err(e) => e.to_string(),
    }
}

/// The tests write the same outputs again and again: replacing them is asked for.
fn replacing() -> ExportOptions<'static> {
    ExportOptions {
        overwrite: true,
        ..ExportOptions::default()
    }
}

fn to_native(store: &dyn TensorStore, out: &Path) {
    export(store, OutputFormat::Native, out, &replacing()).unwrap();
}

/// Writes `store` as a Paddle combined parameter file for `out`, with the program naming its
/// tensors; returns the parameters' path. The output reads back as the same tensors.
fn write_combined(store: &dyn TensorStore, out: &Path) -> PathBuf {
    let rep = export(store, OutputFormat::PaddleCombined, out, &replacing()).unwrap();
    // The parameters and the programs written beside them: none when the program already
    // there declares these tensors, one when the input's own is copied, two (`ProgramDesc`
    // and PIR) when paramdex writes them.
    assert!(matches!(rep.paths.len(), 1..=3), "{:?}", rep.paths);
    let back = open_any(&rep.paths[0]).unwrap();
    let names = |s: &dyn TensorStore| -> Vec<Vec<u8>> {
        s.list().unwrap().into_iter().map(|t| t.name).collect()
    };
    assert_eq!(names(back.as_ref()), names(store));
    rep.paths[0].clone()
}

/// Writes `store` as Paddle tensor files at `out`; returns the paths written.
fn write_tensor_files(store: &dyn TensorStore, out: &Path) -> paramdex::Result<Vec<PathBuf>> {
    export(store, OutputFormat::PaddleTensors, out, &replacing()).map(|r| r.paths)
}

#[test]
fn convert_model_to_native_and_back_is_byte_exact() {
    let t = tmp();
    for (sub, params) in [
        ("inference/legacy/model", "inference/legacy/model.pdiparams"),
        ("inference/pir/model", "inference/pir/model.pdiparams"),
        ("models/legacy/m", "models/legacy/m.pdiparams"),
        ("models/pir/m", "models/pir/m.pdiparams"),
    ] {
        let store = open_any(support::data("paddle").join(sub)).unwrap();
        let native = t.path().join("m.pdx");
        to_native(store.as_ref(), &native);
        let r = Reader::open(&native).unwrap();
        assert!(r.header().records_sorted);
        let out = write_combined(&r, &t.path().join("out"));
        assert_eq!(out, t.path().join("out.pdiparams"));
        assert_eq!(
            fs::read(&out).unwrap(),
            fs::read(support::data("paddle").join(params)).unwrap(),
            "{sub}: --to paddle reproduces Paddle's bytes"
        );
        // Directly, without the native step, too.
        let out2 = write_combined(store.as_ref(), &t.path().join("direct.pdiparams"));
        assert_eq!(out2, t.path().join("direct.pdiparams"));
        assert_eq!(fs::read(&out2).unwrap(), fs::read(&out).unwrap());
    }
}

#[test]
fn tensor_files_round_trip_byte_exact() {
    let t = tmp();
    let lod = support::data("paddle").join("lod");
    for ent in fs::read_dir(&lod).unwrap() {
        let p = ent.unwrap().path();
        if p.extension().and_then(|e| e.to_str()) != Some("lodtensor") {
            continue;
        }
        let store = open_any(&p).unwrap();
        let native = t.path().join("x.pdx");
        to_native(store.as_ref(), &native);
        let r = Reader::open(&native).unwrap();
        let out = t.path().join("x.lodtensor");
        let written = write_tensor_files(&r, &out).unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0], out);
        assert_eq!(
            fs::read(&out).unwrap(),
            fs::read(&p).unwrap(),
            "{}",
            p.display()
        );
        // One tensor is a file: it does not replace an existing directory.
        let d = t.path().join("into");
        fs::create_dir_all(&d).unwrap();
        let e = write_tensor_files(&r, &d).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
    }
    // Several tensors: a per-variable directory, nested names as subdirectories.
    let src = support::data("paddle").join("models/pervar_nested");
    let store = open_any(&src).unwrap();
    let out = t.path().join("pervar");
    let written = write_tensor_files(store.as_ref(), &out).unwrap();
    assert_eq!(written.len(), 4);
    for w in &written {
        let rel = w.strip_prefix(&out).unwrap();
        assert_eq!(
            fs::read(w).unwrap(),
            fs::read(src.join(rel)).unwrap(),
            "{}",
            rel.display()
        );
    }
    let back = open_any(&out).unwrap();
    assert_eq!(back.list().unwrap(), store.list().unwrap());
    // An existing file becomes the directory only when replacing is asked for.
    let f = t.path().join("file");
    fs::write(&f, b"x").unwrap();
    let opts = ExportOptions::default();
    let e = export(store.as_ref(), OutputFormat::PaddleTensors, &f, &opts).unwrap_err();
    assert!(matches!(e, Error::OutputExists { .. }), "{e}");
    assert_eq!(fs::read(&f).unwrap(), b"x");
    write_tensor_files(store.as_ref(), &f).unwrap();
    assert_eq!(open_any(&f).unwrap().list().unwrap(), store.list().unwrap());
}

/// Of several tensors, one whose name no file can have is a tensor the output cannot hold:
/// refused before anything is written (`Unsupported`, naming it), or left out and reported
/// with `skip_unsupported`. Two names of which one would be the other's directory are an
/// error either way.
#[test]
fn unsafe_names_are_refused_as_files() {
    let t = tmp();
    for (names, want, skippable) in [
        (vec!["../evil", "ok"], "`..`", true),
        (vec!["/abs", "ok"], "absolute", true),
        (vec!["a//b", "ok"], "empty path component", true),
        (vec!["a", "a/b"], "cannot both be files", false),
    ] {
        let native = t.path().join("n.pdx");
        let mut w = paramdex::Writer::create(&native).unwrap();
        for n in &names {
            w.add(n, paramdex::Tensor::new(DType::UInt8, &[1], &[7]))
                .unwrap();
        }
        w.finish().unwrap();
        let r = Reader::open(&native).unwrap();
        let out = t.path().join("out");
        let e = export(&r, OutputFormat::PaddleTensors, &out, &replacing()).unwrap_err();
        if skippable {
            assert!(matches!(e, Error::Unsupported(_)), "{e}");
            assert!(e.to_string().contains(names[0]), "{e}");
        } else {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        assert!(e.to_string().contains(want), "{e}");
        assert!(
            !out.exists(),
            "nothing written before all names are checked"
        );
        let skipping = ExportOptions {
            overwrite: true,
            skip_unsupported: true,
            ..ExportOptions::default()
        };
        match export(&r, OutputFormat::PaddleTensors, &out, &skipping) {
            Ok(rep) => {
                assert!(skippable);
                let left: Vec<&[u8]> = rep.skipped.iter().map(|s| s.name.as_slice()).collect();
                assert_eq!(left, [names[0].as_bytes()]);
                assert!(rep.skipped[0].reason.contains(want));
                // The one tensor left is the file `out`.
                assert_eq!(rep.paths, std::slice::from_ref(&out));
                fs::remove_file(&out).unwrap();
            }
            Err(e) => assert!(!skippable && e.to_string().contains(want), "{e}"),
        }
    }
    let r = paddle::relative_path(b"x\0y").unwrap_err();
    assert!(r.to_string().contains("NUL"));
}

#[test]
fn pickles_are_reported_as_pickles() {
    let t = tmp();
    for (bytes, proto) in [
        (&b"\x80\x02}q\x00(X"[..], "protocol 2"),
        (&b"\x80\x04\x95\x10\x00"[..], "protocol 4"),
    ] {
        // As a .pdparams file, and as the .pdiparams of a model.
        let p = t.path().join("model.pdparams");
        fs::write(&p, bytes).unwrap();
        let e = open_any(&p).err().expect("a pickle must not open");
        assert!(matches!(e, Error::UnrecognizedFormat { .. }), "{e}");
        let s = e.to_string();
        assert!(s.contains("Python pickle") && s.contains(proto), "{s}");
        assert!(
            !s.contains("version"),
            "not reported as a bad tensor stream: {s}"
        );
        let prefix = model_with_params(t.path(), bytes);
        let s = open_err(&prefix);
        assert!(s.contains("Python pickle") && s.contains(proto), "{s}");
        // A directory holding only a pickle.
        let d = t.path().join("d");
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("model.pdparams"), bytes).unwrap();
        assert!(open_err(&d).contains("Python pickle"));
        fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn truncated_last_tensor() {
    let t = tmp();
    let p = legacy_params();
    let prefix = model_with_params(t.path(), &p[..p.len() - 1]);
    let s = open_err(&prefix);
    assert!(
        s.contains("fc_1.w_0")
            && s.contains("record 3 of 4, the last")
            && s.contains("truncated data")
            && s.contains("offset 666"),
        "{s}"
    );
    // Cut anywhere: always an error, never a panic.
    for n in 0..p.len() {
        let prefix = model_with_params(t.path(), &p[..n]);
        assert!(open_any(&prefix).is_err(), "cut at {n}");
    }
}

/// The "cut short" hint on the last tensor is decided by the error's kind, not by its text:
/// every cut inside the last record gets it (also a cut inside its desc, whose message does not
/// say "truncated"), and a damaged last record in a directory named `truncated` does not.
#[test]
fn truncation_hint_follows_the_error_kind() {
    let t = tmp();
    let p = legacy_params();
    let last = paramdex::raw::record::walk(&p, 0)
        .map(|r| r.unwrap().0)
        .last()
        .unwrap() as usize;
    for n in last + 1..p.len() {
        let s = open_err(&model_with_params(t.path(), &p[..n]));
        assert!(
            s.contains("record 3 of 4, the last") && s.contains("the file is cut short"),
            "cut at {n}: {s}"
        );
    }
    let d = t.path().join("truncated");
    fs::create_dir(&d).unwrap();
    let mut bad = p.clone();
    bad[last] = 1; // outer version 1: damaged, not cut short
    let s = open_err(&model_with_params(&d, &bad));
    assert!(
        s.contains("record 3 of 4, the last") && s.contains("outer (DenseTensor) version is 1"),
        "{s}"
    );
    assert!(!s.contains("the file is cut short"), "{s}");
}

#[test]
fn trailing_bytes() {
    let t = tmp();
    let mut p = legacy_params();
    p.push(0);
    let s = open_err(&model_with_params(t.path(), &p));
    assert!(
        s.contains("1 trailing byte after the last expected tensor") && s.contains("offset 948"),
        "{s}"
    );
    // A tensor file with one trailing byte.
    let mut f = fs::read(support::data("paddle").join("lod/lod1_f32.lodtensor")).unwrap();
    f.push(0);
    let path = t.path().join("x.lodtensor");
    fs::write(&path, &f).unwrap();
    let s = open_err(&path);
    assert!(s.contains("1 trailing byte after the tensor"), "{s}");
}

#[test]
fn fewer_and_more_records_than_names() {
    let t = tmp();
    let p = legacy_params();
    // Fewer: the last record (fc_1.w_0, offsets 666..948) missing.
    let s = open_err(&model_with_params(t.path(), &p[..666]));
    assert!(
        s.contains("fewer records than names")
            && s.contains("ends after 3 records")
            && s.contains("lists 4 parameters")
            && s.contains("first missing: fc_1.w_0"),
        "{s}"
    );
    // More: a fifth record.
    let mut more = p.clone();
    more.extend_from_slice(&p[..88]);
    let s = open_err(&model_with_params(t.path(), &more));
    assert!(
        s.contains("more records than names") && s.contains("holds 5 records"),
        "{s}"
    );
    // Many more names than the file can possibly hold.
    let s = open_err(&model_with_params(t.path(), &p[..30]));
    assert!(s.contains("holds at most 1 records"), "{s}");
    // A combined file without its program.
    let path = t.path().join("lonely.pdiparams");
    fs::write(&path, &p).unwrap();
    let s = open_err(&path);
    assert!(
        s.contains("holds 4 records, not one") && s.contains("lonely.pdmodel"),
        "{s}"
    );
}

#[test]
fn program_and_records_must_agree() {
    let t = tmp();
    let p = legacy_params();
    // Swap the first two records: names match in count, not in shape.
    let mut swapped = p[88..626].to_vec();
    swapped.extend_from_slice(&p[..88]);
    swapped.extend_from_slice(&p[626..]);
    let s = open_err(&model_with_params(t.path(), &swapped));
    assert!(
        s.contains("tensor fc_0.b_0")
            && s.contains("float32 [8, 16]")
            && s.contains("declares float32 [16]"),
        "{s}"
    );
    // A program that is not one.
    fs::write(t.path().join("m.pdmodel"), b"\xff\xff\xff").unwrap();
    fs::write(t.path().join("m.pdiparams"), &p).unwrap();
    assert!(open_err(&t.path().join("m")).contains("not a Paddle ProgramDesc"));
    // Parameters without a program, a program without parameters.
    fs::remove_file(t.path().join("m.pdmodel")).unwrap();
    assert!(open_err(&t.path().join("m")).contains("no program"));
    fs::remove_file(t.path().join("m.pdiparams")).unwrap();
    fs::copy(
        support::data("paddle").join("inference/pir/model.json"),
        t.path().join("m.json"),
    )
    .unwrap();
    let e = open_err(&t.path().join("m"));
    assert!(
        e.contains("declaring 4 parameters") && e.contains("does not exist"),
        "{e}"
    );
}

#[test]
fn directories_are_strict() {
    let t = tmp();
    let d = t.path().join("vars");
    fs::create_dir_all(d.join("sub")).unwrap();
    let lod = support::data("paddle").join("lod");
    fs::copy(lod.join("plain_f32.lodtensor"), d.join("a")).unwrap();
    fs::copy(lod.join("lod2_f32.lodtensor"), d.join("sub/b")).unwrap();
    let s = paddle::open_dir(&d).unwrap();
    assert_eq!(s.names().collect::<Vec<_>>(), [&b"a"[..], b"sub/b"]);
    // A file that is not a record is named.
    fs::write(d.join("sub/junk"), b"\0\0\0\0\0\0\0\0\0\0\0\0garbage").unwrap();
    let e = open_err(&d);
    assert!(e.contains("sub/junk"), "{e}");
    fs::remove_file(d.join("sub/junk")).unwrap();
    // A stray file that sorts first (README.md < a) is named too, not taken as proof that the
    // directory is something else.
    fs::write(d.join("README.md"), b"hi\n").unwrap();
    let e = open_err(&d);
    assert!(
        e.contains("README.md is not a tensor record") && e.contains("per-variable"),
        "{e}"
    );
    fs::remove_file(d.join("README.md")).unwrap();
    // An empty directory says so.
    let empty = t.path().join("empty");
    fs::create_dir_all(&empty).unwrap();
    assert!(open_err(&empty).contains("a directory holding no checkpoint"));
    // Two models in one directory are ambiguous.
    let m = t.path().join("two");
    fs::create_dir_all(&m).unwrap();
    for n in ["a", "b"] {
        fs::copy(
            support::data("paddle").join("inference/pir/model.json"),
            m.join(format!("{n}.json")),
        )
        .unwrap();
        fs::copy(
            support::data("paddle").join("inference/pir/model.pdiparams"),
            m.join(format!("{n}.pdiparams")),
        )
        .unwrap();
    }
    let e = open_err(&m);
    assert!(e.contains("2 Paddle models"), "{e}");
    // A directory of unrelated files is not claimed.
    let o = t.path().join("other");
    fs::create_dir_all(&o).unwrap();
    fs::write(o.join("readme.txt"), b"hello").unwrap();
    assert!(matches!(
        open_any(&o).map(|s| s.format()),
        Err(Error::UnrecognizedFormat { .. })
    ));
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&o, d.join("loop")).unwrap();
        let e = open_err(&d);
        assert!(e.contains("symbolic links to directories"), "{e}");
    }
}

/// The messages for damaged or misnamed single files say which file, which tensor and what.
#[test]
fn tensor_file_messages_name_file_and_cause() {
    let t = tmp();
    let plain = fs::read(support::data("paddle").join("lod/plain_f32.lodtensor")).unwrap();
    // A 2 GiB desc size: corruption of that file (exit 3 in the CLI), naming it.
    let mut huge = plain.clone();
    huge[16..20].copy_from_slice(&i32::MAX.to_le_bytes());
    let p = t.path().join("huge.t");
    fs::write(&p, &huge).unwrap();
    let e = open_any(&p).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("huge.t: tensor huge.t") && e.contains("above the limit"),
        "{e}"
    );
    // An unknown dtype number is not fatal in a tensor file: its data runs to the end of the
    // file, listed under the number, read as stored.
    let mut odd = plain.clone();
    assert_eq!(odd[20], 0x08, "data_type tag");
    odd[21] = 99;
    let p = t.path().join("odd.t");
    fs::write(&p, &odd).unwrap();
    let s = open_any(&p).unwrap();
    let info = s.info(b"odd.t").unwrap().unwrap();
    assert_eq!(info.kind.name(), "code 99");
    let same = open_any(support::data("paddle").join("lod/plain_f32.lodtensor")).unwrap();
    let want = &same.list().unwrap()[0];
    assert_eq!((info.nbytes, &info.shape), (want.nbytes, &want.shape));
    // A valid combined stream given as a tensor file: what it is, not "corrupt".
    let p = t.path().join("all.bin");
    fs::write(&p, legacy_params()).unwrap();
    let e = open_any(&p).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::UnrecognizedFormat { .. }), "{e}");
    assert!(e.to_string().contains("combined parameter stream"), "{e}");
    // A .json program that is not JSON is reported as bad JSON.
    fs::write(t.path().join("j.json"), b"").unwrap();
    fs::copy(
        support::data("paddle").join("inference/pir/model.pdiparams"),
        t.path().join("j.pdiparams"),
    )
    .unwrap();
    assert!(open_err(&t.path().join("j")).contains("not valid JSON"));
}

/// Hostile bytes in every position of a model's parameters or program: an error or a
/// consistent store, never a panic.
#[test]
fn mutated_inputs_never_panic() {
    let t = tmp();
    let p = legacy_params();
    for i in 0..p.len() {
        for b in [0x00u8, 0xff, 0x80] {
            let mut m = p.clone();
            m[i] = b;
            if let Ok(s) = open_any(model_with_params(t.path(), &m)) {
                for info in s.list().unwrap() {
                    let _ = s.load(&info.name);
                }
                let _ = s.verify(1);
            }
        }
    }
    let prog = fs::read(support::data("paddle").join("inference/pir/model.json")).unwrap();
    fs::write(
        t.path().join("j.pdiparams"),
        fs::read(support::data("paddle").join("inference/pir/model.pdiparams")).unwrap(),
    )
    .unwrap();
    for i in (0..prog.len()).step_by(7) {
        let mut m = prog.clone();
        m[i] = b'"';
        fs::write(t.path().join("j.json"), &m).unwrap();
        let _ = open_any(t.path().join("j"));
    }
    let desc = fs::read(support::data("paddle").join("inference/legacy/model.pdmodel")).unwrap();
    for i in (0..desc.len()).step_by(3) {
        let mut m = desc.clone();
        m[i] ^= 0x5a;
        let prefix = model_with_params(t.path(), &p);
        fs::write(t.path().join("m.pdmodel"), &m).unwrap();
        let _ = open_any(&prefix);
    }
}

#[test]
fn paddle_store_api() {
    let d = support::data("paddle").join("inference/pir");
    let s: PaddleStore =
        paddle::open_model(&d.join("model.pdiparams"), &d.join("model.json")).unwrap();
    assert_eq!(
        s.files().collect::<Vec<_>>(),
        [d.join("model.pdiparams").as_path()]
    );
    assert_eq!(s.program().unwrap().params.len(), 4);
    assert!(s.load(b"nope").unwrap().is_none());
    assert_eq!(
        paddle::combined_path(Path::new("x/out")),
        Path::new("x/out.pdiparams")
    );
}

#[test]
fn unknown_code_in_a_combined_stream_is_refused_by_tensor_code_and_offset() {
    let t = tmp();
    let mut params = legacy_params();
    // The first record: no LoD, so its desc starts at byte 20 with data_type (tag 0x08).
    assert_eq!(params[20], 0x08);
    params[21] = 99;
    let m = model_with_params(t.path(), &params);
    let Err(e) = open_any(&m) else {
        panic!("opened")
    };
    assert!(matches!(e, Error::UnknownDType { code: 99, .. }), "{e:?}");
    let text = e.to_string();
    for want in [
        "tensor fc_0.b_0",
        "record 0 of",
        "offset 20",
        "cannot be sized",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}
