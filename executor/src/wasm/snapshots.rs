//! Snapshots, forks and restores of WebAssembly computers (SPEC §3.12): directory copies.
//!
//! A snapshot is `<state>/wasm/.snapshots/<snapshot id>/`: `snapshot.json` (its record,
//! every field of [`SnapshotRecord`]) and `fs/`, a copy of the computer's writable layer
//! when it was taken. A computer's `etc/` and `proc/` are not kept: they are written again
//! from its id, as a factory reset writes them. A fork is a new computer ([`Wasm::create`])
//! whose `fs/` is then replaced by a copy of its source's; a restore is a factory reset
//! whose new `fs/` is a copy of the snapshot's. Snapshots survive restarts of the server
//! and outlive their computer until deleted. The dot name keeps them out of
//! [`Wasm::list`].
//!
//! Every copy is built under a temporary dot name beside its place and renamed into it,
//! so no reader (another server on the same state directory included) sees half of one,
//! and a failed copy changes nothing. Files are reflinked where the filesystem can
//! (`FICLONE`: btrfs, XFS; the copy costs no space until one side changes) and copied
//! otherwise; symlinks stay symlinks (never followed), permission bits (never setuid or
//! setgid) and modification times are kept, hard links become separate files, and what is none of file, directory
//! or symlink is left out. The computer's kept jobs are not frozen for the copy (they run
//! in this server, not in a process the kernel could stop): each file is copied whole,
//! one at a time.
//!
//! It never builds a path from a snapshot id that [`shared::snapshots::is_id`] refuses.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use shared::egress::Policy;

use super::{Meta, Wasm, WasmError, base, engine, now_ms, storage, write_meta};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ForkSource, SnapshotMeta, SnapshotRecord};

/// The directory of `<state>/wasm/` that holds every snapshot (a dot name: no computer).
const SNAPSHOTS: &str = ".snapshots";
/// A snapshot's record file.
const RECORD: &str = "snapshot.json";
/// A computer's record file.
const COMPUTER_RECORD: &str = "computer.json";

/// A snapshot's record on disk: every field of [`SnapshotRecord`].
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    snapshot_id: String,
    of: String,
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    owner: Option<String>,
    label: String,
    created_ms: u64,
    size_bytes: u64,
    memory: bool,
    #[serde(default)]
    network: Option<Policy>,
}

impl From<SnapshotRecord> for Stored {
    fn from(r: SnapshotRecord) -> Self {
        Self {
            snapshot_id: r.snapshot_id,
            of: r.of,
            team: r.team,
            owner: r.owner,
            label: r.label,
            created_ms: r.created_ms,
            size_bytes: r.size_bytes,
            memory: r.memory,
            network: r.network,
        }
    }
}

impl From<Stored> for SnapshotRecord {
    fn from(s: Stored) -> Self {
        Self {
            snapshot_id: s.snapshot_id,
            of: s.of,
            team: s.team,
            owner: s.owner,
            label: s.label,
            created_ms: s.created_ms,
            size_bytes: s.size_bytes,
            memory: s.memory,
            network: s.network,
        }
    }
}

/// Where a fork or a restore takes its files from: a directory holding `fs/` and the
/// record file that says it is complete.
#[derive(Clone)]
struct Origin {
    dir: PathBuf,
    record: &'static str,
}

impl Origin {
    fn fs(&self) -> PathBuf {
        self.dir.join("fs")
    }

    /// Is it there, whole (blocking)?
    fn present(&self) -> bool {
        self.dir.join(self.record).is_file() && self.fs().is_dir()
    }
}

/// Runs blocking I/O `f` off the async threads; its errors are storage failures.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, WasmError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(storage)?
        .map_err(storage)
}

/// A fresh dot name under `parent` (`.{what}-xxxxxxxx`): never a computer, never listed.
fn hidden(parent: &Path, what: &str) -> PathBuf {
    parent.join(format!(".{what}-{:08x}", rand::random::<u32>()))
}

impl Wasm {
    /// `<state>/wasm/.snapshots`.
    fn snapshots_dir(&self) -> PathBuf {
        self.dir.join(SNAPSHOTS)
    }

