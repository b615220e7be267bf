//! Files on WebAssembly computers (SPEC §3.9): straight on the computer's `fs/`
//! directory, through cap-std, so no path (`..`, an absolute or relative symlink) reaches
//! outside it.
//!
//! A replace writes a temporary file beside the target, syncs it and renames it over the
//! target (`create_only`: a hard link, which fails when the name exists, so the check is
//! atomic), so a failed write leaves the old file. Appends sync, then hash the whole file.
//! A write to a symlink writes its target when that stays inside the computer (as a
//! shell's `>` does); one leading outside is refused, changing nothing.
//!
//! The read-only base layer (`/etc`, `/bin`, `/usr/bin`, `/proc`, `/dev`) is seen as the
//! shell sees it ([`super::layers`]): read there, refused for writes.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use cap_std::fs::{Dir, MetadataExt, OpenOptions, Permissions, PermissionsExt};
use shared::files::{DEFAULT_MODE, Digest, Sha256, hex};

use super::layers::{self, Layers};
use super::{Wasm, WasmError};
use crate::spec::{FilePutSpec, FileSlice, FileWriteSpec, FileWritten, UploadStream};

/// Where a write goes and how, owned (it runs on a blocking thread).
struct Target {
    path: String,
    create_only: bool,
    mode: Option<u32>,
    make_dirs: bool,
}

/// One slice to write.
struct Upload {
    target: Target,
    data: Vec<u8>,
    append: bool,
}

impl Wasm {
    /// The computer's root, or "no such computer".
    fn root_of(&self, id: &str) -> Result<std::path::PathBuf, WasmError> {
        let fs = self.computer_dir(id).join("fs");
        if !fs.is_dir() {
            return Err(WasmError::NotFound(id.to_owned()));
        }
        Ok(fs)
    }

    /// The read-only base layer over computer `id`'s `fs/`, as its shell mounts it.
    async fn layers(&self, id: &str) -> Result<Layers, WasmError> {
        let loaded = self.program().await?;
        // As an exec does: the first use by this server brings the computer up to date.
        self.prepare(id).await?;
        Ok(Layers::new(super::base::mounts(
            &loaded.base,
            &self.computer_dir(id),
        )))
    }

    /// Reads from the writable layer, or from the base layer where the shell sees it.
    pub async fn file_read(
        &self,
        id: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, WasmError> {
        let fs = self.root_of(id)?;
        let layers = self.layers(id).await?;
        let (root, rel) = match layers.at(path) {
            Some(m) if m.guest == "/dev" && !m.rel.is_empty() => return Err(layers::device(path)),
            Some(m) => (m.host.clone(), m.rel),
            None => (fs, split(path).0.to_owned()),
        };
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || read(&root, &rel, &path, offset, length))
            .await
            .map_err(|e| WasmError::Storage(e.to_string()))?
    }

    pub async fn file_write(
        &self,
        id: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, WasmError> {
        let fs = self.root_of(id)?;
        self.layers(id).await?.check_writable(spec.path)?;
        let w = Upload {
            target: Target {
                path: spec.path.to_owned(),
                create_only: spec.create_only,
                mode: spec.mode,
                make_dirs: spec.make_dirs,
            },
            data: spec.data.to_vec(),
            append: spec.append,
        };
        tokio::task::spawn_blocking(move || write(&fs, &w))
            .await
            .map_err(|e| WasmError::Storage(e.to_string()))?
    }
}

impl Wasm {
    /// Streams `body` into a temporary file beside the target, then commits it.
    pub async fn file_put(
        &self,
        id: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, WasmError> {
        use futures_util::StreamExt;
        use tokio::io::AsyncWriteExt;
        let fs = self.root_of(id)?;
        self.layers(id).await?.check_writable(spec.path)?;
        let target = Target {
            path: spec.path.to_owned(),
            create_only: spec.create_only,
            mode: spec.mode,
            make_dirs: spec.make_dirs,
        };
        let blocking = |e: tokio::task::JoinError| WasmError::Storage(e.to_string());
        let (dir, tmp, name, target, file) = tokio::task::spawn_blocking(move || {
            let (dir, name) = landing(&fs, &target)?;
            let tmp = temp_name(&name);
            let file = dir
                .open_with(&tmp, OpenOptions::new().write(true).create_new(true))
                .map_err(|e| refused(&target.path, &e, false))?;
            Ok::<_, WasmError>((dir, tmp, name, target, file.into_std()))
        })
        .await
        .map_err(blocking)??;
        // Chunks arrive small (tens of KiB); one blocking write per MiB, not per chunk.
        let mut out = tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::from_std(file));
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut failed = None;
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(bytes) => {
                    hasher.update(&bytes);
                    size += bytes.len() as u64;
                    if let Err(e) = out.write_all(&bytes).await {
                        failed = Some(refused(&target.path, &e, false));
                        break;
                    }
                }
                Err(why) => {
                    failed = Some(WasmError::File(format!(
                        "{}: the upload broke off ({why}); the old file is unchanged",
                        target.path
                    )));
                    break;
                }
            }
        }
        if failed.is_none()
            && let Err(e) = out.flush().await
        {
            failed = Some(refused(&target.path, &e, false));
        }
        drop(out);
        tokio::task::spawn_blocking(move || match failed {
            Some(e) => {
                let _ = dir.remove_file(&tmp);
                Err(e)
            }
            None => commit(&dir, &tmp, &name, &target),
        })
        .await
        .map_err(blocking)??;
        Ok(FileWritten {
            size,
            sha256: hex(&hasher.finalize()),
        })
    }
}

