//! The direct channel to a computer's supervisor: a unix socket in a per-computer host
//! directory, bind-mounted into the computer read-only, so an exec never crosses the engine.
//!
//! Owns: making a computer's host directory (`<state-dir>/run/<id>.<random>`, 0700, named
//! in the label [`LABEL_CHANNEL`]), handing its listening socket to the supervisor, opening
//! that socket safely, learning once per server whether the channel works here, and
//! removing directories whose computers are gone.
//!
//! The computer cannot write in its host directory: the mount is read-only, so no file,
//! device node, setuid binary or byte of data of the computer's lands on the host through
//! it. The server binds the listening socket `sup.sock` itself and hands it over through a
//! door ([`Door`]): it binds `door.sock` beside it, the supervisor (which watches the
//! directory) connects (connecting needs no write access), and the server checks that the
//! peer is the computer's PID 1 and sends the listener with `SCM_RIGHTS`; then the door
//! goes. The supervisor keeps the listener for its life, so later servers connect to
//! `sup.sock` as they find it; one that finds nothing listening (the computer or its engine
//! restarted) hands over a new one. A directory is locked (`flock`) while it is being made
//! or armed, so a sweep never takes one whose container does not exist yet.
//!
//! Computers made by older servers bound `sup.sock` themselves in a writable directory, so
//! the socket is still opened as hostile input: `O_PATH | O_NOFOLLOW`, it must be a socket,
//! and it is connected through `/proc/self/fd`, so a symlink can never lead the server to
//! another computer's socket or to the engine's. A computer sees its own directory only.
//! Wherever the channel cannot work (a server in a container, whose paths are not the
//! engine's; a user namespace that cannot reach the server's socket; an older supervisor),
//! the relay exec serves instead.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};

/// Label naming a computer's host directory.
pub const LABEL_CHANNEL: &str = "mcp-sandbox.channel";
/// Where the host directory is mounted in a computer.
pub const MOUNT_TARGET: &str = "/run/msc-host";
/// The door the supervisor takes its listener through, there.
pub const DOOR_IN_COMPUTER: &str = "/run/msc-host/door.sock";
const SOCKET_NAME: &str = "sup.sock";
const DOOR_NAME: &str = "door.sock";
/// Where the door is bound before it is renamed to [`DOOR_NAME`]: the supervisor, woken by
/// the name appearing, must find a socket that listens already (a bound socket refuses
/// connections until `listen`, and no event says when that happened).
const DOOR_NEW: &str = ".door.new";

/// How long arming waits for another server arming the same directory.
const LOCK_WAIT: Duration = Duration::from_secs(3);

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

/// A host directory and the lock that keeps sweeps away from it while it is held.
#[derive(Debug)]
pub struct Held {
    pub dir: PathBuf,
    _lock: OwnedFd,
}

/// Makes a fresh host directory for computer `id` under `base`, locked until the returned
/// [`Held`] is dropped (after its container exists, whose label then keeps it).
pub fn make_dir(base: &Path, id: &str) -> std::io::Result<Held> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(base)?;
    // The base too: it may have been made by an older umask.
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))?;
    let mut tries = 0;
    loop {
        let name = format!("{}.{:016x}", safe_name(id), rand::random::<u64>());
        let dir = base.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        // A sweep may have locked (and removed) it between the mkdir and here: take another.
        match lock(&dir)? {
            Some(lock) => return Ok(Held { dir, _lock: lock }),
            None if tries < 4 => tries += 1,
            None => return Err(std::io::Error::other("every new directory was taken")),
        }
    }
}

/// Locks `dir` exclusively without waiting: `None` when another holds it, or when it was
/// removed meanwhile.
fn lock(dir: &Path) -> std::io::Result<Option<OwnedFd>> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // Removed while we waited for it: a directory's link count is then 0.
    let gone = rustix::fs::fstat(&fd)?.st_nlink == 0;
    Ok((!gone).then_some(fd))
}

/// [`lock`], waiting up to [`LOCK_WAIT`] for another holder.
fn lock_waiting(dir: &Path) -> Result<OwnedFd, DoorError> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match lock(dir) {
            Ok(Some(fd)) => return Ok(fd),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => return Err(DoorError::Busy),
            Err(source) => return Err(DoorError::Io("lock the directory", source)),
        }
    }
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

