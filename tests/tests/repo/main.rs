//! The repository's own artefacts, checked where they are: the scripts' logic
//! (`scripts/debian-mirror`), and (issue 17) the generated CLI reference, the MCP
//! registry metadata (`release.rs`, the aarch64 release binary, is a test target of its
//! own: see tests/Cargo.toml).
//!
//! Table of contents:
//! - `mirror`: scripts/debian-mirror reads apt's sources as apt does
//! - `cli`: docs/cli.md is the binary's `--help` (drift test); shell completions
//! - `registry`: server.json validates against the MCP registry's schema and matches the binary

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod cli;
mod mirror;
mod registry;

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
