//! `paramdex convert` to and from object storage, on a real 3-node Garage cluster
//! (`tests/support/garage.rs`): a native file converted to `s3://bucket/key` (streamed by
//! multipart upload) and back is the same tensors; an existing object is refused without
//! `--force`; safetensors output to a URL is uploaded whole; `merge` into an object; refused
//! credentials leave nothing.
//! The child process is configured by the usual `AWS_*` environment variables.

#[allow(dead_code)]
#[path = "../../tests/support/garage.rs"]
mod garage;
#[allow(dead_code)]
#[path = "../../tests/support/s3.rs"]
mod s3;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use paramdex::{DType, Reader, Tensor, Writer};

const BIN: &str = env!("CARGO_BIN_EXE_paramdex");

/// Runs the binary with the cluster's `AWS_*` environment (and `secret`); checks the exit code
/// and the error contract (one `paramdex: error:` line).
fn run(g: &garage::Garage, secret: &str, args: &[&str], code: i32) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .envs(s3::aws_env(g, secret))
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("the binary runs");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "paramdex {args:?}\nstdout: {so}\nstderr: {se}"
    );
    assert!(!se.contains("panicked"), "{se}");
    if code != 0 {
        let lines: Vec<&str> = se.lines().collect();
        assert_eq!(lines.len(), 1, "one error line: {se}");
        assert!(lines[0].starts_with("paramdex: error: "), "{se}");
    }
    out
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 11) as u8 ^ seed)
        .collect()
}

/// A native file of 40 MiB and change: several parts of the default 16 MiB.
fn model(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut tensors: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("layer.{i:02}.bias"), pattern(1000 + i, i as u8)))
        .collect();
    tensors.push(("layer.embed".into(), pattern(24 << 20, 1)));
    tensors.push(("layer.head".into(), pattern(16 << 20, 2)));
    tensors.sort();
    let mut w = Writer::create(path).unwrap();
    for (name, data) in &tensors {
        w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
            .unwrap();
    }
    w.finish().unwrap();
    tensors
}

/// The shared cluster once it takes a write (through the CLI itself: a tiny conversion).
fn cluster(test: &str, dir: &Path) -> Option<&'static garage::Garage> {
    let g = garage::shared(test)?;
    let probe = dir.join("probe.pdx");
    let mut w = Writer::create(&probe).unwrap();
    w.add("x", Tensor::new(DType::UInt8, &[1], &[7])).unwrap();
    w.finish().unwrap();
    let url = format!("s3://{}/cli/probe.pdx", g.bucket());
    let start = Instant::now();
    loop {
        let out = Command::new(BIN)
            .args(["convert", probe.to_str().unwrap(), &url, "--force"])
            .env("AWS_ACCESS_KEY_ID", g.access_key_id())
            .env("AWS_SECRET_ACCESS_KEY", g.secret_access_key())
            .env("AWS_REGION", g.region())
            .env("AWS_ENDPOINT_URL", g.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .output()
            .unwrap();
        if out.status.success() {
            return Some(g);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "garage not writable after 60 s: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn convert_to_and_from_an_s3_url() {
    let dir = tempfile::tempdir().unwrap();
    let Some(g) = cluster("convert_to_and_from_an_s3_url", dir.path()) else {
        return;
    };
    g.run(|| {
        let secret = g.secret_access_key();
        let src = dir.path().join("m.pdx");
        let tensors = model(&src);
        let src = src.to_str().unwrap();
        let url = format!("s3://{}/cli/m.pdx", g.bucket());

        let out = run(g, secret, &["convert", src, &url], 0);
        assert!(String::from_utf8_lossy(&out.stdout).contains(&url));
        // There now: refused without --force, before anything is read; replaced with it.
        let out = run(g, secret, &["convert", src, &url], 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&url) && err.contains("--force"), "{err}");
        run(g, secret, &["convert", src, &url, "--force"], 0);

        // And back: the same tensors, and (native to native, same layout) the same bytes.
        let back = dir.path().join("back.pdx");
        run(g, secret, &["convert", &url, back.to_str().unwrap()], 0);
        let r = Reader::open(&back).unwrap();
        assert_eq!(r.len(), tensors.len() as u64);
        for (name, data) in &tensors {
            assert!(r.tensor(name).unwrap().data() == &data[..], "{name}");
        }
        assert!(std::fs::read(&back).unwrap() == std::fs::read(src).unwrap());

        // Another format: written locally, then uploaded; read back through the library.
        let st_url = format!("s3://{}/cli/m.safetensors", g.bucket());
        run(
            g,
            secret,
            &["convert", src, &st_url, "--to", "safetensors"],
            0,
        );
        let local_st = dir.path().join("m.safetensors");
        run(
            g,
            secret,
            &[
                "convert",
                src,
                local_st.to_str().unwrap(),
                "--to",
                "safetensors",
            ],
            0,
        );
        let got = read_object(g, &st_url);
        assert!(
            got == std::fs::read(&local_st).unwrap(),
            "uploaded safetensors differ"
        );

        // merge into an object: the inputs' tensors together, streamed the same way.
        let other = dir.path().join("other.pdx");
        let mut w = Writer::create(&other).unwrap();
        w.add("extra", Tensor::new(DType::UInt8, &[3], b"xyz"))
            .unwrap();
        w.finish().unwrap();
        let merged_url = format!("s3://{}/cli/merged.pdx", g.bucket());
        run(
            g,
            secret,
            &["merge", &merged_url, src, other.to_str().unwrap()],
            0,
        );
        run(g, secret, &["merge", &merged_url, src], 1);
        let merged = dir.path().join("merged.pdx");
        run(
            g,
            secret,
            &["convert", &merged_url, merged.to_str().unwrap()],
            0,
        );
        let r = Reader::open(&merged).unwrap();
        assert_eq!(r.len(), tensors.len() as u64 + 1);
        assert_eq!(r.tensor("extra").unwrap().data(), b"xyz");
        assert!(
            r.tensor("layer.embed").unwrap().data()
                == &tensors[..].iter().find(|t| t.0 == "layer.embed").unwrap().1[..]
        );

        // Refused credentials: an error naming the URL; nothing under the new name.
        let bad = "0000000000000000000000000000000000000000000000000000000000000000";
        let new_url = format!("s3://{}/cli/refused.pdx", g.bucket());
        let out = run(g, bad, &["convert", src, &new_url], 1);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&new_url), "{err}");
        let out = run(
            g,
            secret,
            &[
                "convert",
                &new_url,
                dir.path().join("x.pdx").to_str().unwrap(),
            ],
            1,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&new_url), "{err}");
    });
}

/// The whole object at `url`, read with the library (its own `AWS_*` configuration: set here,
/// in this test binary's one test).
fn read_object(g: &garage::Garage, url: &str) -> Vec<u8> {
    std::env::set_var("AWS_ACCESS_KEY_ID", g.access_key_id());
    std::env::set_var("AWS_SECRET_ACCESS_KEY", g.secret_access_key());
    std::env::set_var("AWS_REGION", g.region());
    std::env::set_var("AWS_ENDPOINT_URL", g.endpoint());
    std::env::set_var("AWS_ALLOW_HTTP", "true");
    let src = paramdex::remote::open_object(url, 1).unwrap();
    src.read(0..src.len()).unwrap()
}
