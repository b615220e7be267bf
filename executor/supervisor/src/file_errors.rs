//! Why a file request failed, in words for the agent: errnos classified into
//! [`FileErrorKind`]s, each with what to do next.

use std::path::Path;

use rustix::io::Errno;

use crate::frame::{FileErrorKind, FileFailure};

/// What an operation was doing when it failed (it shapes the advice).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

pub(crate) fn failure(kind: FileErrorKind, message: String) -> FileFailure {
    FileFailure { kind, message }
}

/// Classifies `errno` on `path`, with advice for the agent.
pub(crate) fn classify(errno: Errno, path: &str, op: Op) -> FileFailure {
    let (kind, message) = match errno {
        Errno::NOENT if op == Op::Read => (
            FileErrorKind::NotFound,
            format!(
                "{path} does not exist; check the path (list its directory with terminal_execute ls)"
            ),
        ),
        Errno::NOENT => (
            FileErrorKind::NotFound,
            format!(
                "the directory of {path} does not exist; pass make_dirs: true to create parent directories"
            ),
        ),
        Errno::ISDIR if op == Op::Read => (
            FileErrorKind::IsDir,
            format!("{path} is a directory; read a file, or list it with terminal_execute ls"),
        ),
        Errno::ISDIR => (
            FileErrorKind::IsDir,
            format!("{path} is a directory; write to a file path (e.g. one inside it)"),
        ),
        Errno::NOTDIR => (
            FileErrorKind::NotDir,
            format!("a parent of {path} is not a directory; check the path"),
        ),
        Errno::EXIST => (
            FileErrorKind::Exists,
            format!(
                "{path} already exists and create_only is set; nothing changed (drop create_only to replace it)"
            ),
        ),
        Errno::ROFS => (
            FileErrorKind::ReadOnly,
            format!(
                "{path} is on a read-only file system; write under a writable directory such as /tmp"
            ),
        ),
        Errno::NOSPC | Errno::DQUOT => (
            FileErrorKind::NoSpace,
            format!(
                "no space left for {path} (disk or quota full); nothing changed: free space (e.g. remove files with terminal_execute) and write again"
            ),
        ),
        Errno::ACCESS | Errno::PERM => (
            FileErrorKind::Permission,
            format!(
                "permission denied on {path}; choose another path, or change permissions with terminal_execute chmod"
            ),
        ),
        other => (
            FileErrorKind::Io,
            format!("{path}: {}", std::io::Error::from(other)),
        ),
    };
    failure(kind, message)
}

/// A failure to create a file in `dir`: `ENOENT` when `dir` exists means the file system
/// takes no new files there (e.g. /proc), not a missing directory.
pub(crate) fn create_failure(e: Errno, path: &str, dir: &Path) -> FileFailure {
    if e == Errno::NOENT && dir.is_dir() {
        return failure(
            FileErrorKind::Io,
            format!(
                "{} does not take new files (a virtual file system?); write under a regular directory such as /tmp",
                dir.display()
            ),
        );
    }
    classify(e, path, Op::Write)
}

pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_io_error(e).unwrap_or(Errno::IO)
}

pub(crate) fn not_regular(path: &str) -> FileFailure {
    failure(
        FileErrorKind::Io,
        format!(
            "{path} is not a regular file (a device, socket or pipe); the file tools read and write regular files"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_are_classified_with_advice() {
        let f = classify(Errno::NOENT, "/a/b", Op::Write);
        assert_eq!(f.kind, FileErrorKind::NotFound);
        assert!(f.message.contains("make_dirs"));
        assert_eq!(
            classify(Errno::ISDIR, "/a", Op::Read).kind,
            FileErrorKind::IsDir
        );
        assert_eq!(
            classify(Errno::DQUOT, "/a", Op::Write).kind,
            FileErrorKind::NoSpace
        );
        assert_eq!(
            classify(Errno::ROFS, "/a", Op::Write).kind,
            FileErrorKind::ReadOnly
        );
        assert_eq!(
            classify(Errno::PERM, "/a", Op::Write).kind,
            FileErrorKind::Permission
        );
        assert_eq!(classify(Errno::IO, "/a", Op::Write).kind, FileErrorKind::Io);
    }
}