/// An I/O error on `path`, in words for the agent.
fn refused(path: &str, e: &io::Error, make_dirs_hint: bool) -> WasmError {
    match e.kind() {
        io::ErrorKind::NotFound if make_dirs_hint => WasmError::NoSuchFile(format!(
            "{path}: a parent directory does not exist; pass make_dirs: true to create it"
        )),
        io::ErrorKind::NotFound => WasmError::NoSuchFile(format!(
            "{path} does not exist on this computer (list its directory with terminal_execute: ls)"
        )),
        io::ErrorKind::IsADirectory => WasmError::File(format!(
            "{path} is a directory; name a file inside it (list it with terminal_execute: ls)"
        )),
        io::ErrorKind::NotADirectory => WasmError::File(format!(
            "{path}: a component of the path is a file, not a directory"
        )),
        io::ErrorKind::AlreadyExists => WasmError::File(format!(
            "{path} already exists and `create_only` is set: nothing changed"
        )),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => WasmError::File(format!(
            "{path}: the computer's disk is full: nothing was written; free space and try again"
        )),
        io::ErrorKind::ReadOnlyFilesystem => {
            WasmError::File(format!("{path} is on a read-only filesystem"))
        }
        // cap-std's answer to a path (or symlink) that leads outside the computer.
        io::ErrorKind::PermissionDenied => WasmError::File(format!(
            "{path}: permission denied, or the path (through a symlink or ..) leads outside the computer"
        )),
        _ => WasmError::File(format!("{path}: {e}")),
    }
}

/// `path` relative to the computer's root, and its parent and file name.
fn split(path: &str) -> (&str, &str, &str) {
    let rel = path.trim_start_matches('/').trim_end_matches('/');
    match rel.rsplit_once('/') {
        Some((parent, name)) => (rel, parent, name),
        None => (rel, "", rel),
    }
}

fn open_root(fs: &Path) -> Result<Dir, WasmError> {
    Dir::open_ambient_dir(fs, cap_std::ambient_authority())
        .map_err(|e| WasmError::Storage(e.to_string()))
}

/// Reads `rel` under the directory `dir` (the writable layer or a read-only mount);
/// `path` names it for the agent.
fn read(
    dir: &Path,
    rel: &str,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<FileSlice, WasmError> {
    let root = open_root(dir)?;
    let rel = if rel.is_empty() { "." } else { rel };
    let mut file = root.open(rel).map_err(|e| refused(path, &e, false))?;
    let md = file.metadata().map_err(|e| refused(path, &e, false))?;
    if md.is_dir() {
        return Err(refused(
            path,
            &io::Error::from(io::ErrorKind::IsADirectory),
            false,
        ));
    }
    if !md.is_file() {
        return Err(WasmError::File(format!(
            "{path} is not a regular file (a device, socket or pipe)"
        )));
    }
    let size = md.len();
    let mut data = Vec::new();
    if offset < size {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| refused(path, &e, false))?;
        let want = length.min(size - offset);
        data.reserve(usize::try_from(want).unwrap_or(0));
        (&mut file)
            .take(want)
            .read_to_end(&mut data)
            .map_err(|e| refused(path, &e, false))?;
    }
    Ok(FileSlice {
        size,
        offset,
        data,
        mode: md.mode() & 0o7777,
        mtime_secs: md.mtime(),
        mtime_nanos: u32::try_from(md.mtime_nsec()).unwrap_or(0),
    })
}