/// Why a listener could not be handed to a supervisor.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    #[error("another server is arming this computer's channel")]
    Busy,
    #[error("cannot {0} in the host directory: {1}")]
    Io(&'static str, #[source] std::io::Error),
    #[error("the supervisor did not come to the door within {0:?}")]
    Timeout(Duration),
    #[error("the computer is not running")]
    NotRunning,
}

impl DoorError {
    /// Worth another try later, on this computer (a supervisor slow to come on a loaded
    /// host, another server arming it): not a sign that the channel cannot work here.
    pub fn is_transient(&self) -> bool {
        matches!(self, DoorError::Timeout(_) | DoorError::Busy)
    }
}

/// A listening socket for the supervisor and the door it takes it through, bound in a
/// host directory (locked meanwhile). Dropping it closes the door.
#[derive(Debug)]
pub struct Door {
    door_path: PathBuf,
    listener: std::os::unix::net::UnixListener,
    door: std::os::unix::net::UnixListener,
    _lock: OwnedFd,
}

/// Binds a fresh `sup.sock` (0600, this server's) and its door in `dir`, replacing what
/// was there (blocking: it may wait for another server arming the same directory).
pub fn open_door(dir: &Path) -> Result<Door, DoorError> {
    use std::os::unix::fs::PermissionsExt;
    let lock = lock_waiting(dir)?;
    let bind = |name: &str| {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(DoorError::Io("clear the old socket", e));
            }
            _ => {}
        }
        let l = std::os::unix::net::UnixListener::bind(&path)
            .map_err(|e| DoorError::Io("bind a socket", e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| DoorError::Io("set a socket's mode", e))?;
        Ok((path, l))
    };
    let (_, listener) = bind(SOCKET_NAME)?;
    let (new_path, door) = bind(DOOR_NEW)?;
    let door_path = dir.join(DOOR_NAME);
    if let Err(e) = std::fs::rename(&new_path, &door_path) {
        let _ = std::fs::remove_file(&new_path);
        return Err(DoorError::Io("open the door", e));
    }
    Ok(Door {
        door_path,
        listener,
        door,
        _lock: lock,
    })
}

impl Door {
    /// Waits up to `within` for the supervisor (host pid `supervisor_pid`) at the door and
    /// hands it the listener. Anyone else who comes is hung up on.
    pub async fn hand_over(self, supervisor_pid: i32, within: Duration) -> Result<(), DoorError> {
        let io = |what| move |e| DoorError::Io(what, e);
        let door = self.door.try_clone().map_err(io("use the door"))?;
        door.set_nonblocking(true).map_err(io("use the door"))?;
        let door = tokio::net::UnixListener::from_std(door).map_err(io("use the door"))?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (stream, _) = tokio::time::timeout_at(deadline, door.accept())
                .await
                .map_err(|_| DoorError::Timeout(within))?
                .map_err(io("accept at the door"))?;
            let peer = stream.peer_cred().ok().and_then(|c| c.pid());
            if peer != Some(supervisor_pid) {
                tracing::debug!(?peer, supervisor_pid, "hung up on a stranger at the door");
                continue;
            }
            let stream = stream.into_std().map_err(io("use the door"))?;
            stream.set_nonblocking(false).map_err(io("use the door"))?;
            return send_fd(&stream, self.listener.as_fd()).map_err(io("hand over the socket"));
        }
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.door_path);
    }
}

/// Sends `fd` over `stream` (`SCM_RIGHTS`, with one byte of data to carry it).
fn send_fd(
    stream: &std::os::unix::net::UnixStream,
    fd: std::os::fd::BorrowedFd<'_>,
) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the descriptor"));
    }
    rustix::net::sendmsg(
        stream,
        &[std::io::IoSlice::new(b"L")],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Removes a computer's host directory (best effort). Blocking: what a computer of an
/// older server wrote there may be large; call it through [`remove`] on the runtime.
pub fn remove_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot remove a channel directory");
    }
}

/// [`remove_dir`] off the runtime's workers, waiting for it.
pub async fn remove(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || remove_dir(&dir)).await;
}