    /// Snapshot `snapshot_id`'s directory; `None` for what is no snapshot id (no path is
    /// ever built from it).
    fn snapshot_dir(&self, snapshot_id: &str) -> Option<PathBuf> {
        shared::snapshots::is_id(snapshot_id).then(|| self.snapshots_dir().join(snapshot_id))
    }

    /// Snapshot `snapshot_id` as an [`Origin`], or the error that says it does not exist.
    fn snapshot_origin(&self, snapshot_id: &str) -> Result<Origin, WasmError> {
        let dir = self
            .snapshot_dir(snapshot_id)
            .ok_or_else(|| WasmError::NoSnapshot(snapshot_id.to_owned()))?;
        Ok(Origin {
            dir,
            record: RECORD,
        })
    }

    /// Where `from`'s files are, and the error that says it is gone.
    fn fork_origin(&self, from: ForkSource<'_>) -> Result<(Origin, WasmError), WasmError> {
        match from {
            ForkSource::Computer(key) => Ok((
                Origin {
                    dir: self.computer_dir(key),
                    record: COMPUTER_RECORD,
                },
                WasmError::NotFound(key.to_owned()),
            )),
            ForkSource::Snapshot(sid) => Ok((
                self.snapshot_origin(sid)?,
                WasmError::NoSnapshot(sid.to_owned()),
            )),
        }
    }

    /// Is `origin` there, whole?
    async fn present(origin: &Origin) -> Result<bool, WasmError> {
        let o = origin.clone();
        blocking(move || Ok(o.present())).await
    }

    /// Keeps computer `key`'s writable layer as snapshot `meta.snapshot_id`.
    pub async fn snapshot_take(
        &self,
        key: &str,
        meta: &SnapshotMeta<'_>,
    ) -> Result<SnapshotRecord, WasmError> {
        let dest = self.snapshot_origin(meta.snapshot_id)?.dir;
        let computer = Origin {
            dir: self.computer_dir(key),
            record: COMPUTER_RECORD,
        };
        let record = meta.record(key, 0, false);
        let taken = blocking(move || {
            if !computer.present() {
                return Ok(None);
            }
            take(&computer.fs(), &dest, record).map(Some)
        })
        .await?;
        taken.ok_or_else(|| WasmError::NotFound(key.to_owned()))
    }

    /// Every snapshot in the state directory (unreadable ones and temporaries skipped),
    /// oldest first.
    pub async fn snapshot_list(&self) -> Result<Vec<SnapshotRecord>, WasmError> {
        let root = self.snapshots_dir();
        blocking(move || read_records(&root)).await
    }

