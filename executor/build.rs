//! Embeds the static in-computer supervisor when `MSC_EMBED_SUPERVISOR` names it, so the
//! release is one binary. Build it first:
//! `cargo build -p supervisor --release --target x86_64-unknown-linux-musl`, then
//! `MSC_EMBED_SUPERVISOR=target/x86_64-unknown-linux-musl/release/msc-supervisor cargo build --release`.
//! Without it the embedded copy is empty and the server looks for `msc-supervisor` beside
//! itself (or `--supervisor PATH`).

use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-env-changed=MSC_EMBED_SUPERVISOR");
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        panic!("cargo did not set OUT_DIR");
    };
    let out = out.join("msc-supervisor");
    let bytes = match std::env::var_os("MSC_EMBED_SUPERVISOR").filter(|p| !p.is_empty()) {
        Some(path) => {
            println!("cargo::rerun-if-changed={}", PathBuf::from(&path).display());
            match std::fs::read(&path) {
                Ok(b) if b.starts_with(b"\x7fELF") => b,
                Ok(_) => panic!("MSC_EMBED_SUPERVISOR={path:?} is not an ELF binary"),
                Err(e) => panic!(
                    "MSC_EMBED_SUPERVISOR={path:?}: {e}; build it with cargo build -p supervisor --release --target x86_64-unknown-linux-musl"
                ),
            }
        }
        None => Vec::new(),
    };
    if let Err(e) = std::fs::write(&out, bytes) {
        panic!("writing {}: {e}", out.display());
    }
}
