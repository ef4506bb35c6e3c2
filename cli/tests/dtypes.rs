//! The low-precision dtypes and a dtype paramdex does not know, through the command line: a
//! safetensors file as torch + safetensors write them (`F8_E8M0`, `F4`), with a tensor of a
//! dtype string from a newer safetensors (`F8_E5M3`).

use std::path::Path;

use serde_json::{json, Value};

mod common;
use common::*;

/// A safetensors file: `a` float32 [1, 2], `scale` F8_E8M0 [127, 128], `w` F4 of 4 values (2
/// bytes), `z` F8_E5M3 (unknown) [2, 2].
fn write(path: &Path) {
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"scale":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[8,10]},"w":{"dtype":"F4","shape":[4],"data_offsets":[10,12]},"z":{"dtype":"F8_E5M3","shape":[2,2],"data_offsets":[12,16]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
    file.extend_from_slice(&[127, 128]);
    file.extend_from_slice(&[0x21, 0xf7]);
    file.extend_from_slice(&[1, 2, 3, 4]);
    std::fs::write(path, file).unwrap();
}

fn dtypes(list: &Value) -> Vec<(String, String, Value)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["dtype"].as_str().unwrap().to_string(),
                t["shape"].clone(),
            )
        })
        .collect()
}

#[test]
fn low_precision_and_unknown_dtypes_list_read_and_convert() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.safetensors");
    write(&src);
    let listed = dtypes(&json(&run(&[&"ls", &src, &"--json"], 0)));
    let want = vec![
        ("a".to_string(), "float32".to_string(), json!([2])),
        ("scale".into(), "float8_e8m0fnu".into(), json!([2])),
        ("w".into(), "float4_e2m1fn_x2".into(), json!([2])),
        ("z".into(), "F8_E5M3".into(), json!([2, 2])),
    ];
    assert_eq!(listed, want);
    let stat = json(&run(&[&"stat", &src, &"--json"], 0));
    assert_eq!(
        stat["by_dtype"]["F8_E5M3"],
        json!({"tensors": 1, "bytes": 4})
    );
    assert_eq!(
        run(&[&"get", &src, &"z", &"--format", &"raw"], 0).stdout,
        [1, 2, 3, 4]
    );
    let scale = json(&run(&[&"get", &src, &"scale", &"--format", &"json"], 0));
    assert_eq!(scale["data"], json!([1.0, 2.0]));
    // `get` of the unknown type as JSON: no values, a note saying --format raw gives them.
    let z = run(&[&"get", &src, &"z", &"--format", &"json"], 0);
    assert_eq!(json(&z)["data"], Value::Null);
    // diff of the file with itself: identical, the unknown tensor compared by bytes.
    run(&[&"diff", &src, &src], 0);

    // convert refuses the unknown type by name, unless skipped; the known types survive.
    let pdx = dir.path().join("m.pdx");
    let e = run_codes(&[&"convert", &src, &pdx], &[1, 3, 4, 6]);
    let err = String::from_utf8_lossy(&e.stderr);
    assert!(
        err.contains("tensor z is a safetensors F8_E5M3 tensor, which paramdex does not decode"),
        "{err}"
    );
    run(&[&"convert", &src, &pdx, &"--skip-unsupported", &"-q"], 0);
    assert_eq!(
        dtypes(&json(&run(&[&"ls", &pdx, &"--json"], 0))),
        want[..3].to_vec()
    );
    assert_eq!(
        run(&[&"get", &pdx, &"w", &"--format", &"raw"], 0).stdout,
        [0x21, 0xf7]
    );
    // To numpy: unpacked, one value per byte (element 2i from the low nibble), shape in values.
    let npy = run(&[&"get", &pdx, &"w", &"--format", &"npy", &"-o", &"-"], 0).stdout;
    let text = String::from_utf8_lossy(&npy[..npy.len() - 4]).into_owned();
    assert!(
        text.contains("'descr': '|u1'") && text.contains("'shape': (4,)"),
        "{text}"
    );
    assert_eq!(&npy[npy.len() - 4..], &[0x1, 0x2, 0x7, 0xf]);
    // And back to safetensors: F4 with 4 values again.
    let back = dir.path().join("back.safetensors");
    run(
        &[&"convert", &pdx, &back, &"--to", &"safetensors", &"-q"],
        0,
    );
    let bytes = std::fs::read(&back).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let w = st.tensor("w").unwrap();
    assert_eq!(
        (w.dtype(), w.shape(), w.data()),
        (safetensors::Dtype::F4, &[4usize][..], &[0x21u8, 0xf7][..])
    );
    // TensorFlow has no e8m0 or packed fp4: refused by name.
    let e = run_codes(
        &[&"convert", &pdx, &dir.path().join("ck"), &"--to", &"tf"],
        &[1, 3, 4, 6],
    );
    assert!(
        String::from_utf8_lossy(&e.stderr).contains("which TensorFlow has no DataType for"),
        "{}",
        String::from_utf8_lossy(&e.stderr)
    );
}
