//! The repository's own artefacts, checked where they are: the scripts' logic
//! (`scripts/debian-mirror`), and (issue 17) the generated CLI reference, the MCP
//! registry metadata and the release binaries.
//!
//! Table of contents:
//! - `mirror`: scripts/debian-mirror reads apt's sources as apt does

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod mirror;

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}
