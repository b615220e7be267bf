//! Files (SPEC §3.9) on Docker: through the in-computer supervisor, over the same relay
//! connection as every exec, or through the Engine's archive API ([`super::archive`])
//! on computers without a supervisor that serves files.
//!
//! A read is one `File` request answered by `Data` frames and a `Done`. A write is
//! pipelined: `write_begin`, the bytes in `FileData` frames, `write_end`, then one wait for
//! the `Done` (the supervisor replaces atomically and hashes the whole file). A write
//! dropped half-way (the call cancelled) is aborted in the computer, leaving the old file.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use supervisor::frame::{
    FILE_CHUNK, FileAnswer, FileControl, FileErrorKind, FileFailure, FileRead, FileStored, Frame,
    Kind,
};
use tokio::sync::mpsc;

use super::supervised::{Connection, lock};
use super::{Docker, DockerError, NAME_PREFIX};
use crate::spec::{FilePutSpec, FileSlice, FileWriteSpec, FileWritten, UploadStream};

/// Uploads of a known size from this on go through the archive API (the engine's own
/// speed), staged beside the target and renamed.
const ARCHIVE_PUT_MIN: u64 = 8 << 20;

/// The longest a file request may go unanswered (a hung supervisor, a stuck disk).
const ANSWER_WAIT: Duration = Duration::from_secs(120);

/// A request's number, unregistered (and its upload aborted) when dropped unfinished.
struct Request {
    conn: Arc<Connection>,
    job: u32,
    rx: mpsc::UnboundedReceiver<Frame>,
    /// An upload was begun and not answered: abort it if this request is dropped.
    uploading: bool,
}

impl Request {
    fn new(conn: Arc<Connection>) -> Self {
        let job = conn.next_job.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&conn.jobs).insert(job, tx);
        Request {
            conn,
            job,
            rx,
            uploading: false,
        }
    }

    async fn control(&self, control: &FileControl) -> Result<(), DockerError> {
        let body =
            serde_json::to_vec(control).map_err(|e| DockerError::Supervisor(e.to_string()))?;
        self.conn
            .send(&Frame::new(Kind::File, self.job, body))
            .await
    }

    /// The `Data` bytes (at most `cap`) and the `Done` answer.
    async fn answer<T: serde::de::DeserializeOwned>(
        &mut self,
        cap: u64,
    ) -> Result<(Vec<u8>, FileAnswer<T>), DockerError> {
        let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
        let mut data = Vec::new();
        loop {
            let frame = tokio::select! {
                f = self.rx.recv() => f,
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(DockerError::Supervisor("the supervisor did not answer the file request in time".into()));
                }
            };
            let Some(frame) = frame else {
                return Err(DockerError::Supervisor(
                    "the supervisor connection closed during the file request".into(),
                ));
            };
            match frame.kind {
                Kind::Data => {
                    if (data.len() + frame.payload.len()) as u64 > cap {
                        return Err(DockerError::Supervisor(
                            "the supervisor sent more bytes than asked".into(),
                        ));
                    }
                    data.extend_from_slice(&frame.payload);
                }
                Kind::Done => {
                    self.uploading = false;
                    let answer = serde_json::from_slice(&frame.payload)
                        .map_err(|e| DockerError::Supervisor(format!("bad file answer: {e}")))?;
                    return Ok((data, answer));
                }
                Kind::Error => {
                    return Err(DockerError::Supervisor(
                        String::from_utf8_lossy(&frame.payload).into_owned(),
                    ));
                }
                _ => {}
            }
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        lock(&self.conn.jobs).remove(&self.job);
        if self.uploading
            && let Ok(h) = tokio::runtime::Handle::try_current()
        {
            let (conn, job) = (self.conn.clone(), self.job);
            h.spawn(async move {
                let body = serde_json::to_vec(&FileControl::WriteAbort {}).unwrap_or_default();
                let _ = conn.send(&Frame::new(Kind::File, job, body)).await;
            });
        }
    }
}

/// The agent's error for a supervisor's file failure.
fn refused(f: FileFailure) -> DockerError {
    match f.kind {
        FileErrorKind::NotFound => DockerError::NoSuchFile(f.message),
        _ => DockerError::File(f.message),
    }
}

impl Docker {
    /// The relay to `container` if its supervisor serves files; `None`: use the archive
    /// API. A missing or stopped computer is said so.
    async fn file_connection(
        &self,
        container: &str,
    ) -> Result<Option<Arc<Connection>>, DockerError> {
        if self.is_supervised(container).await {
            match self.connection(container).await {
                Ok(c) if c.serves_files.load(Ordering::SeqCst) => return Ok(Some(c)),
                Ok(_) => {}
                Err(why) => {
                    self.check_running(container).await?;
                    tracing::info!(container, %why, "supervisor unavailable; files through the archive API");
                }
            }
        } else {
            self.check_running(container).await?;
        }
        Ok(None)
    }

    /// `NotFound` / `NotRunning` unless `container` runs.
    async fn check_running(&self, container: &str) -> Result<(), DockerError> {
        let id = container.trim_start_matches(NAME_PREFIX).to_owned();
        match self.client.inspect_container(container, None).await {
            Ok(c) if c.state.as_ref().and_then(|s| s.running).unwrap_or(false) => Ok(()),
            Ok(_) => Err(DockerError::NotRunning(id)),
            Err(e) if super::status_of(&e) == Some(404) => Err(DockerError::NotFound(id)),
            Err(e) => Err(DockerError::from_bollard(e)),
        }
    }

