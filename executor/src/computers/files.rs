//! Files on this server's computers (SPEC §3.9): `computer_file_read`, `_write` and
//! `_edit`, on whichever backend holds the computer.
//!
//! A file call names its computer like an exec (the session default when omitted; a
//! first call creates it) and counts as a use of it. The backend moves bytes; the edit is
//! done here once for every backend: read the whole file, replace exactly, write it back
//! atomically with its own mode.

use shared::answer::Answer;
use shared::files::{
    FileCall, FileEdit, FileRead, FileWrite, MAX_EDIT_BYTES, MAX_SLICE, WriteAnswer, edit_file,
    edit_structured, read_structured, write_structured,
};

use super::{Computers, InUse, SessionHost};
use crate::error::ComputerError;
use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{FilePutSpec, FileWriteSpec, FileWritten, UploadStream};

impl SessionHost {
    /// Runs a file tool call: attaches (or creates) its computer, then the operation.
    pub(super) async fn file(
        &self,
        call: FileCall,
        progress: &Progress,
    ) -> Result<Answer, ComputerError> {
        let (id, at) = self
            .target(call.computer_id(), call.temporary(), None, progress)
            .await?;
        let answer = self.computers.file_on(&self.key(&id), &id, call).await?;
        Ok(answer.mark_created(at.created))
    }
}

/// A download with at least this much left after its first slice takes the backend's
/// stream (one request at the engine's speed) over more slices.
const FAST_PATH_BYTES: u64 = 8 << 20;

/// Computer `key` counts as in use while this lives (a stream outlives any borrow).
struct Held {
    computers: std::sync::Arc<Computers>,
    key: String,
}

impl Held {
    fn new(computers: std::sync::Arc<Computers>, key: String) -> Self {
        computers.in_use(&key, true);
        Self { computers, key }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.computers.in_use(&self.key, false);
    }
}

/// What a file looked like at one read. A download sees the same at its first read, at
/// every later slice and after its last read, or it fails (issue 46): a file written
/// meanwhile would go out mixed or cut under a 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_secs: i64,
    mtime_nanos: u32,
}

impl Stamp {
    fn of(s: &crate::spec::FileSlice) -> Self {
        Self {
            size: s.size,
            mtime_secs: s.mtime_secs,
            mtime_nanos: s.mtime_nanos,
        }
    }

    /// The same version of the file: nanoseconds count where both reads knew them (a
    /// backend's fallback path may know seconds only).
    fn same(&self, other: &Stamp) -> bool {
        self.size == other.size
            && self.mtime_secs == other.mtime_secs
            && (self.mtime_nanos == 0
                || other.mtime_nanos == 0
                || self.mtime_nanos == other.mtime_nanos)
    }
}

/// A file being streamed out (HTTP `GET /v1/files`) slice by slice, the next slice read
/// while the previous one goes out: at most two slices of memory, whatever the size.
/// The last chunk goes out only once a read after it found the file as it was at the
/// start; otherwise the stream ends in an error (the client sees a broken body, never a
/// clean short or mixed one).
pub struct Download {
    held: Held,
    path: String,
    /// The file's size when the download started.
    pub size: u64,
    /// The range sent: `start..end`.
    pub start: u64,
    pub end: u64,
    /// Where the next read starts.
    next: u64,
    first: Option<Vec<u8>>,
    /// The next slice, being read.
    ahead: Option<tokio::task::JoinHandle<Result<crate::spec::FileSlice, BackendError>>>,
    /// The rest in one stream, where the backend has a fast path (Docker's archive API).
    fast: Option<crate::spec::FileChunks>,
    /// The file at the first read.
    stamp: Stamp,
    /// Bytes handed out so far.
    sent: u64,
    /// Ended: the whole range went out, or an error did.
    done: bool,
}

impl Download {
    /// Starts reading the next slice, if any is left.
    fn read_ahead(&mut self) {
        if self.ahead.is_some() || self.next >= self.end {
            return;
        }
        let want = (self.end - self.next).min(MAX_SLICE);
        let (c, key, path, at) = (
            self.held.computers.clone(),
            self.held.key.clone(),
            self.path.clone(),
            self.next,
        );
        self.next += want;
        self.ahead = Some(tokio::spawn(async move {
            c.backend.file_read(&key, &path, at, want).await
        }));
    }

    /// The next chunk, `None` at the end; an error when the file changed while it was read
    /// (checked before the last chunk goes out).
    pub async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, ComputerError>> {
        if self.done {
            return None;
        }
        let total = self.end.saturating_sub(self.start);
        let chunk = match self.read_next().await {
            Some(Ok(data)) => data,
            Some(Err(e)) => {
                self.done = true;
                return Some(Err(e));
            }
            None => {
                self.done = true;
                return (self.sent < total).then(|| Err(self.changed(None)));
            }
        };
        self.sent += chunk.len() as u64;
        if self.sent > total {
            self.done = true;
            return Some(Err(self.changed(None)));
        }
        if self.sent == total {
            self.done = true;
            if let Err(e) = self.verify().await {
                return Some(Err(e));
            }
        }
        Some(Ok(chunk))
    }

