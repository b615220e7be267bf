//! Files as bytes (SPEC §3.9): reads in slices and uploads, inside the computer.
//!
//! A read runs on its own thread and streams `Data` frames, then one `Done`. An upload
//! is begun by a `write_begin` request, fed by `FileData` frames of the same job number
//! (the client pipelines them without waiting) and answered once, at `write_end`. A
//! replace writes a temporary file beside the target (`.<name>.msc-<random>.tmp`, 0600
//! while written), sets its mode, fsyncs and renames it over the target (with
//! `create_only`, `RENAME_NOREPLACE`, so the check is atomic); an append writes at the
//! end and is cut back to the old size if it fails. Either way a failed or abandoned
//! upload leaves the old file as it was. Each upload is written by a thread of its own,
//! fed through a small bounded queue, so a slow disk never holds up the connection's
//! other frames (execs, jobs, reads); the connection loop waits only when one upload's
//! queue is full. Uploads still open when their connection ends are aborted. Paths
//! resolve inside the computer as given: the supervisor runs there.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::file_errors::{Op, classify, create_failure, failure, io_errno, not_regular};
use rustix::fs::{FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::frame::{
    Aborted, FILE_CHUNK, FileAnswer, FileControl, FileErrorKind, FileFailure, FileRead, FileStored,
    Frame, Kind,
};
use crate::proc::{Writer, send};

/// Most uploads one connection keeps open at once.
const MAX_UPLOADS: usize = 64;

static NEXT_TEMP: AtomicU64 = AtomicU64::new(1);

fn answer<T: serde::Serialize>(w: &Writer, job: u32, a: &FileAnswer<T>) {
    let body = serde_json::to_vec(a).unwrap_or_default();
    send(w, &Frame::new(Kind::Done, job, body));
}

fn answer_error(w: &Writer, job: u32, f: FileFailure) {
    answer::<Aborted>(w, job, &FileAnswer::Error(f));
}

/// Opens `path` (never blocking on a FIFO) and checks it is a regular file.
fn open_regular(path: &str, flags: OFlags, mode: Mode, op: Op) -> Result<File, FileFailure> {
    let fd = rustix::fs::open(
        path,
        flags | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        mode,
    )
    .map_err(|e| classify(e, path, op))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| classify(e, path, op))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(classify(Errno::ISDIR, path, op)),
        _ => return Err(not_regular(path)),
    }
    // Regular files ignore O_NONBLOCK; clear it anyway so nothing surprises a reader.
    let fl = rustix::fs::fcntl_getfl(&fd).map_err(|e| classify(e, path, op))?;
    let _ = rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK);
    Ok(File::from(fd))
}

/// Serves a read on its own thread: `Data` frames, then `Done`.
fn read(w: Writer, job: u32, path: String, offset: u64, length: u64) {
    crate::workers::spawn(move || match read_file(&w, job, &path, offset, length) {
        Ok(meta) => answer(&w, job, &FileAnswer::Ok(meta)),
        Err(f) => answer_error(&w, job, f),
    });
}

fn read_file(
    w: &Writer,
    job: u32,
    path: &str,
    offset: u64,
    length: u64,
) -> Result<FileRead, FileFailure> {
    let file = open_regular(path, OFlags::RDONLY, Mode::empty(), Op::Read)?;
    let st = rustix::fs::fstat(&file).map_err(|e| classify(e, path, Op::Read))?;
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let want = length.min(size.saturating_sub(offset));
    let mut buf = vec![0u8; FILE_CHUNK.min(usize::try_from(want).unwrap_or(FILE_CHUNK))];
    let mut done = 0u64;
    while done < want {
        let n = usize::try_from(want - done).map_or(buf.len(), |left| left.min(buf.len()));
        let got = match file.read_at(&mut buf[..n], offset + done) {
            Ok(0) => break, // shrank while read
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(classify(io_errno(&e), path, Op::Read)),
        };
        send(w, &Frame::new(Kind::Data, job, buf[..got].to_vec()));
        done += got as u64;
    }
    Ok(FileRead {
        size,
        offset,
        read: done,
        mode: st.st_mode & 0o7777,
        mtime: st.st_mtime,
        mtime_nsec: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
    })
}

/// An upload in progress.
enum Upload {
    /// `write_begin` or a write failed: the error waits for `write_end`.
    Failed(FileFailure),
    Replace(Replace),
    Append(Append),
}

