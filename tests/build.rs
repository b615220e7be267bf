//! Generates the Modal simulator's gRPC server (and a client, for the benchmark's floor)
//! from the saved protos (`specs/modal`), with the same pruning as the executor's client
//! (`executor/modal_codegen.rs`).

#[path = "../executor/modal_codegen.rs"]
mod modal_codegen;

fn main() {
    let protos = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../specs/modal");
    let Some(out) = std::env::var_os("OUT_DIR").map(std::path::PathBuf::from) else {
        panic!("cargo did not set OUT_DIR");
    };
    if let Err(e) = modal_codegen::generate(&protos, &out, true, true) {
        panic!(
            "generating the Modal simulator from {}: {e}",
            protos.display()
        );
    }
}