    /// Removes snapshot `snapshot_id` (forks made from it keep their files); `false`: there
    /// was none.
    pub async fn snapshot_delete(&self, snapshot_id: &str) -> Result<bool, WasmError> {
        let Some(dir) = self.snapshot_dir(snapshot_id) else {
            return Ok(false);
        };
        let trash = hidden(&self.snapshots_dir(), &format!("trash-{snapshot_id}"));
        blocking(move || match std::fs::rename(&dir, &trash) {
            Ok(()) => std::fs::remove_dir_all(&trash).map(|()| true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        })
        .await
    }

    /// Computer `key` (new), made as [`Wasm::create`] makes one, with the files of `from`
    /// (left as it was). When `from` is gone, nothing is left of `key`.
    pub async fn fork(
        &self,
        from: ForkSource<'_>,
        key: &str,
        temporary: bool,
        team: Option<&str>,
        progress: &Progress,
    ) -> Result<ContainerRecord, WasmError> {
        let (origin, gone) = self.fork_origin(from)?;
        if !Self::present(&origin).await? {
            return Err(gone);
        }
        if self.find(key).await?.is_some() {
            return Err(WasmError::Exists(key.to_owned()));
        }
        let made = self.create(key, temporary, team).await?;
        progress.report(match from {
            ForkSource::Computer(_) => "copying the files of the computer",
            ForkSource::Snapshot(_) => "copying the files of the snapshot",
        });
        let (dir, src) = (self.computer_dir(key), origin.fs());
        let copied = blocking(move || {
            let fresh = copy_beside(&src, &dir)?;
            swap_fs(&dir, &fresh)
        })
        .await;
        let Err(e) = copied else {
            return Ok(made);
        };
        if let Err(left) = self.remove(key).await {
            tracing::warn!(error = %left, "could not remove a fork whose copy failed");
        }
        match Self::present(&origin).await {
            Ok(false) => Err(gone),
            _ => Err(e),
        }
    }

    /// Computer `key` starts again from snapshot `snapshot_id`, as a factory reset does
    /// from the base: its jobs end, a new sandbox id, `/etc` written again, and `fs/` a
    /// copy of the snapshot's. Nothing changes when the snapshot or the copy fails.
    pub async fn restore(
        &self,
        key: &str,
        snapshot_id: &str,
    ) -> Result<ContainerRecord, WasmError> {
        let origin = self.snapshot_origin(snapshot_id)?;
        if !Self::present(&origin).await? {
            return Err(WasmError::NoSnapshot(snapshot_id.to_owned()));
        }
        let old = self
            .find(key)
            .await?
            .ok_or_else(|| WasmError::NotFound(key.to_owned()))?;
        let dir = self.computer_dir(key);
        let (d, src) = (dir.clone(), origin.fs());
        let fresh = match blocking(move || copy_beside(&src, &d)).await {
            Ok(fresh) => fresh,
            // Deleted while it was copied.
            Err(_) if !Self::present(&origin).await? => {
                return Err(WasmError::NoSnapshot(snapshot_id.to_owned()));
            }
            Err(e) => return Err(e),
        };
        self.end_jobs(key);
        let meta = self.renewed(key, old);
        let m = meta.clone();
        blocking(move || {
            swap_fs(&dir, &fresh)?;
            base::write_etc(&dir.join("etc"), m.caller_id())?;
            write_meta(&dir, &m)
        })
        .await?;
        Ok(self.record(meta))
    }

    /// Computer `key`'s record after a reset: a new sandbox id and creation time; its
    /// team, temporary flag and owner stay.
    fn renewed(&self, key: &str, old: ContainerRecord) -> Meta {
        Meta {
            computer_id: key.to_owned(),
            sandbox_id: format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff),
            team: old.team,
            temporary: old.temporary,
            instance: old.instance,
            host: old.host,
            image: self.image(),
            created_at: shared::history::rfc3339_utc(now_ms()),
        }
    }
}

/// Copies `src_fs` into snapshot directory `dest` with `record` (its size filled in):
/// built as a dot-named sibling, renamed into place once whole.
fn take(src_fs: &Path, dest: &Path, mut record: SnapshotRecord) -> io::Result<SnapshotRecord> {
    let root = dest
        .parent()
        .ok_or_else(|| io::Error::other("a snapshot directory has a parent"))?;
    engine::create_private_dir(root)?;
    let tmp = hidden(root, "tmp");
    let built = (|| -> io::Result<()> {
        std::fs::create_dir(&tmp)?;
        record.size_bytes = copy_tree(src_fs, &tmp.join("fs"))?;
        write_record(&tmp, &record)?;
        std::fs::rename(&tmp, dest)
    })();
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    built.map(|()| record)
}

/// Writes `record` as `dir/snapshot.json`.
fn write_record(dir: &Path, record: &SnapshotRecord) -> io::Result<()> {
    let bytes =
        serde_json::to_vec_pretty(&Stored::from(record.clone())).map_err(io::Error::other)?;
    std::fs::write(dir.join(RECORD), bytes)
}

/// The snapshot in directory `dir` (named `name`), if its record reads and names it.
fn read_record(dir: &Path, name: &str) -> Option<SnapshotRecord> {
    let bytes = std::fs::read(dir.join(RECORD)).ok()?;
    let stored: Stored = serde_json::from_slice(&bytes).ok()?;
    (stored.snapshot_id == name && dir.join("fs").is_dir()).then(|| stored.into())
}

/// Every snapshot under `root` (none when it does not exist yet), oldest first.
fn read_records(root: &Path) -> io::Result<Vec<SnapshotRecord>> {
    let entries = match std::fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<SnapshotRecord> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let name = name.to_str()?;
            if !shared::snapshots::is_id(name) {
                return None; // temporaries, trash, strangers
            }
            read_record(&entry.path(), name)
        })
        .collect();
    out.sort_by(|a, b| (a.created_ms, &a.snapshot_id).cmp(&(b.created_ms, &b.snapshot_id)));
    Ok(out)
}

