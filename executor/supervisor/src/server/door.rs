//! The direct channel's door, from inside the computer: the server's way to reach the
//! supervisor through the computer's host directory, which is mounted read-only here.
//!
//! The supervisor cannot bind anything in a read-only directory, and nothing else in the
//! computer can write there either. So the server binds the listening socket itself (on the
//! host, `sup.sock`) and hands it over: it binds `door.sock` beside it, the supervisor
//! connects to the door (connecting needs no write access to the mount) and receives the
//! listener with `SCM_RIGHTS`, then serves it like its own. The supervisor waits for a door
//! with inotify on the directory (a poll every few seconds where inotify is unavailable),
//! so a server can hand over a new listener whenever it finds none (a restarted computer, a
//! restarted engine). Each listener received is served by a thread of its own.

use std::io::{self, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

/// How long a door connection may take to deliver its listener.
const HANDOVER: Duration = Duration::from_secs(5);
/// How often the door is tried when no inotify watch can be set (or one stays quiet).
const QUIET_RETRY: Duration = Duration::from_secs(5);
const POLL_RETRY: Duration = Duration::from_millis(250);

/// A door that refuses the connection may be bound but not listening yet (a server of
/// another build that binds it in place): tried again this often, this many times, before
/// waiting for the next change in the directory.
const REFUSED_RETRY: Duration = Duration::from_millis(20);
const REFUSED_TRIES: u32 = 25;

/// Takes listeners through the door at `door` forever, handing each to `serve`.
pub fn watch(door: &Path, serve: impl Fn(UnixListener)) {
    let watch = door.parent().and_then(watch_dir);
    let mut refused = 0;
    loop {
        match take(door) {
            Ok(listener) => {
                refused = 0;
                serve(listener);
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && refused < REFUSED_TRIES => {
                refused += 1;
                std::thread::sleep(REFUSED_RETRY);
            }
            Err(_) => {
                refused = 0;
                wait(watch.as_ref());
            }
        }
    }
}

/// Connects to the door and receives one listening socket.
fn take(door: &Path) -> io::Result<UnixListener> {
    let stream = UnixStream::connect(door)?;
    stream.set_read_timeout(Some(HANDOVER))?;
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        // Never inherited by a job: only the supervisor answers the server.
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut got: Option<OwnedFd> = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                got.get_or_insert(fd);
            }
        }
    }
    let fd = got.ok_or_else(|| io::Error::other("the door handed over no socket"))?;
    // Only a listening socket is served (anything else would spin in accept).
    if !rustix::net::sockopt::socket_acceptconn(&fd)? {
        return Err(io::Error::other("the door handed over no listening socket"));
    }
    Ok(UnixListener::from(fd))
}

/// An inotify descriptor watching `dir` for new entries (the door appearing).
fn watch_dir(dir: &Path) -> Option<std::fs::File> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC).ok()?;
    inotify::add_watch(
        &fd,
        dir,
        inotify::WatchFlags::CREATE | inotify::WatchFlags::MOVED_TO,
    )
    .ok()?;
    Some(std::fs::File::from(fd))
}

/// Waits for something new in the directory, or a while.
fn wait(watch: Option<&std::fs::File>) {
    let Some(mut file) = watch else {
        std::thread::sleep(POLL_RETRY);
        return;
    };
    use rustix::event::{PollFd, PollFlags, Timespec};
    let timeout = Timespec {
        tv_sec: QUIET_RETRY.as_secs().cast_signed(),
        tv_nsec: 0,
    };
    let mut fds = [PollFd::new(&file, PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) if n > 0 => {
            // Drain the events: which entry changed does not matter, the door is tried.
            let mut buf = [0u8; 4096];
            let _ = file.read(&mut buf);
        }
        Ok(_) => {}
        Err(_) => std::thread::sleep(POLL_RETRY),
    }
}
