//! File access of the shell, confined to the computer's root directory and its read-only
//! mounts (the base layer: `/etc`, `/bin`, `/usr/bin`, `/dev`, `/proc`).
//!
//! Guest paths are resolved lexically against the current directory (`..` at `/` stays at
//! `/`), then the longest mount prefix picks a `cap_std::fs::Dir` (the root when none
//! matches) and the rest is opened relative to it: cap-std refuses any escape (through
//! `..` or symlinks pointing outside). A write under a read-only mount fails with
//! "Read-only file system". `/dev/null`, `/dev/zero`, `/dev/stdin`, `/dev/stdout`,
//! `/dev/stderr` and `/dev/fd/N` are handled by the host, never opened.

use std::io;
use std::path::PathBuf;

use cap_std::fs::{Dir, Metadata, OpenOptions};

/// Joins `path` to `cwd` (both guest paths) and normalizes `.`/`..` lexically.
/// Returns an absolute guest path such as `/srv/x`. The executor's file tools resolve
/// paths with it too, so they meet the mounts the shell meets.
pub fn resolve(cwd: &str, path: &str) -> String {
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

/// The computer's files: the writable root and the read-only mounts over it.
pub(crate) struct Root {
    top: Dir,
    /// (guest path such as "/usr/bin", its directory), longest path first.
    mounts: Vec<(String, Dir)>,
}

impl Root {
    pub(crate) fn new(top: Dir, mut mounts: Vec<(String, Dir)>) -> Self {
        mounts.sort_by_key(|m| std::cmp::Reverse(m.0.len()));
        Self { top, mounts }
    }

    /// The directory holding `abs`, the path inside it, and whether it may be written.
    fn at(&self, abs: &str) -> (&Dir, PathBuf, bool) {
        for (guest, dir) in &self.mounts {
            if let Some(rest) = abs.strip_prefix(guest.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return (dir, rel(rest), false);
            }
        }
        (&self.top, rel(abs), true)
    }

    /// Is `abs` inside a read-only mount?
    pub(crate) fn read_only(&self, abs: &str) -> bool {
        !self.at(abs).2
    }

    /// The writable directory and relative path of `abs`, or a read-only error.
    pub(crate) fn writable(&self, abs: &str) -> io::Result<(&Dir, PathBuf)> {
        match self.at(abs) {
            (dir, rel, true) => Ok((dir, rel)),
            _ => Err(io::Error::from(io::ErrorKind::ReadOnlyFilesystem)),
        }
    }
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

/// How a file is opened for a redirection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
    Append,
    ReadWrite,
}

pub(crate) fn open(root: &Root, abs: &str, mode: Mode) -> io::Result<std::fs::File> {
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
    let (root, rel, writable) = root.at(abs);
    if mode != Mode::Read && !writable {
        return Err(io::Error::from(io::ErrorKind::ReadOnlyFilesystem));
    }
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

pub(crate) fn metadata(root: &Root, abs: &str) -> io::Result<Metadata> {
    let (dir, rel, _) = root.at(abs);
    if rel.as_os_str() == "." {
        return dir.dir_metadata();
    }
    dir.metadata(rel)
}

pub(crate) fn symlink_metadata(root: &Root, abs: &str) -> io::Result<Metadata> {
    let (dir, rel, _) = root.at(abs);
    if rel.as_os_str() == "." {
        return dir.dir_metadata();
    }
    dir.symlink_metadata(rel)
}

/// The target of the symbolic link `abs`.
pub(crate) fn read_link(root: &Root, abs: &str) -> io::Result<PathBuf> {
    let (dir, rel, _) = root.at(abs);
    dir.read_link_contents(rel)
}

/// Sets the permission bits of `abs` (a file or directory of the writable layer).
pub(crate) fn set_mode(root: &Root, abs: &str, mode: u32) -> io::Result<()> {
    use cap_std::fs::PermissionsExt;
    let (dir, rel) = root.writable(abs)?;
    let perms = cap_std::fs::Permissions::from_mode(mode);
    if rel.as_os_str() == "." {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    }
    dir.set_permissions(rel, perms)
}

pub(crate) fn is_dir(root: &Root, abs: &str) -> bool {
    metadata(root, abs).map(|m| m.is_dir()).unwrap_or(false)
}

/// Reads a whole file (at most `limit` bytes).
pub(crate) fn read_file(root: &Root, abs: &str, limit: u64) -> io::Result<Vec<u8>> {
    let f = open(root, abs, Mode::Read)?;
    let mut out = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(f, limit), &mut out)?;
    Ok(out)
}

/// Names in a directory (without `.` and `..`), unsorted.
pub(crate) fn list_dir(root: &Root, abs: &str) -> Vec<String> {
    let (dir, rel, _) = root.at(abs);
    let rd = if rel.as_os_str() == "." {
        dir.entries()
    } else {
        dir.read_dir(rel)
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