    /// The next piece read: the first slice, the fast path's next chunk, or the next slice
    /// (checked against the first read).
    async fn read_next(&mut self) -> Option<Result<Vec<u8>, ComputerError>> {
        if let Some(first) = self.first.take() {
            if self.fast.is_none() {
                self.read_ahead();
            }
            return Some(Ok(first));
        }
        if let Some(fast) = &mut self.fast {
            return match fast.recv().await? {
                Ok(bytes) => Some(Ok(bytes)),
                Err(why) => Some(Err(BackendError::new(Failure::Failed, why).into())),
            };
        }
        let ahead = self.ahead.take()?;
        let read = ahead
            .await
            .unwrap_or_else(|e| Err(BackendError::new(Failure::Failed, e)));
        match read {
            Ok(s) => {
                let asked = (self.end.min(s.offset + MAX_SLICE)) - s.offset;
                if !self.stamp.same(&Stamp::of(&s)) || (s.data.len() as u64) < asked {
                    return Some(Err(self.changed(Some(Stamp::of(&s)))));
                }
                self.read_ahead();
                Some(Ok(s.data))
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    /// Reads the file's metadata again after the last read: the same as at the start, or
    /// the download fails.
    async fn verify(&self) -> Result<(), ComputerError> {
        let now = self
            .held
            .computers
            .backend
            .file_read(&self.held.key, &self.path, 0, 0)
            .await?;
        let now = Stamp::of(&now);
        if self.stamp.same(&now) {
            Ok(())
        } else {
            Err(self.changed(Some(now)))
        }
    }

    /// The error of a download whose file changed while it was read.
    fn changed(&self, now: Option<Stamp>) -> ComputerError {
        let was = self.stamp;
        let seen = match now {
            Some(n) if n.size != was.size => format!(
                " (it was {} bytes when the download started, {} bytes later)",
                was.size, n.size
            ),
            Some(_) => " (it was modified after the download started)".to_owned(),
            None => format!(
                " (it was {} bytes when the download started, and it did not read to that size)",
                was.size
            ),
        };
        tracing::info!(path = %self.path, "a download stopped: the file changed while it was read");
        refused(format!(
            "{} changed while it was downloaded{seen}: the download was stopped so that no mixed or cut copy passes for the file; download it again once nothing writes to it",
            self.path
        ))
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        if let Some(h) = self.ahead.take() {
            h.abort();
        }
    }
}

impl SessionHost {
    /// Starts streaming `path` of computer `id` (which must exist and be the caller's to
    /// reach), bytes `from..to` (`to` clamped to the size; `None`: to the end). Refuses a
    /// file over `limit` bytes.
    pub async fn download(
        &self,
        id: &str,
        path: &str,
        range: Option<(u64, Option<u64>)>,
        limit: u64,
    ) -> Result<Download, ComputerError> {
        let key = self.reachable(id).await?;
        let held = Held::new(self.computers.clone(), key.clone());
        let (from, to) = range.unwrap_or((0, None));
        let first = self
            .computers
            .backend
            .file_read(&key, path, from, MAX_SLICE)
            .await?;
        if first.size > limit {
            return Err(refused(format!(
                "{path} is {} bytes, over this server's --file-limit of {limit} bytes",
                first.size
            )));
        }
        let end = to.map_or(first.size, |t| t.min(first.size));
        let stamp = Stamp::of(&first);
        let mut data = first.data;
        data.truncate(usize::try_from(end.saturating_sub(from)).unwrap_or(usize::MAX));
        // A big rest goes by the backend's fast path if it has one.
        let rest = from + data.len() as u64;
        let fast = if end.saturating_sub(rest) >= FAST_PATH_BYTES {
            self.computers
                .backend
                .file_stream(&key, path, rest, end)
                .await
                .ok()
                .flatten()
        } else {
            None
        };
        Ok(Download {
            held,
            path: path.to_owned(),
            size: first.size,
            start: from,
            next: from + data.len() as u64,
            end,
            first: Some(data),
            ahead: None,
            fast,
            stamp,
            sent: 0,
            done: false,
        })
    }

    /// Streams `body` into `spec.path` on computer `id` (created on first use, like the
    /// tools, with `temporary`): an atomic replace once the body ended well.
    pub async fn upload(
        &self,
        id: &str,
        temporary: Option<bool>,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<WriteAnswer, ComputerError> {
        let (id, _) = self
            .target(Some(id), temporary, None, &Progress::default())
            .await?;
        let key = self.key(&id);
        let _held = Held::new(self.computers.clone(), key.clone());
        let written = self.computers.backend.file_put(&key, spec, body).await?;
        Ok(write_structured(&id, spec.path, &written))
    }
}

impl Computers {
    /// Runs `call` on computer `key` (the caller's `id`), starting it once if it was
    /// stopped behind our back, and forgetting it if it vanished.
    async fn file_on(&self, key: &str, id: &str, call: FileCall) -> Result<Answer, ComputerError> {
        let _in_use = InUse::new(self, key);
        let mut result = self.file_once(key, id, &call).await;
        if matches!(&result, Err(ComputerError::Backend(e)) if e.failure == Failure::NotRunning)
            && self.backend.start(key).await.is_ok()
        {
            result = self.file_once(key, id, &call).await;
        }
        if matches!(&result, Err(e) if e.failure() == Some(Failure::NotFound)) {
            let Ok(()) = self.registry().forget(key);
        }
        result
    }

    async fn file_once(
        &self,
        key: &str,
        id: &str,
        call: &FileCall,
    ) -> Result<Answer, ComputerError> {
        match call {
            FileCall::Read(FileRead {
                path,
                offset,
                length,
                ..
            }) => {
                let slice = self.backend.file_read(key, path, *offset, *length).await?;
                Ok(read_structured(id, path, &slice).into())
            }
            FileCall::Write(w) => {
                let written = self.backend.file_write(key, &write_spec(w)).await?;
                Ok(write_structured(id, &w.path, &written).into())
            }
            FileCall::Edit(e) => {
                let (replacements, written) = self.edit(key, e).await?;
                Ok(edit_structured(id, &e.path, replacements, written.size).into())
            }
        }
    }

    /// Reads the whole file, replaces exactly, writes it back in one atomic replace with
    /// its own mode. One slice each way, so the rewrite is atomic: files up to 4 MiB.
    async fn edit(&self, key: &str, e: &FileEdit) -> Result<(u64, FileWritten), ComputerError> {
        let file = self
            .backend
            .file_read(key, &e.path, 0, MAX_EDIT_BYTES)
            .await?;
        let (edited, replacements) = edit_file(e, &file).map_err(|e| refused(e.to_string()))?;
        let spec = FileWriteSpec {
            path: &e.path,
            data: &edited,
            append: false,
            create_only: false,
            mode: Some(file.mode),
            make_dirs: false,
        };
        Ok((replacements, self.backend.file_write(key, &spec).await?))
    }
}

fn write_spec(w: &FileWrite) -> FileWriteSpec<'_> {
    FileWriteSpec {
        path: &w.path,
        data: &w.content,
        append: w.append,
        create_only: w.create_only,
        mode: w.mode,
        make_dirs: w.make_dirs,
    }
}

fn refused(message: String) -> ComputerError {
    ComputerError::Backend(BackendError::new(Failure::File, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::Fake;

    /// A download of 9 MiB (three reads) over the fake; `change` runs after its first chunk.
    async fn download(change: bool) -> Result<u64, String> {
        let computers = Computers::over_fake(Fake::default());
        let host = SessionHost::new(computers.clone(), "session:a", false);
        let spec = FilePutSpec {
            path: "/f",
            create_only: false,
            mode: None,
            make_dirs: false,
            size: None,
        };
        let mut body = futures_util::stream::iter([Ok(vec![7u8; 9 << 20])]);
        host.upload("box", None, &spec, &mut body)
            .await
            .map_err(|e| e.to_string())?;
        let mut d = host
            .download("box", "/f", None, 1 << 30)
            .await
            .map_err(|e| e.to_string())?;
        let mut got = 0u64;
        while let Some(chunk) = d.next_chunk().await {
            got += chunk.map_err(|e| e.to_string())?.len() as u64;
            if change && got == MAX_SLICE {
                let grow = FileWriteSpec {
                    path: "/f",
                    data: b"more",
                    append: true,
                    create_only: false,
                    mode: None,
                    make_dirs: false,
                };
                let key = host.key("box");
                computers
                    .backend
                    .file_write(&key, &grow)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(got)
    }

    #[tokio::test]
    async fn issue_46_a_download_fails_when_its_file_changes_while_it_is_read() {
        assert_eq!(download(false).await, Ok(9 << 20));
        let changed = download(true).await;
        assert!(
            changed
                .as_ref()
                .is_err_and(|e| e.contains("changed while it was downloaded")),
            "{changed:?}"
        );
    }

    #[test]
    fn stamps_compare_nanoseconds_only_where_both_reads_knew_them() {
        let s = |size, secs, nanos| Stamp {
            size,
            mtime_secs: secs,
            mtime_nanos: nanos,
        };
        assert!(s(5, 10, 7).same(&s(5, 10, 7)));
        assert!(s(5, 10, 7).same(&s(5, 10, 0)));
        assert!(!s(5, 10, 7).same(&s(5, 10, 8)));
        assert!(!s(5, 10, 7).same(&s(6, 10, 7)));
        assert!(!s(5, 10, 0).same(&s(5, 11, 0)));
    }
}