/// Copies `src` to a fresh dot-named directory in `computer` and returns it (nothing is
/// left behind when the copy fails).
fn copy_beside(src: &Path, computer: &Path) -> io::Result<PathBuf> {
    let fresh = hidden(computer, "fs");
    match copy_tree(src, &fresh) {
        Ok(_) => Ok(fresh),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&fresh);
            Err(e)
        }
    }
}

/// Puts `fresh` in place of `computer/fs`, then removes the old one; the old one comes
/// back when the swap fails half way.
fn swap_fs(computer: &Path, fresh: &Path) -> io::Result<()> {
    let fs = computer.join("fs");
    let old = hidden(computer, "old");
    if let Err(e) = std::fs::rename(&fs, &old) {
        let _ = std::fs::remove_dir_all(fresh);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(fresh, &fs) {
        let _ = std::fs::rename(&old, &fs);
        let _ = std::fs::remove_dir_all(fresh);
        return Err(e);
    }
    std::fs::remove_dir_all(&old)
}

/// Copies directory tree `from` to `to` (made here; its parent exists): directories,
/// files (reflinked where the filesystem can) and symlinks (as links), with their
/// permission bits. Entries that vanish during the copy are skipped (a job may be
/// deleting them). Returns the bytes of the regular files copied.
fn copy_tree(from: &Path, to: &Path) -> io::Result<u64> {
    let root = std::fs::symlink_metadata(from)?;
    if !root.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "the files to copy are not a directory",
        ));
    }
    let mut size = 0;
    // Directories get their own modes last, deepest first: a read-only one is filled
    // before it becomes read-only.
    let mut dirs = Vec::new();
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&src) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound && src != from => continue,
            Err(e) => return Err(e),
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            std::fs::create_dir(&dst)?;
            for entry in std::fs::read_dir(&src)? {
                let entry = entry?;
                stack.push((entry.path(), dst.join(entry.file_name())));
            }
            dirs.push((dst, mode_of(&meta)));
        } else if kind.is_file() {
            size += copy_file(&src, &dst, &meta)?;
        } else if kind.is_symlink() {
            match std::fs::read_link(&src) {
                Ok(target) => std::os::unix::fs::symlink(target, &dst)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    for (dir, mode) in dirs.iter().rev() {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(*mode))?;
    }
    Ok(size)
}

/// The permission bits a copy of `meta` gets: never setuid or setgid, and sticky on
/// directories only (`/tmp`). A WASM computer's files are host files, and none an agent
/// made may carry those bits there (issue 46: the file tools and `chmod` drop them too).
fn mode_of(meta: &Metadata) -> u32 {
    let keep = if meta.is_dir() { 0o1777 } else { 0o777 };
    meta.permissions().mode() & keep
}

/// Copies regular file `src` (described by `meta`) to `dst` (new): a reflink where the
/// filesystem has them, else its bytes; then its mode and modification time. Returns its
/// size (0 when it vanished first).
fn copy_file(src: &Path, dst: &Path, meta: &Metadata) -> io::Result<u64> {
    let mut from = match File::open(src) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dst)?;
    let size = match reflink(&from, &to) {
        true => from.metadata()?.len(),
        false => io::copy(&mut from, &mut to)?,
    };
    to.set_permissions(std::fs::Permissions::from_mode(mode_of(meta)))?;
    if let Ok(t) = meta.modified() {
        to.set_modified(t)?;
    }
    Ok(size)
}

/// Makes `to` share `from`'s blocks (`FICLONE`); `false` where the filesystem cannot.
#[cfg(all(
    any(target_os = "linux", target_os = "android"),
    not(any(target_arch = "sparc", target_arch = "sparc64"))
))]
fn reflink(from: &File, to: &File) -> bool {
    rustix::fs::ioctl_ficlone(to, from).is_ok()
}

/// No reflinks on this system: always a plain copy.
#[cfg(not(all(
    any(target_os = "linux", target_os = "android"),
    not(any(target_arch = "sparc", target_arch = "sparc64"))
)))]
fn reflink(_from: &File, _to: &File) -> bool {
    false
}

#[cfg(test)]
mod tests;