    /// Reads at most `length` bytes of `path` from `offset`.
    pub async fn file_read(
        &self,
        container: &str,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<FileSlice, DockerError> {
        let Some(conn) = self.file_connection(container).await? else {
            return self.archive_read(container, path, offset, length).await;
        };
        let mut req = Request::new(conn);
        let read = FileControl::Read {
            path: path.to_owned(),
            offset,
            length,
        };
        req.control(&read).await?;
        let answer = req.answer::<FileRead>(length).await;
        let (data, meta) = match self.lost(container, answer)? {
            (data, FileAnswer::Ok(meta)) => (data, meta),
            (_, FileAnswer::Error(f)) => return Err(refused(f)),
        };
        Ok(FileSlice {
            size: meta.size,
            offset: meta.offset,
            data,
            mode: meta.mode,
            mtime_secs: meta.mtime,
            mtime_nanos: meta.mtime_nsec,
        })
    }

    /// Writes one slice: pipelined frames, one answer.
    pub async fn file_write(
        &self,
        container: &str,
        spec: &FileWriteSpec<'_>,
    ) -> Result<FileWritten, DockerError> {
        let Some(conn) = self.file_connection(container).await? else {
            return self.archive_write(container, spec).await;
        };
        let mut req = Request::new(conn);
        let begin = FileControl::WriteBegin {
            path: spec.path.to_owned(),
            append: spec.append,
            create_only: spec.create_only,
            mode: spec.mode,
            make_dirs: spec.make_dirs,
        };
        req.uploading = true;
        let sent = async {
            req.control(&begin).await?;
            for chunk in spec.data.chunks(FILE_CHUNK) {
                req.conn
                    .send(&Frame::new(Kind::FileData, req.job, chunk.to_vec()))
                    .await?;
            }
            req.control(&FileControl::WriteEnd {}).await
        }
        .await;
        self.lost(container, sent)?;
        self.stored(container, req).await
    }

    /// The answer to a finished upload: what was stored, or why not.
    async fn stored(&self, container: &str, mut req: Request) -> Result<FileWritten, DockerError> {
        let answer = req.answer::<FileStored>(0).await;
        match self.lost(container, answer)? {
            (_, FileAnswer::Ok(stored)) => Ok(FileWritten {
                size: stored.size,
                sha256: stored.sha256,
            }),
            (_, FileAnswer::Error(f)) => Err(refused(f)),
        }
    }

    /// Streams `body` into `spec.path`: `write_begin`, each chunk as `FileData` frames as
    /// it arrives (the relay's pipe is the backpressure), `write_end`. A body that breaks
    /// off aborts the upload in the computer; the old file stays.
    pub async fn file_put(
        &self,
        container: &str,
        spec: &FilePutSpec<'_>,
        body: UploadStream<'_>,
    ) -> Result<FileWritten, DockerError> {
        use futures_util::StreamExt;
        let broke = |why: shared::files::BrokenStream| {
            DockerError::File(format!(
                "{}: the upload broke off ({why}); the old file is unchanged",
                spec.path
            ))
        };
        let conn = self.file_connection(container).await?;
        if let Some(size) = spec.size.filter(|s| *s >= ARCHIVE_PUT_MIN) {
            return self.archive_put(container, spec, size, body).await;
        }
        let Some(conn) = conn else {
            return self.archive_put_unsized(container, spec, body).await;
        };
        let mut req = Request::new(conn);
        let begin = FileControl::WriteBegin {
            path: spec.path.to_owned(),
            append: false,
            create_only: spec.create_only,
            mode: spec.mode,
            make_dirs: spec.make_dirs,
        };
        req.uploading = true;
        let sent = req.control(&begin).await;
        self.lost(container, sent)?;
        // Body chunks are small (tens of KiB): gathered into frames of FILE_CHUNK, so
        // the relay carries few large writes. Dropping `req` unanswered aborts the upload.
        let mut frame = Vec::with_capacity(FILE_CHUNK);
        loop {
            let next = body.next().await;
            let end = next.is_none();
            if let Some(chunk) = next {
                let mut bytes = &chunk.map_err(broke)?[..];
                while !bytes.is_empty() {
                    let take = (FILE_CHUNK - frame.len()).min(bytes.len());
                    frame.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if frame.len() == FILE_CHUNK {
                        let full = std::mem::replace(&mut frame, Vec::with_capacity(FILE_CHUNK));
                        let sent = req
                            .conn
                            .send(&Frame::new(Kind::FileData, req.job, full))
                            .await;
                        self.lost(container, sent)?;
                    }
                }
            }
            if end {
                break;
            }
        }
        if !frame.is_empty() {
            let sent = req
                .conn
                .send(&Frame::new(Kind::FileData, req.job, frame))
                .await;
            self.lost(container, sent)?;
        }
        let sent = req.control(&FileControl::WriteEnd {}).await;
        self.lost(container, sent)?;
        self.stored(container, req).await
    }

    /// Drops the relay when a request failed on it (the next call reconnects).
    fn lost<T>(&self, container: &str, r: Result<T, DockerError>) -> Result<T, DockerError> {
        if r.is_err() {
            self.drop_connection(container);
        }
        r
    }
}