/// The directory that holds `path` (created first with `make_dirs`) and the file's name;
/// refuses a target that is a directory.
fn parent_dir<'p>(fs: &Path, path: &'p str, make_dirs: bool) -> Result<(Dir, &'p str), WasmError> {
    let root = open_root(fs)?;
    let (_, parent, name) = split(path);
    if make_dirs && !parent.is_empty() {
        root.create_dir_all(parent)
            .map_err(|e| refused(path, &e, false))?;
    }
    let dir = if parent.is_empty() {
        root
    } else {
        root.open_dir(parent)
            .map_err(|e| refused(path, &e, !make_dirs))?
    };
    if dir.is_dir(name) {
        return Err(refused(
            path,
            &io::Error::from(io::ErrorKind::IsADirectory),
            false,
        ));
    }
    Ok((dir, name))
}

/// Symlinks followed from a write's path before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Where a write lands: the directory holding `t.path` and the name in it, through a
/// final symlink whose target stays inside the computer (a shell's `>` writes through a
/// link, and so do the other backends). `create_only` does not follow: the link is a
/// name that exists. A link leading outside the computer (an absolute target, which
/// cap-std never follows, or `..` above its root) is refused before anything is written.
fn landing(fs: &Path, t: &Target) -> Result<(Dir, String), WasmError> {
    let (dir, name) = parent_dir(fs, &t.path, t.make_dirs)?;
    if t.create_only {
        return Ok((dir, name.to_owned()));
    }
    let root = open_root(fs)?;
    let (_, parent, _) = split(&t.path);
    let (mut dir, mut parent, mut name) = (dir, parent.to_owned(), name.to_owned());
    for _ in 0..MAX_LINKS {
        match dir.symlink_metadata(&name) {
            Ok(md) if md.file_type().is_symlink() => {}
            _ => {
                if dir.is_dir(&name) {
                    return Err(refused(
                        &t.path,
                        &io::Error::from(io::ErrorKind::IsADirectory),
                        false,
                    ));
                }
                return Ok((dir, name));
            }
        }
        let link = dir
            .read_link_contents(&name)
            .map_err(|e| refused(&t.path, &e, false))?;
        let outside = || {
            WasmError::File(format!(
                "{} is a symbolic link to {}, which is outside this computer: nothing changed (write to a path inside it)",
                t.path,
                link.display()
            ))
        };
        let Some(text) = link.to_str().filter(|_| !link.is_absolute()) else {
            return Err(outside());
        };
        let joined = if parent.is_empty() {
            text.to_owned()
        } else {
            format!("{parent}/{text}")
        };
        if climbs_out(&joined) {
            return Err(outside());
        }
        let (_, p, n) = split(&joined);
        if matches!(n, "" | "." | "..") {
            return Err(refused(
                &t.path,
                &io::Error::from(io::ErrorKind::IsADirectory),
                false,
            ));
        }
        dir = if p.is_empty() {
            root.try_clone()
        } else {
            root.open_dir(p)
        }
        .map_err(|e| match e.kind() {
            io::ErrorKind::PermissionDenied => outside(),
            _ => refused(&t.path, &e, false),
        })?;
        (parent, name) = (p.to_owned(), n.to_owned());
    }
    Err(WasmError::File(format!(
        "{}: too many levels of symbolic links; nothing changed",
        t.path
    )))
}

/// Whether a path relative to the root leaves it by `..` (read as written).
fn climbs_out(rel: &str) -> bool {
    let mut depth = 0usize;
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return true,
            },
            _ => depth += 1,
        }
    }
    false
}

/// A fresh temporary name beside `name`, within the 255 bytes of a file name.
fn temp_name(name: &str) -> String {
    let mut keep = name.len().min(200);
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!(".{}.msc-{:08x}.tmp", &name[..keep], rand::random::<u32>())
}

/// The permission bits a written file gets on the host: the asked mode (0644 by default)
/// without setuid, setgid or sticky. A WASM computer's files are host files, and no file
/// an agent writes may carry those bits there (issue 46); the shell's `chmod` drops them
/// too.
fn host_mode(mode: Option<u32>) -> u32 {
    mode.unwrap_or(DEFAULT_MODE) & 0o777
}

