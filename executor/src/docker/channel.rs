//! The direct channel to a computer's supervisor: a unix socket in a per-computer host
//! directory, bind-mounted into the computer, so an exec never crosses the engine.
//!
//! Owns: making a computer's host directory (`<state-dir>/run/<id>.<random>`, 0700, named
//! in the label [`LABEL_CHANNEL`]), opening its socket safely, learning once per server
//! whether the channel works here, and removing directories whose computers are gone.
//!
//! Only the socket's name inside the directory is the computer's to change (root inside may
//! replace `sup.sock` with anything): it is opened `O_PATH | O_NOFOLLOW`, must be a socket,
//! and is connected through `/proc/self/fd`, so a symlink can never lead the server to
//! another computer's socket or to the engine's. A computer sees its own directory only;
//! the server listens on nothing in it. Wherever the channel cannot work (a server in a
//! container, whose paths are not the engine's; a user namespace that does not map the
//! directory's owner; an older supervisor), the relay exec serves instead.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::{FileType, Mode, OFlags};

/// Label naming a computer's host directory.
pub const LABEL_CHANNEL: &str = "mcp-sandbox.channel";
/// Where the host directory is mounted in a computer.
pub const MOUNT_TARGET: &str = "/run/msc-host";
/// The supervisor's socket there.
pub const SOCKET_IN_COMPUTER: &str = "/run/msc-host/sup.sock";
const SOCKET_NAME: &str = "sup.sock";

/// A host directory younger than this is never swept: its computer may be being created.
const SWEEP_GRACE: Duration = Duration::from_secs(120);

/// What this server has learnt about the channel.
#[derive(Debug, Default)]
pub struct Learnt(AtomicU8);

const UNKNOWN: u8 = 0;
const WORKS: u8 = 1;
const BROKEN: u8 = 2;

impl Learnt {
    /// Not known to be broken: new computers get a host directory.
    pub fn worth_trying(&self) -> bool {
        self.0.load(Ordering::Relaxed) != BROKEN
    }

    pub fn works(&self) {
        self.0.store(WORKS, Ordering::Relaxed);
    }

    /// The channel failed. If it never worked in this server, it is taken for broken here
    /// (said once) and new computers go without; if it did, only this computer relays.
    pub fn failed(&self, why: &str) {
        if self
            .0
            .compare_exchange(UNKNOWN, BROKEN, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracing::info!(
                why,
                "the direct supervisor channel does not work here; execs use the relay"
            );
        } else {
            tracing::debug!(why, "the direct supervisor channel failed for one computer");
        }
    }
}

/// Makes a fresh host directory for computer `id` under `base`.
pub fn make_dir(base: &Path, id: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(base)?;
    // The base too: it may have been made by an older umask.
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))?;
    let name = format!("{}.{:016x}", safe_name(id), rand::random::<u64>());
    let dir = base.join(name);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// `id` as one path component (ids are validated, team keys may hold other characters).
fn safe_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect()
}

/// The host directory a label names, if it is one of ours: directly under `base`, with no
/// `..` or other tricks. Anything else is relayed.
pub fn dir_from_label(base: &Path, label: &str) -> Option<PathBuf> {
    let dir = Path::new(label);
    let mut parts = dir.strip_prefix(base).ok()?.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(_)), None) => Some(dir.to_owned()),
        _ => None,
    }
}

/// Why the socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no socket yet at {0}")]
    Missing(PathBuf),
    #[error("{0} is not a socket")]
    NotASocket(PathBuf),
    #[error("cannot reach {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Connects to the supervisor's socket in `dir`, never following what the computer put there.
pub async fn connect(dir: &Path) -> Result<tokio::net::UnixStream, OpenError> {
    let path = dir.join(SOCKET_NAME);
    let io = |source: std::io::Error| OpenError::Io {
        path: path.clone(),
        source,
    };
    let fd = match rustix::fs::open(
        path.as_path(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Err(OpenError::Missing(path)),
        Err(e) => return Err(io(e.into())),
    };
    // O_PATH with O_NOFOLLOW opens a symlink itself: it fails this test like a file does.
    let stat = rustix::fs::fstat(&fd).map_err(|e| io(e.into()))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Socket {
        return Err(OpenError::NotASocket(path));
    }
    use std::os::fd::AsRawFd;
    let pinned = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let stream = tokio::net::UnixStream::connect(&pinned).await;
    drop(fd);
    match stream {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(OpenError::Missing(path))
        }
        Err(e) => Err(io(e)),
    }
}

/// Connects, waiting a little for a supervisor that is still starting.
pub async fn connect_soon(dir: &Path) -> Result<tokio::net::UnixStream, OpenError> {
    let mut tries = 0;
    loop {
        match connect(dir).await {
            Err(OpenError::Missing(_)) if tries < 40 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
}

/// Removes a computer's host directory (best effort: it holds only the socket).
pub fn remove_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot remove a channel directory");
    }
}

/// Removes host directories under `base` that no computer names (`in_use`) and that are
/// older than a creation takes: those of computers removed while no server watched.
pub fn sweep(base: &Path, in_use: &[PathBuf]) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > SWEEP_GRACE);
        if old && !in_use.contains(&path) {
            remove_dir(&path);
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_directory_directly_under_the_base_is_ours() {
        let base = Path::new("/state/run");
        assert_eq!(
            dir_from_label(base, "/state/run/a.0123"),
            Some(PathBuf::from("/state/run/a.0123"))
        );
        assert_eq!(dir_from_label(base, "/state/run"), None);
        assert_eq!(dir_from_label(base, "/state/run/a/b"), None);
        assert_eq!(dir_from_label(base, "/state/run/../etc"), None);
        assert_eq!(dir_from_label(base, "/var/run/docker.sock"), None);
        assert_eq!(dir_from_label(base, "relative"), None);
        assert_eq!(safe_name("team~key/../x"), "team_key____x");
    }

    #[tokio::test]
    async fn a_symlink_or_a_file_is_never_connected() {
        let base = std::env::temp_dir().join(format!("msc-channel-{}", std::process::id()));
        let dir = make_dir(&base, "one").unwrap();
        let other = make_dir(&base, "two").unwrap();
        assert!(matches!(connect(&dir).await, Err(OpenError::Missing(_))));
        // A real socket elsewhere, and a symlink to it where ours should be.
        let target = other.join(SOCKET_NAME);
        let _listener = std::os::unix::net::UnixListener::bind(&target).unwrap();
        std::os::unix::fs::symlink(&target, dir.join(SOCKET_NAME)).unwrap();
        assert!(matches!(connect(&dir).await, Err(OpenError::NotASocket(_))));
        std::fs::remove_file(dir.join(SOCKET_NAME)).unwrap();
        std::fs::write(dir.join(SOCKET_NAME), b"x").unwrap();
        assert!(matches!(connect(&dir).await, Err(OpenError::NotASocket(_))));
        // The real one connects, through the pinned descriptor.
        assert!(connect(&other).await.is_ok());
        // Nothing old: nothing swept. Then the directories go.
        assert_eq!(sweep(&base, &[]), 0);
        remove_dir(&dir);
        remove_dir(&other);
        assert!(!dir.exists() && !other.exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
