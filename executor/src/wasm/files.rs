//! Files on WebAssembly computers (SPEC §3.9): straight on the computer's `fs/`
//! directory, through cap-std, so no path (`..`, an absolute or relative symlink) reaches
//! outside it.
//!
//! A replace writes a temporary file beside the target, syncs it and renames it over the
//! target (`create_only`: a hard link, which fails when the name exists, so the check is
//! atomic), so a failed write leaves the old file. Appends sync, then hash the whole file.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use cap_std::fs::{Dir, MetadataExt, OpenOptions, Permissions, PermissionsExt};
use shared::files::{DEFAULT_MODE, Digest, Sha256, hex};

use super::{Wasm, WasmError};
use crate::spec::{FileSlice, FileWriteSpec, FileWritten};

/// What a write needs, owned (it runs on a blocking thread).
struct Upload {
    path: String,
    data: Vec<u8>,
    append: bool,
    create_only: bool,
    mode: Option<u32>,
    make_dirs: bool,
}

impl Wasm {
    /// The computer's root, or "no such computer".
    fn root_of(&self, id: &str) -> Result<std::path::PathBuf, WasmError> {
        let fs = self.computer_dir(id).join("fs");
        if !fs.is_dir() {
            return Err(WasmError::NotFound(id.to_owned()));
        }
        Ok(fs)
    }

    pub async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, WasmError> {
        let fs = self.root_of(id)?;
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || read(&fs, &path, offset, length))
            .await
            .map_err(|e| WasmError::Storage(e.to_string()))?
    }

    pub async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, WasmError> {
        let fs = self.root_of(id)?;
        let w = Upload {
            path: spec.path.to_owned(),
            data: spec.data.to_vec(),
            append: spec.append,
            create_only: spec.create_only,
            mode: spec.mode,
            make_dirs: spec.make_dirs,
        };
        tokio::task::spawn_blocking(move || write(&fs, &w))
            .await
            .map_err(|e| WasmError::Storage(e.to_string()))?
    }
}

/// An I/O error on `path`, in words for the agent.
fn refused(path: &str, e: &io::Error, make_dirs_hint: bool) -> WasmError {
    match e.kind() {
        io::ErrorKind::NotFound if make_dirs_hint => WasmError::NoSuchFile(format!(
            "{path}: a parent directory does not exist; pass make_dirs: true to create it"
        )),
        io::ErrorKind::NotFound => WasmError::NoSuchFile(format!(
            "{path} does not exist on this computer (list its directory with terminal_execute: ls)"
        )),
        io::ErrorKind::IsADirectory => WasmError::File(format!(
            "{path} is a directory; name a file inside it (list it with terminal_execute: ls)"
        )),
        io::ErrorKind::NotADirectory => WasmError::File(format!(
            "{path}: a component of the path is a file, not a directory"
        )),
        io::ErrorKind::AlreadyExists => WasmError::File(format!(
            "{path} already exists and `create_only` is set: nothing changed"
        )),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => WasmError::File(format!(
            "{path}: the computer's disk is full: nothing was written; free space and try again"
        )),
        io::ErrorKind::ReadOnlyFilesystem => {
            WasmError::File(format!("{path} is on a read-only filesystem"))
        }
        // cap-std's answer to a path (or symlink) that leads outside the computer.
        io::ErrorKind::PermissionDenied => WasmError::File(format!(
            "{path}: permission denied, or the path (through a symlink or ..) leads outside the computer"
        )),
        _ => WasmError::File(format!("{path}: {e}")),
    }
}

/// `path` relative to the computer's root, and its parent and file name.
fn split(path: &str) -> (&str, &str, &str) {
    let rel = path.trim_start_matches('/').trim_end_matches('/');
    match rel.rsplit_once('/') {
        Some((parent, name)) => (rel, parent, name),
        None => (rel, "", rel),
    }
}