/// Makes the written temporary file `tmp` the file `name`: its mode, synced, then renamed
/// over the old one (`create_only`: linked, which fails if the name exists). On failure
/// the temporary is removed and the old file is as it was.
fn commit(dir: &Dir, tmp: &str, name: &str, w: &Target) -> Result<(), WasmError> {
    let result = (|| -> io::Result<()> {
        let f = dir.open_with(tmp, OpenOptions::new().write(true))?;
        f.set_permissions(Permissions::from_mode(host_mode(w.mode)))?;
        f.sync_all()?;
        if w.create_only {
            // A link fails when the name exists: the check and the write are one step.
            dir.hard_link(tmp, dir, name)?;
            dir.remove_file(tmp)
        } else {
            dir.rename(tmp, dir, name)
        }
    })();
    result.map_err(|e| {
        let _ = dir.remove_file(tmp);
        refused(&w.path, &e, false)
    })
}

fn write(fs: &Path, w: &Upload) -> Result<FileWritten, WasmError> {
    let (dir, name) = landing(fs, &w.target)?;
    let name = name.as_str();
    if w.append {
        return append(&dir, name, w);
    }
    let tmp = temp_name(name);
    let created = dir
        .open_with(&tmp, OpenOptions::new().write(true).create_new(true))
        .and_then(|mut f| f.write_all(&w.data));
    if let Err(e) = created {
        let _ = dir.remove_file(&tmp);
        return Err(refused(&w.target.path, &e, false));
    }
    commit(&dir, &tmp, name, &w.target)?;
    Ok(FileWritten {
        size: w.data.len() as u64,
        sha256: hex(&Sha256::digest(&w.data)),
    })
}

fn append(dir: &Dir, name: &str, w: &Upload) -> Result<FileWritten, WasmError> {
    let existed = dir.exists(name);
    let mut opts = OpenOptions::new();
    opts.append(true);
    if w.target.create_only {
        opts.create_new(true);
    } else {
        opts.create(true);
    }
    let fail = |e: io::Error| refused(&w.target.path, &e, false);
    let mut f = dir.open_with(name, &opts).map_err(fail)?;
    if !existed || w.target.mode.is_some() {
        f.set_permissions(Permissions::from_mode(host_mode(w.target.mode)))
            .map_err(fail)?;
    }
    f.write_all(&w.data).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    drop(f);
    let mut f = dir.open(name).map_err(fail)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(fail)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(FileWritten {
        size,
        sha256: hex(&hasher.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use super::{Target, Upload, climbs_out, temp_name, write};

    #[test]
    fn issue_46_no_written_file_carries_setuid_setgid_or_sticky_on_the_host() {
        use std::os::unix::fs::PermissionsExt;
        let fs = std::env::temp_dir().join(format!("msc-wasm-modes-{}", rand::random::<u64>()));
        std::fs::create_dir_all(&fs).unwrap();
        for (i, (mode, append, want)) in [
            (Some(0o6755), false, 0o755),
            (Some(0o4755), true, 0o755),
            (Some(0o1777), false, 0o777),
            (Some(0o2640), false, 0o640),
            (None, false, 0o644),
        ]
        .into_iter()
        .enumerate()
        {
            let path = format!("/f{i}");
            let upload = Upload {
                target: Target {
                    path: path.clone(),
                    create_only: false,
                    mode,
                    make_dirs: false,
                },
                data: b"#!/bin/sh\n".to_vec(),
                append,
            };
            write(&fs, &upload).unwrap_or_else(|e| panic!("{path}: {e}"));
            let got = std::fs::metadata(fs.join(&path[1..]))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(got & 0o7777, want, "{path} with {mode:?}");
        }
        std::fs::remove_dir_all(&fs).unwrap();
    }

    #[test]
    fn links_that_climb_out_are_seen() {
        assert!(!climbs_out("tmp/../etc/x"));
        assert!(!climbs_out("a/./b/../../c"));
        assert!(climbs_out("tmp/../../x"));
        assert!(climbs_out("../x"));
    }

    #[test]
    fn temporary_names_stay_within_a_file_name() {
        assert!(temp_name(&"é".repeat(127)).len() <= 255);
        assert!(temp_name("a").starts_with(".a.msc-"));
    }
}
