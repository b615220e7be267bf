//! Files on this server's computers (SPEC §3.9): `computer_file_read`, `_write` and
//! `_edit`, on whichever backend holds the computer.
//!
//! A file call names its computer like an exec (the session default when omitted; a
//! first call creates it) and counts as a use of it. The backend moves bytes; the edit is
//! done here once for every backend: read the whole file, replace exactly, write it back
//! atomically with its own mode.

use serde_json::Value;
use shared::files::{
    FileCall, FileEdit, FileRead, FileWrite, MAX_EDIT_BYTES, MAX_SLICE, edit_file, edit_structured,
    read_structured, write_structured,
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
    ) -> Result<Value, ComputerError> {
        let (id, at) = self
            .target(call.computer_id(), call.temporary(), progress)
            .await?;
        let answer = self.computers.file_on(&self.key(&id), &id, call).await?;
        Ok(super::mark_created(answer, at.created))
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

/// A file being streamed out (HTTP `GET /v1/files`) slice by slice, the next slice read
/// while the previous one goes out: at most two slices of memory, whatever the size.
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

    /// The next chunk, `None` at the end (or when the file shrank meanwhile).
    pub async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, ComputerError>> {
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
            Ok(s) if s.data.is_empty() => None,
            Ok(s) => {
                let asked = (self.end.min(s.offset + MAX_SLICE)) - s.offset;
                if (s.data.len() as u64) < asked {
                    // It shrank while read: this is the last of it.
                    self.end = s.offset + s.data.len() as u64;
                } else {
                    self.read_ahead();
                }
                Some(Ok(s.data))
            }
            Err(e) => {
                self.end = self.next;
                Some(Err(e.into()))
            }
        }
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
    ) -> Result<Value, ComputerError> {
        let (id, _) = self
            .target(Some(id), temporary, &Progress::default())
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
    async fn file_on(&self, key: &str, id: &str, call: FileCall) -> Result<Value, ComputerError> {
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
    ) -> Result<Value, ComputerError> {
        match call {
            FileCall::Read(FileRead {
                path,
                offset,
                length,
                ..
            }) => {
                let slice = self.backend.file_read(key, path, *offset, *length).await?;
                Ok(read_structured(id, path, &slice))
            }
            FileCall::Write(w) => {
                let written = self.backend.file_write(key, &write_spec(w)).await?;
                Ok(write_structured(id, &w.path, &written))
            }
            FileCall::Edit(e) => {
                let (replacements, written) = self.edit(key, e).await?;
                Ok(edit_structured(id, &e.path, replacements, written.size))
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
        let (edited, replacements) = edit_file(e, &file).map_err(refused)?;
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
