// Shared by `build.rs` (feature `regen-proto`) and `tests/proto_generated.rs` (`include!`d by
// both, so that the code checked in and the code the test compares it with come from one
// recipe).

/// The `.proto` files under `proto/`, compiled together.
const PROTOS: [&str; 3] = [
    "tensorflow.proto",
    "paramdex.proto",
    "paddle_framework.proto",
];

/// Compiles `proto_dir`'s [`PROTOS`] with protox (a pure-Rust protobuf compiler: no `protoc`
/// on PATH) and writes prost-build's Rust code for them into `out_dir`, one file per protobuf
/// package (`tensorflow.rs`, `paramdex.rs`, `paddle.framework.proto.rs`).
fn generate_proto(
    proto_dir: &std::path::Path,
    out_dir: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let files: Vec<std::path::PathBuf> = PROTOS.iter().map(|p| proto_dir.join(p)).collect();
    let fds = protox::compile(&files, [proto_dir])?;
    prost_build::Config::new()
        .out_dir(out_dir)
        .compile_fds(fds)?;
    Ok(())
}
