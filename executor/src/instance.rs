//! This server's identity and liveness, for reaping temporaries of servers that died.
//!
//! Each running server holds an exclusive lock on `<state-dir>/instances/<id>.lock` for its
//! whole life. Temporary containers carry the instance id and host name; at start-up a
//! server removes the temporaries of instances on this host whose lock is free (the process
//! is gone, even if it was SIGKILLed). The lock is released by the kernel on any exit.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// A held instance lock. Dropping it removes the lock file.
#[derive(Debug)]
pub struct InstanceLock {
    pub id: String,
    path: PathBuf,
    _file: File,
}

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("instances")
}

impl InstanceLock {
    /// Creates and locks a fresh instance file.
    pub fn acquire(state_dir: &Path) -> io::Result<Self> {
        let dir = dir(state_dir);
        std::fs::create_dir_all(&dir)?;
        let id = format!("{:016x}", rand::random::<u64>());
        let path = dir.join(format!("{id}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok(Self {
            id,
            path,
            _file: file,
        })
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Is the instance `id` still running on this host?
pub fn is_alive(state_dir: &Path, id: &str) -> bool {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let path = dir(state_dir).join(format!("{id}.lock"));
    let Ok(file) = OpenOptions::new().write(true).open(&path) else {
        return false;
    };
    match file.try_lock() {
        Ok(()) => {
            // Nobody holds it: a dead instance left its file behind.
            let _ = std::fs::remove_file(&path);
            false
        }
        Err(std::fs::TryLockError::WouldBlock) => true,
        Err(std::fs::TryLockError::Error(_)) => true,
    }
}

/// This machine's name, to tell our instances from other machines' on a shared engine.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn liveness_follows_the_lock() {
        let dir = std::env::temp_dir().join(format!("msc-inst-{}", rand::random::<u32>()));
        let lock = InstanceLock::acquire(&dir).unwrap();
        assert!(is_alive(&dir, &lock.id));
        let id = lock.id.clone();
        drop(lock);
        assert!(!is_alive(&dir, &id));
        assert!(!is_alive(&dir, "../etc"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
