//! Issue 17: `scripts/release` builds a static aarch64 binary (cross-linked with Debian's
//! gcc-aarch64-linux-gnu) that is a valid ELF of that architecture, with no interpreter and
//! no shared libraries, next to a SHA256SUMS that checks it. (x86_64's static musl build is
//! already checked by the image test, `tests/e2e/image.rs`, which runs it.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::path::PathBuf;
use std::process::Command;

fn tool(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn issue_17_the_aarch64_release_binary_is_a_static_aarch64_elf() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let out = std::env::temp_dir().join(format!("msc-release-{}", std::process::id()));
    let status = Command::new(root.join("scripts/release"))
        .arg("aarch64-unknown-linux-musl")
        .env("MSC_RELEASE_DIR", &out)
        .env("MSC_RELEASE_PARTS", "")
        .status()
        .unwrap();
    assert!(status.success(), "scripts/release failed");
    let bin = out.join("mcp-sandbox-computer-vm-for-ai-aarch64-unknown-linux-musl");
    let path = bin.to_str().unwrap();

    let file = tool("file", &["-b", path]);
    assert!(file.starts_with("ELF 64-bit LSB"), "{file}");
    assert!(file.contains("ARM aarch64"), "{file}");
    assert!(
        file.contains("statically linked") || file.contains("static-pie linked"),
        "{file}"
    );
    let header = tool("readelf", &["-h", path]);
    assert!(header.contains("AArch64"), "{header}");
    let segments = tool("readelf", &["-lW", path]);
    assert!(
        !segments.contains("INTERP"),
        "a dynamic loader is named: {segments}"
    );
    let dynamic = tool("readelf", &["-dW", path]);
    assert!(
        !dynamic.contains("(NEEDED)"),
        "shared libraries needed: {dynamic}"
    );
    // The embedded supervisor is aarch64 too (computers run on the engine's architecture).
    let bytes = std::fs::read(&bin).unwrap();
    let magic = b"\x7fELF\x02\x01\x01";
    let nested: Vec<u8> = (1..bytes.len().saturating_sub(20))
        .filter(|&i| bytes[i..].starts_with(magic))
        .map(|i| bytes[i + 18])
        .collect();
    assert!(!nested.is_empty(), "no supervisor embedded");
    assert!(
        nested.iter().all(|&m| m == 0xb7),
        "e_machine of embedded ELFs: {nested:x?}"
    );

    let sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    assert!(
        sums.contains("mcp-sandbox-computer-vm-for-ai-aarch64-unknown-linux-musl"),
        "{sums}"
    );
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&out)
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    std::fs::remove_dir_all(&out).unwrap();
}
