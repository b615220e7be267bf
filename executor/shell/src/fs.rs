//! File access of the shell, confined to the computer's root directory.
//!
//! Guest paths are resolved lexically against the current directory (`..` at `/` stays at
//! `/`), then opened relative to a `cap_std::fs::Dir` of the root: cap-std refuses any escape
//! (through `..` or symlinks pointing outside). `/dev/null`, `/dev/zero`, `/dev/stdin`,
//! `/dev/stdout`, `/dev/stderr` and `/dev/fd/N` are handled by the host, never opened.

use std::io;
use std::path::PathBuf;

use cap_std::fs::{Dir, Metadata, OpenOptions};

/// Joins `path` to `cwd` (both guest paths) and normalizes `.`/`..` lexically.
/// Returns an absolute guest path such as `/srv/x`.
pub(crate) fn resolve(cwd: &str, path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{cwd}/{path}")
    };
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The path relative to the root directory for cap-std (`.` for `/`).
pub(crate) fn rel(abs: &str) -> PathBuf {
    let t = abs.trim_start_matches('/');
    if t.is_empty() {
        PathBuf::from(".")
    } else {
        PathBuf::from(t)
    }
}

/// Special paths handled by the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Null,
    Zero,
    Fd(usize),
}

pub(crate) fn special(abs: &str) -> Option<Special> {
    match abs {
        "/dev/null" => Some(Special::Null),
        "/dev/zero" => Some(Special::Zero),
        "/dev/stdin" => Some(Special::Fd(0)),
        "/dev/stdout" => Some(Special::Fd(1)),
        "/dev/stderr" => Some(Special::Fd(2)),
        _ => abs
            .strip_prefix("/dev/fd/")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < 10)
            .map(Special::Fd),
    }
}

/// How a file is opened for a redirection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
    Append,
    ReadWrite,
}

pub(crate) fn open(root: &Dir, abs: &str, mode: Mode) -> io::Result<std::fs::File> {
    let mut o = OpenOptions::new();
    match mode {
        Mode::Read => {
            o.read(true);
        }
        Mode::Write => {
            o.write(true).create(true).truncate(true);
        }
        Mode::Append => {
            o.append(true).create(true);
        }
        Mode::ReadWrite => {
            o.read(true).write(true).create(true);
        }
    }
    let rel = rel(abs);
    if mode == Mode::Read {
        // Opening a directory for reading succeeds on Linux; report it like a shell would.
        if let Ok(m) = root.metadata(&rel)
            && m.is_dir()
        {
            return Err(io::Error::from(io::ErrorKind::IsADirectory));
        }
    }
    root.open_with(&rel, &o).map(cap_std::fs::File::into_std)
}

pub(crate) fn metadata(root: &Dir, abs: &str) -> io::Result<Metadata> {
    root.metadata(rel(abs))
}

pub(crate) fn symlink_metadata(root: &Dir, abs: &str) -> io::Result<Metadata> {
    if abs == "/" {
        return root.dir_metadata();
    }
    root.symlink_metadata(rel(abs))
}

pub(crate) fn is_dir(root: &Dir, abs: &str) -> bool {
    metadata(root, abs).map(|m| m.is_dir()).unwrap_or(false)
}

/// Reads a whole file (at most `limit` bytes).
pub(crate) fn read_file(root: &Dir, abs: &str, limit: u64) -> io::Result<Vec<u8>> {
    let f = open(root, abs, Mode::Read)?;
    let mut out = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(f, limit), &mut out)?;
    Ok(out)
}

/// Names in a directory (without `.` and `..`), unsorted.
pub(crate) fn list_dir(root: &Dir, abs: &str) -> Vec<String> {
    let rd = if abs == "/" {
        root.entries()
    } else {
        root.read_dir(rel(abs))
    };
    match rd {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A shell-style message for an I/O error (`No such file or directory`, ...).
pub(crate) fn err_msg(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "No such file or directory".into(),
        io::ErrorKind::PermissionDenied => "Permission denied".into(),
        io::ErrorKind::IsADirectory => "Is a directory".into(),
        io::ErrorKind::NotADirectory => "Not a directory".into(),
        io::ErrorKind::AlreadyExists => "File exists".into(),
        io::ErrorKind::ReadOnlyFilesystem => "Read-only file system".into(),
        io::ErrorKind::StorageFull => "No space left on device".into(),
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => "Invalid argument".into(),
        _ => {
            let s = e.to_string();
            // "a path led outside of the filesystem" and the like: an escape attempt.
            if s.contains("outside") {
                return "Permission denied".into();
            }
            match s.find(" (os error") {
                Some(i) => s.get(..i).unwrap_or(&s).to_owned(),
                None => s,
            }
        }
    }
}