/// A replace: bytes go to a temporary file beside the target.
struct Replace {
    path: String,
    target: PathBuf,
    temp: PathBuf,
    file: File,
    hasher: Sha256,
    size: u64,
    mode: u32,
    create_only: bool,
}

/// An append: bytes go to the end of the file, cut back to `old_size` on failure.
struct Append {
    path: String,
    /// Where the bytes go (`path`, or the file its final symlink points to).
    target: PathBuf,
    file: File,
    old_size: u64,
    created: bool,
    mode: Option<u32>,
}

impl Upload {
    fn begin(
        path: &str,
        append: bool,
        create_only: bool,
        mode: Option<u32>,
        make_dirs: bool,
    ) -> Upload {
        let target = resolve_link(Path::new(path));
        if make_dirs
            && let Some(dir) = target.parent()
            && let Err(e) = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
        {
            // EEXIST here: a parent is a file, not a directory.
            let errno = match io_errno(&e) {
                Errno::EXIST => Errno::NOTDIR,
                other => other,
            };
            return Upload::Failed(classify(errno, path, Op::Write));
        }
        let begun = if append {
            begin_append(path, &target, create_only, mode).map(Upload::Append)
        } else {
            begin_replace(path, target, create_only, mode).map(Upload::Replace)
        };
        begun.unwrap_or_else(Upload::Failed)
    }

    fn data(&mut self, bytes: &[u8]) {
        let result = match self {
            Upload::Failed(_) => return,
            Upload::Replace(r) => r
                .file
                .write_all(bytes)
                .map(|()| {
                    r.hasher.update(bytes);
                    r.size += bytes.len() as u64;
                })
                .map_err(|e| classify(io_errno(&e), &r.path, Op::Write)),
            Upload::Append(a) => a
                .file
                .write_all(bytes)
                .map_err(|e| classify(io_errno(&e), &a.path, Op::Write)),
        };
        if let Err(f) = result {
            self.abort();
            *self = Upload::Failed(f);
        }
    }

    /// Undoes whatever was written: the temporary goes; an append is cut back (and a
    /// file it created removed).
    fn abort(&mut self) {
        match self {
            Upload::Failed(_) => {}
            Upload::Replace(r) => {
                let _ = std::fs::remove_file(&r.temp);
            }
            Upload::Append(a) => {
                if a.created {
                    let _ = std::fs::remove_file(&a.target);
                } else {
                    let _ = a.file.set_len(a.old_size);
                }
            }
        }
        *self = Upload::Failed(failure(FileErrorKind::Io, "the upload was aborted".into()));
    }

    fn end(mut self) -> Result<FileStored, FileFailure> {
        let result = match &mut self {
            Upload::Failed(f) => return Err(f.clone()),
            Upload::Replace(r) => end_replace(r),
            Upload::Append(a) => end_append(a),
        };
        if result.is_err() {
            self.abort();
        }
        result
    }
}

/// The file a final symlink points to (a write through a link changes its target, as a
/// shell's `>` would), else `path` itself.
fn resolve_link(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

fn begin_replace(
    path: &str,
    target: PathBuf,
    create_only: bool,
    mode: Option<u32>,
) -> Result<Replace, FileFailure> {
    let old = match rustix::fs::stat(&target) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile if create_only => {
                return Err(classify(Errno::EXIST, path, Op::Write));
            }
            FileType::RegularFile => Some(st),
            FileType::Directory => return Err(classify(Errno::ISDIR, path, Op::Write)),
            _ => return Err(not_regular(path)),
        },
        Err(Errno::NOENT) => None,
        Err(e) => return Err(classify(e, path, Op::Write)),
    };
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(failure(
            FileErrorKind::Io,
            format!("{path} does not name a file"),
        ));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    // Bounded, so a 255-byte name still leaves room for the decoration.
    let stem = &name.as_bytes()[..name.len().min(200)];
    for _ in 0..8 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = NEXT_TEMP.fetch_add(1, Ordering::Relaxed);
        let mut temp_name = b".".to_vec();
        temp_name.extend_from_slice(stem);
        temp_name.extend_from_slice(
            format!(".msc-{:x}{n:x}{nanos:08x}.tmp", std::process::id()).as_bytes(),
        );
        let temp = dir.join(OsString::from_vec(temp_name));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        match rustix::fs::open(&temp, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => {
                // Keep the owner of the file it replaces (best effort: we may not be root).
                if let Some(st) = &old {
                    let _ = rustix::fs::fchown(
                        &fd,
                        Some(rustix::fs::Uid::from_raw(st.st_uid)),
                        Some(rustix::fs::Gid::from_raw(st.st_gid)),
                    );
                }
                return Ok(Replace {
                    path: path.to_owned(),
                    target,
                    temp,
                    file: File::from(fd),
                    hasher: Sha256::new(),
                    size: 0,
                    mode: mode.unwrap_or(0o644),
                    create_only,
                });
            }
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(create_failure(e, path, dir)),
        }
    }
    Err(failure(
        FileErrorKind::Io,
        format!("{path}: no free temporary name"),
    ))
}