fn open_root(fs: &Path) -> Result<Dir, WasmError> {
    Dir::open_ambient_dir(fs, cap_std::ambient_authority())
        .map_err(|e| WasmError::Storage(e.to_string()))
}

fn read(fs: &Path, path: &str, offset: u64, length: u64) -> Result<FileSlice, WasmError> {
    let root = open_root(fs)?;
    let (rel, _, _) = split(path);
    let mut file = root.open(rel).map_err(|e| refused(path, &e, false))?;
    let md = file.metadata().map_err(|e| refused(path, &e, false))?;
    if md.is_dir() {
        return Err(refused(
            path,
            &io::Error::from(io::ErrorKind::IsADirectory),
            false,
        ));
    }
    if !md.is_file() {
        return Err(WasmError::File(format!(
            "{path} is not a regular file (a device, socket or pipe)"
        )));
    }
    let size = md.len();
    let mut data = Vec::new();
    if offset < size {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| refused(path, &e, false))?;
        let want = length.min(size - offset);
        data.reserve(usize::try_from(want).unwrap_or(0));
        (&mut file)
            .take(want)
            .read_to_end(&mut data)
            .map_err(|e| refused(path, &e, false))?;
    }
    Ok(FileSlice {
        size,
        offset,
        data,
        mode: md.mode() & 0o7777,
        mtime_secs: md.mtime(),
    })
}

fn write(fs: &Path, w: &Upload) -> Result<FileWritten, WasmError> {
    let root = open_root(fs)?;
    let (_, parent, name) = split(&w.path);
    if w.make_dirs && !parent.is_empty() {
        root.create_dir_all(parent)
            .map_err(|e| refused(&w.path, &e, false))?;
    }
    let dir = if parent.is_empty() {
        root.try_clone()
            .map_err(|e| WasmError::Storage(e.to_string()))?
    } else {
        root.open_dir(parent)
            .map_err(|e| refused(&w.path, &e, !w.make_dirs))?
    };
    if dir.is_dir(name) {
        return Err(refused(
            &w.path,
            &io::Error::from(io::ErrorKind::IsADirectory),
            false,
        ));
    }
    if w.append {
        return append(&dir, name, w);
    }
    let tmp = format!(".{name}.msc-{:08x}.tmp", rand::random::<u32>());
    let result = (|| -> io::Result<()> {
        let mut f = dir.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
        f.write_all(&w.data)?;
        f.set_permissions(Permissions::from_mode(w.mode.unwrap_or(DEFAULT_MODE)))?;
        f.sync_all()?;
        if w.create_only {
            // A link fails when the name exists: the check and the write are one step.
            dir.hard_link(&tmp, &dir, name)?;
            dir.remove_file(&tmp)
        } else {
            dir.rename(&tmp, &dir, name)
        }
    })();
    if let Err(e) = result {
        let _ = dir.remove_file(&tmp);
        return Err(refused(&w.path, &e, false));
    }
    Ok(FileWritten {
        size: w.data.len() as u64,
        sha256: hex(&Sha256::digest(&w.data)),
    })
}

fn append(dir: &Dir, name: &str, w: &Upload) -> Result<FileWritten, WasmError> {
    let existed = dir.exists(name);
    let mut opts = OpenOptions::new();
    opts.append(true);
    if w.create_only {
        opts.create_new(true);
    } else {
        opts.create(true);
    }
    let fail = |e: io::Error| refused(&w.path, &e, false);
    let mut f = dir.open_with(name, &opts).map_err(fail)?;
    if !existed || w.mode.is_some() {
        f.set_permissions(Permissions::from_mode(w.mode.unwrap_or(DEFAULT_MODE)))
            .map_err(fail)?;
    }
    f.write_all(&w.data).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    drop(f);
    let mut f = dir.open(name).map_err(fail)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(fail)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(FileWritten {
        size,
        sha256: hex(&hasher.finalize()),
    })
}
