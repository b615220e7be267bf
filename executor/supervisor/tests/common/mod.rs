//! The harness both test binaries share: a supervisor started natively (not as PID 1)
//! on a socket in a fresh directory, and connections to it.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // tests fail loudly by design

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A running supervisor; killed, and its directory removed, when dropped.
pub struct Sup {
    pub child: Child,
    pub socket: PathBuf,
    /// An empty directory for the test's files (beside the socket).
    pub dir: PathBuf,
    root: PathBuf,
}

impl Drop for Sup {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Tests make read-only directories; removal needs them writable again.
        let _ = Command::new("chmod")
            .arg("-R")
            .arg("u+w")
            .arg(&self.root)
            .status();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Starts the supervisor and waits until its socket accepts connections.
pub fn start() -> Sup {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let root = std::env::temp_dir().join(format!("msc-sup-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let socket = root.join("sup.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_msc-supervisor"))
        .args(["init", "--socket"])
        .arg(&socket)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the supervisor did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    let dir = root.join("work");
    std::fs::create_dir_all(&dir).unwrap();
    Sup {
        child,
        socket,
        dir,
        root,
    }
}

/// A connection whose reads give up after 20 s (a hung answer fails the test).
pub fn connect(socket: &Path) -> UnixStream {
    let s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}