fn end_replace(r: &mut Replace) -> Result<FileStored, FileFailure> {
    let fail = |e: Errno| classify(e, &r.path, Op::Write);
    rustix::fs::fchmod(&r.file, Mode::from_raw_mode(r.mode)).map_err(fail)?;
    rustix::fs::fsync(&r.file).map_err(fail)?;
    if r.create_only {
        let cwd = rustix::fs::CWD;
        match rustix::fs::renameat_with(cwd, &r.temp, cwd, &r.target, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            // No RENAME_NOREPLACE on this file system: a hard link fails as atomically.
            Err(Errno::INVAL | Errno::NOSYS) => {
                rustix::fs::link(&r.temp, &r.target).map_err(fail)?;
                let _ = std::fs::remove_file(&r.temp);
            }
            Err(e) => return Err(fail(e)),
        }
    } else {
        rustix::fs::rename(&r.temp, &r.target).map_err(fail)?;
    }
    Ok(FileStored {
        size: r.size,
        sha256: hex(&std::mem::take(&mut r.hasher).finalize()),
    })
}

fn begin_append(
    path: &str,
    target: &Path,
    create_only: bool,
    mode: Option<u32>,
) -> Result<Append, FileFailure> {
    let flags = OFlags::RDWR | OFlags::APPEND;
    let new = Mode::from_raw_mode(0o600);
    // Exclusive first, so we know whether we created it.
    let (file, created) =
        match open_regular_at(target, flags | OFlags::CREATE | OFlags::EXCL, new, path) {
            Ok(f) => (f, true),
            Err(f) if f.kind == FileErrorKind::Exists && !create_only => {
                (open_regular_at(target, flags, Mode::empty(), path)?, false)
            }
            Err(f) if f.kind == FileErrorKind::NotFound => {
                let dir = target.parent().unwrap_or(Path::new("/"));
                return Err(create_failure(Errno::NOENT, path, dir));
            }
            Err(f) => return Err(f),
        };
    let old_size = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Append {
        path: path.to_owned(),
        target: target.to_owned(),
        file,
        old_size,
        created,
        mode,
    })
}

fn open_regular_at(
    target: &Path,
    flags: OFlags,
    mode: Mode,
    path: &str,
) -> Result<File, FileFailure> {
    let Some(t) = target.to_str() else {
        return Err(failure(
            FileErrorKind::Io,
            format!("{path}: not a UTF-8 path"),
        ));
    };
    open_regular(t, flags, mode, Op::Write)
}

fn end_append(a: &mut Append) -> Result<FileStored, FileFailure> {
    let fail = |e: Errno| classify(e, &a.path, Op::Write);
    if a.created || a.mode.is_some() {
        let mode = a.mode.unwrap_or(0o644);
        rustix::fs::fchmod(&a.file, Mode::from_raw_mode(mode)).map_err(fail)?;
    }
    rustix::fs::fsync(&a.file).map_err(fail)?;
    // The whole file's hash: read it back from the start.
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; FILE_CHUNK];
    let mut at = 0u64;
    loop {
        match a.file.read_at(&mut buf, at) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                at += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(fail(io_errno(&e))),
        }
    }
    Ok(FileStored {
        size: at,
        sha256: hex(&hasher.finalize()),
    })
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `FileData` frames queued for one upload's writer before the connection loop waits for
/// it (at most `WRITER_QUEUE` x 1 MiB buffered per upload).
const WRITER_QUEUE: usize = 4;

/// What the connection loop hands an upload's writer thread.
enum ToWriter {
    Data(Vec<u8>),
    /// `write_end`: commit and answer.
    End,
    /// `write_abort`: undo and answer that it was aborted.
    Abort,
}

/// How an upload is asked for.
struct Begin {
    path: String,
    append: bool,
    create_only: bool,
    mode: Option<u32>,
    make_dirs: bool,
}

