//! The protobuf messages (`proto/*.proto`) are compiled into Rust once and checked in under
//! `proto/generated/`, so that a crate depending on paramdex compiles neither a protobuf
//! compiler nor a code generator (about 29 crates). With the opt-in feature `regen-proto`
//! (`cargo build --features regen-proto`), this script regenerates them there from `proto/`:
//! protox (a pure-Rust protobuf compiler, no `protoc` on PATH) and prost-build.
//! `tests/proto_generated.rs` fails when the checked-in code differs from what they generate.

#[cfg(feature = "regen-proto")]
include!("proto/generate.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "regen-proto")]
    {
        for p in PROTOS {
            println!("cargo:rerun-if-changed=proto/{p}");
        }
        println!("cargo:rerun-if-changed=proto/generate.rs");
        let root = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
        generate_proto(&root.join("proto"), &root.join("proto/generated"))
            .expect("regenerating proto/generated from proto/*.proto");
    }
}
