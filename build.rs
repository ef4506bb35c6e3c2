//! Compiles `proto/*.proto` with prost-build. The descriptors come from protox, a pure-Rust
//! protobuf compiler, so a fresh machine needs nothing but Cargo (no `protoc` on PATH).

fn main() {
    let protos = [
        "proto/tensorflow.proto",
        "proto/paramdex.proto",
        "proto/paddle_framework.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto/"]).expect("protox failed to compile proto/*.proto");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build failed to generate Rust code from the descriptors");
}
