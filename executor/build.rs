//! Embeds the static in-computer supervisor and the WASI toolbox when
//! `MSC_EMBED_SUPERVISOR` / `MSC_EMBED_TOOLBOX` name them, so the release is one binary.
//! Build them first (scripts/build does all of it):
//! `cargo build -p supervisor --release --target x86_64-unknown-linux-musl` and
//! `cargo build --release --target wasm32-wasip1` in `executor/toolbox`, then
//! `MSC_EMBED_SUPERVISOR=target/x86_64-unknown-linux-musl/release/msc-supervisor
//! MSC_EMBED_TOOLBOX=executor/toolbox/target/wasm32-wasip1/release/msc-toolbox.wasm cargo build --release`.
//! Without them the embedded copies are empty and the server looks for `msc-supervisor`
//! and `msc-toolbox.wasm` beside itself (or `--supervisor PATH`).
//!
//! Also generates Modal's gRPC client from `specs/modal` ([`modal_codegen`]).

use std::path::PathBuf;

#[path = "modal_codegen.rs"]
mod modal_codegen;

/// FNV-1a, 64 bits: the embedded toolbox's cache key, so the server never reads the
/// embedded bytes again once the compiled module is cached.
fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Copies the file named by `var` (checked by `magic`) to `OUT_DIR/name`, or writes an
/// empty file; returns the bytes.
fn embed(out_dir: &std::path::Path, var: &str, name: &str, magic: &[u8], how: &str) -> Vec<u8> {
    println!("cargo::rerun-if-env-changed={var}");
    let out = out_dir.join(name);
    let bytes = match std::env::var_os(var).filter(|p| !p.is_empty()) {
        Some(path) => {
            println!("cargo::rerun-if-changed={}", PathBuf::from(&path).display());
            match std::fs::read(&path) {
                Ok(b) if b.starts_with(magic) => b,
                Ok(_) => panic!("{var}={path:?} is not the expected file type"),
                Err(e) => panic!("{var}={path:?}: {e}; {how}"),
            }
        }
        None => Vec::new(),
    };
    if let Err(e) = std::fs::write(&out, &bytes) {
        panic!("writing {}: {e}", out.display());
    }
    bytes
}

fn main() {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("cargo did not set OUT_DIR");
    };
    embed(
        &out,
        "MSC_EMBED_SUPERVISOR",
        "msc-supervisor",
        b"\x7fELF",
        "build it with cargo build -p supervisor --release --target x86_64-unknown-linux-musl",
    );
    let toolbox = embed(
        &out,
        "MSC_EMBED_TOOLBOX",
        "msc-toolbox.wasm",
        b"\0asm",
        "build it with cargo build --release --target wasm32-wasip1 in executor/toolbox",
    );
    let key = out.join("msc-toolbox.key");
    if let Err(e) = std::fs::write(&key, format!("{:016x}", fnv64(&toolbox))) {
        panic!("writing {}: {e}", key.display());
    }
    // Modal's gRPC client, from the saved protos (specs/modal).
    // Read at run time: a build script compiled in another checkout may be reused here.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default();
    let protos = PathBuf::from(manifest).join("../specs/modal");
    if let Err(e) = modal_codegen::generate(&protos, &out, true, false) {
        panic!("generating the Modal client from {}: {e}", protos.display());
    }
}