/// An upload of one connection, as its loop sees it.
enum Open {
    /// Its writer thread (bytes, end and abort go there in order).
    Writer(SyncSender<ToWriter>),
    /// Refused at `write_begin`: the error waits for `write_end`, data is dropped.
    Refused(FileFailure),
}

/// One upload's writer thread: begins it, writes what the loop queues, then answers once
/// (at `End` or `Abort`). A slow disk holds up this thread only, never the connection's
/// other frames. When the loop goes away unanswered (the connection ended, or the job
/// number was reused) the upload is aborted silently.
fn writer(w: Writer, job: u32, b: Begin, rx: Receiver<ToWriter>) {
    let mut upload = Upload::begin(&b.path, b.append, b.create_only, b.mode, b.make_dirs);
    loop {
        match rx.recv() {
            Ok(ToWriter::Data(bytes)) => upload.data(&bytes),
            Ok(ToWriter::End) => {
                match upload.end() {
                    Ok(stored) => answer(&w, job, &FileAnswer::Ok(stored)),
                    Err(f) => answer_error(&w, job, f),
                }
                return;
            }
            Ok(ToWriter::Abort) => {
                upload.abort();
                return answer(&w, job, &FileAnswer::Ok(Aborted {}));
            }
            Err(_) => return upload.abort(),
        }
    }
}

/// One connection's open uploads, by job number; aborted when the connection ends (the
/// writers see their queue close).
#[derive(Default)]
pub(crate) struct Uploads {
    open: HashMap<u32, Open>,
}

impl Uploads {
    /// Serves a `File` frame.
    pub(crate) fn control(&mut self, w: &Writer, job: u32, payload: &[u8]) {
        let control = match serde_json::from_slice::<FileControl>(payload) {
            Ok(c) => c,
            Err(e) => {
                // The upload (if any) of this number is over (dropping its queue aborts
                // it): its data is ignored.
                self.open.remove(&job);
                let f = failure(FileErrorKind::Io, format!("bad file request: {e}"));
                return answer_error(w, job, f);
            }
        };
        match control {
            FileControl::Read {
                path,
                offset,
                length,
            } => read(w.clone(), job, path, offset, length),
            FileControl::WriteBegin {
                path,
                append,
                create_only,
                mode,
                make_dirs,
            } => {
                self.open.remove(&job);
                let open = if self.open.len() >= MAX_UPLOADS {
                    Open::Refused(failure(
                        FileErrorKind::Io,
                        format!("at most {MAX_UPLOADS} uploads at once on one connection"),
                    ))
                } else {
                    let begin = Begin {
                        path,
                        append,
                        create_only,
                        mode: mode.map(|m| m & 0o7777),
                        make_dirs,
                    };
                    let (tx, rx) = mpsc::sync_channel(WRITER_QUEUE);
                    let w = w.clone();
                    match thread::Builder::new()
                        .name(format!("upload-{job}"))
                        .spawn(move || writer(w, job, begin, rx))
                    {
                        Ok(_) => Open::Writer(tx),
                        Err(e) => Open::Refused(failure(
                            FileErrorKind::Io,
                            format!("the supervisor could not start the upload: {e}"),
                        )),
                    }
                };
                self.open.insert(job, open);
            }
            FileControl::WriteEnd {} => match self.open.remove(&job) {
                Some(Open::Writer(tx)) => {
                    if tx.send(ToWriter::End).is_err() {
                        let f = failure(FileErrorKind::Io, "the upload's writer ended".into());
                        answer_error(w, job, f);
                    }
                }
                Some(Open::Refused(f)) => answer_error(w, job, f),
                None => answer_error(
                    w,
                    job,
                    failure(FileErrorKind::Io, "write_end without write_begin".into()),
                ),
            },
            FileControl::WriteAbort {} => match self.open.remove(&job) {
                Some(Open::Writer(tx)) if tx.send(ToWriter::Abort).is_ok() => {}
                _ => answer(w, job, &FileAnswer::Ok(Aborted {})),
            },
        }
    }

    /// Serves a `FileData` frame (ignored when no upload has this number). Waits only
    /// when this upload's writer is `WRITER_QUEUE` frames behind.
    pub(crate) fn data(&mut self, job: u32, bytes: Vec<u8>) {
        if let Some(Open::Writer(tx)) = self.open.get(&job)
            && tx.send(ToWriter::Data(bytes)).is_err()
        {
            self.open.remove(&job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
    }
}