/// Locks every host directory under `base` that nobody else holds (blocking). What no
/// container names among them may then be removed ([`remove_unnamed`]); directories being
/// made or armed by a live server are held by it, and skipped.
pub fn lock_all(base: &Path) -> Vec<Held> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            let dir = e.path();
            lock(&dir).ok().flatten().map(|l| Held { dir, _lock: l })
        })
        .collect()
}

/// Removes the `held` directories that no container names (`in_use`, listed after they
/// were locked); returns how many (blocking).
pub fn remove_unnamed(held: Vec<Held>, in_use: &[PathBuf]) -> usize {
    let mut removed = 0;
    for h in held {
        if !in_use.contains(&h.dir) {
            remove_dir(&h.dir);
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

    fn base(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("msc-channel-{name}-{}", std::process::id()))
    }

    #[tokio::test]
    async fn a_symlink_or_a_file_is_never_connected() {
        let base = base("conn");
        let dir = make_dir(&base, "one").unwrap().dir;
        let other = make_dir(&base, "two").unwrap().dir;
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
        remove(dir.clone()).await;
        remove(other.clone()).await;
        assert!(!dir.exists() && !other.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 46: a directory no container names goes at the next sweep, however young
    /// (a server killed with SIGKILL left it); one a live server is still making (held)
    /// stays, and so does one a container names.
    #[test]
    fn issue_46_a_sweep_takes_unnamed_directories_at_once_and_never_held_ones() {
        let base = base("sweep");
        let left = make_dir(&base, "left").unwrap().dir;
        let named = make_dir(&base, "named").unwrap().dir;
        let making = make_dir(&base, "making").unwrap();
        let held = lock_all(&base);
        assert_eq!(held.len(), 2, "the one being made is not taken");
        assert_eq!(remove_unnamed(held, std::slice::from_ref(&named)), 1);
        assert!(
            !left.exists(),
            "a young unnamed directory outlived the sweep"
        );
        assert!(named.exists() && making.dir.exists());
        // A maker never gets a directory a sweep holds: it takes a fresh one.
        let swept = lock_all(&base);
        let again = make_dir(&base, "again").unwrap();
        assert!(swept.iter().all(|h| h.dir != again.dir));
        drop((swept, making, again));
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 46: the listener reaches the peer the server expects, and only it; the door
    /// goes after the hand-over.
    #[tokio::test]
    async fn issue_46_the_door_hands_the_listener_to_the_supervisor_only() {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        use std::mem::MaybeUninit;
        let base = base("door");
        let dir = make_dir(&base, "door").unwrap().dir;
        // A stranger (the wrong pid) is hung up on, and times out.
        let door = open_door(&dir).unwrap();
        let door_path = dir.join(DOOR_NAME);
        let stranger = std::os::unix::net::UnixStream::connect(&door_path).unwrap();
        let r = door.hand_over(1, Duration::from_millis(300)).await;
        assert!(matches!(r, Err(DoorError::Timeout(_))), "{r:?}");
        drop(stranger);
        assert!(!door_path.exists(), "the door outlived its hand-over");
        // This process is the supervisor here.
        let door = open_door(&dir).unwrap();
        let taker = std::thread::spawn(move || {
            let s = std::os::unix::net::UnixStream::connect(door_path).unwrap();
            let mut byte = [0u8; 1];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            rustix::net::recvmsg(
                &s,
                &mut [std::io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .unwrap();
            let fd = control
                .drain()
                .find_map(|m| match m {
                    RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
                    _ => None,
                })
                .unwrap();
            std::os::unix::net::UnixListener::from(fd)
        });
        let me = i32::try_from(std::process::id()).unwrap();
        door.hand_over(me, Duration::from_secs(5)).await.unwrap();
        let listener = taker.join().unwrap();
        // The server's connection reaches the taker's listener.
        let _conn = connect(&dir).await.unwrap();
        assert!(listener.accept().is_ok());
        drop(listener);
        // Nobody listens any more: a new server finds it missing (and arms it anew).
        assert!(matches!(connect(&dir).await, Err(OpenError::Missing(_))));
        let _ = std::fs::remove_dir_all(&base);
    }
}
