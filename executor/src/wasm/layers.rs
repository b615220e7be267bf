//! What the file tools see of a WASM computer: its writable `fs/` and, over it, the
//! read-only base layer (`/etc`, `/bin`, `/usr/bin`, `/proc`, `/dev`) exactly as the host
//! shell mounts it ([`super::base::mounts`]), so `computer_file_read /etc/os-release`
//! reads what `cat /etc/os-release` prints (issue 46).
//!
//! A path is matched to a mount as the shell does it: resolved lexically (`..` at `/`
//! stays at `/`), then the longest mount prefix wins. A read under a mount reads the
//! mount's file (through cap-std, so nothing leaves it); `/dev` holds devices the shell
//! serves, not files, and is refused like a device on Docker. A write, an append or an
//! edit under a mount is refused, changing nothing, as the shell's `>` is (`Read-only
//! file system`).

use std::path::PathBuf;

use super::WasmError;
use super::engine::Mount;

/// The read-only mounts over a computer's writable layer, longest guest path first.
pub(super) struct Layers {
    mounts: Vec<Mount>,
}

/// Where a path under a read-only mount lives.
pub(super) struct OnMount<'a> {
    /// The mount's guest path (`/etc`).
    pub guest: &'a str,
    /// The mount's host directory.
    pub host: &'a PathBuf,
    /// The path inside the mount, relative (empty: the mount itself).
    pub rel: String,
}

impl Layers {
    pub(super) fn new(mounts: Vec<Mount>) -> Self {
        let mut mounts: Vec<Mount> = mounts.into_iter().filter(|m| !m.writable).collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.guest.len()));
        Self { mounts }
    }

    /// The mount `path` is under, if any (the shell's rule: lexical, longest prefix).
    pub(super) fn at(&self, path: &str) -> Option<OnMount<'_>> {
        let abs = msc_shell::resolve("/", path);
        self.mounts.iter().find_map(|m| {
            let guest = m.guest.trim_end_matches('/');
            let rest = abs.strip_prefix(guest)?;
            (rest.is_empty() || rest.starts_with('/')).then(|| OnMount {
                guest,
                host: &m.host,
                rel: rest.trim_start_matches('/').to_owned(),
            })
        })
    }

    /// Refuses a write to `path` when it is under a read-only mount.
    pub(super) fn check_writable(&self, path: &str) -> Result<(), WasmError> {
        match self.at(path) {
            Some(m) => Err(read_only(path, m.guest)),
            None => Ok(()),
        }
    }
}

/// The refusal of a write under the read-only mount `guest`.
pub(super) fn read_only(path: &str, guest: &str) -> WasmError {
    WasmError::File(format!(
        "{path} is in the computer's read-only base layer ({guest}; /etc, /bin, /usr/bin, /proc and /dev are read-only on a WebAssembly computer, and its shell says `Read-only file system` too): nothing changed; write under /home, /root, /tmp or another path"
    ))
}

/// The refusal of a read under `/dev`.
pub(super) fn device(path: &str) -> WasmError {
    WasmError::File(format!(
        "{path} is a device, not a regular file; the file tools read regular files (use terminal_execute to read a device)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers() -> Layers {
        let m = |guest: &str, writable: bool| Mount {
            host: PathBuf::from(format!("/host{guest}")),
            guest: guest.into(),
            writable,
        };
        Layers::new(vec![
            m("/", true),
            m("/etc", false),
            m("/usr/bin", false),
            m("/bin", false),
            m("/dev", false),
        ])
    }

    #[test]
    fn issue_46_paths_meet_the_mounts_the_shell_sees() {
        let l = layers();
        let at = |p: &str| l.at(p).map(|m| (m.guest.to_owned(), m.rel));
        assert_eq!(
            at("/etc/os-release"),
            Some(("/etc".into(), "os-release".into()))
        );
        assert_eq!(
            at("/tmp/../etc/hosts"),
            Some(("/etc".into(), "hosts".into()))
        );
        assert_eq!(
            at("/../../usr/bin/ls"),
            Some(("/usr/bin".into(), "ls".into()))
        );
        assert_eq!(at("/etc"), Some(("/etc".into(), String::new())));
        assert_eq!(at("/etcetera/x"), None);
        assert_eq!(at("/usr/local/bin/x"), None);
        assert_eq!(at("/home/etc/x"), None);
        assert!(l.check_writable("/tmp/x").is_ok());
        let e = l.check_writable("/etc/passwd").unwrap_err().to_string();
        assert!(
            e.contains("read-only base layer") && e.contains("nothing changed"),
            "{e}"
        );
    }
}
