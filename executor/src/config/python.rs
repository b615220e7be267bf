//! The CPython WASI module behind `python3` on toolbox computers: `--wasm-python PATH`, or
//! `python.wasm` in the state directory, checked at start-up to be WebAssembly.

use std::path::{Path, PathBuf};

/// The file name of the CPython module looked for in the state directory.
pub const PYTHON_IN_STATE_DIR: &str = "python.wasm";

/// Why a file is not a WebAssembly module.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotWasm {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not a file")]
    NotAFile,
    #[error("too short to be a WebAssembly module")]
    TooShort,
    #[error("not a WebAssembly module (no \\0asm magic)")]
    NoMagic,
}

/// Is `path` a WebAssembly module (a file that starts with `\0asm`)?
pub(super) fn check(path: &Path) -> Result<(), NotWasm> {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let mut f = std::fs::File::open(path)?;
    if !f.metadata()?.is_file() {
        return Err(NotWasm::NotAFile);
    }
    f.read_exact(&mut magic).map_err(|_| NotWasm::TooShort)?;
    if &magic != b"\0asm" {
        return Err(NotWasm::NoMagic);
    }
    Ok(())
}

/// `<state_dir>/python.wasm` when it is there and WebAssembly; one that is not is skipped
/// with a warning.
pub(super) fn in_state_dir(state_dir: &Path) -> Option<PathBuf> {
    let found = state_dir.join(PYTHON_IN_STATE_DIR);
    if !found.exists() {
        return None;
    }
    match check(&found) {
        Ok(()) => Some(found),
        Err(why) => {
            tracing::warn!(path = %found.display(), %why, "ignoring the python module in the state directory");
            None
        }
    }
}
