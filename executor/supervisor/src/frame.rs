//! The wire format between the server and the supervisor: length-prefixed frames.
//!
//! `[len: u32 LE][kind: u8][job: u32 LE][payload]`, where `len` counts kind, job and
//! payload. Frames are bounded ([`MAX_FRAME`]); anything malformed is an error that ends
//! the connection. Both sides treat the other as untrusted input.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Largest frame body (kind + job + payload).
pub const MAX_FRAME: usize = 1024 * 1024 + 5;
/// Largest output chunk the supervisor sends in one frame.
pub const CHUNK: usize = 64 * 1024;

/// Frame kinds. Client → supervisor below 16, supervisor → client from 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Start = 1,
    Stdin = 2,
    StdinClose = 3,
    Kill = 4,
    Ping = 5,
    /// A request about kept jobs (JSON [`JobControl`]); answered by `Done` or `Error`.
    Job = 6,
    /// Bytes for a kept job's stdin: `[id length: u8][job id][bytes]`; answered by `Done`.
    JobStdin = 7,
    /// A file request (JSON [`FileControl`]); answered by `Data` frames and one `Done`.
    File = 8,
    /// Bytes of an upload begun by a `File` `write_begin` of the same job number.
    FileData = 9,
    Started = 16,
    Stdout = 17,
    Stderr = 18,
    Exit = 19,
    Error = 20,
    Pong = 21,
    /// The answer to a `Job` or `JobStdin` request (JSON, after any output frames).
    Done = 22,
    /// Bytes of a file being read (before its `Done`).
    Data = 23,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Kind::Start,
            2 => Kind::Stdin,
            3 => Kind::StdinClose,
            4 => Kind::Kill,
            5 => Kind::Ping,
            6 => Kind::Job,
            7 => Kind::JobStdin,
            8 => Kind::File,
            9 => Kind::FileData,
            16 => Kind::Started,
            17 => Kind::Stdout,
            18 => Kind::Stderr,
            19 => Kind::Exit,
            20 => Kind::Error,
            21 => Kind::Pong,
            22 => Kind::Done,
            23 => Kind::Data,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub job: u32,
    pub payload: Vec<u8>,
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("frame of {0} bytes is too short")]
    TooShort(usize),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

impl Frame {
    pub fn new(kind: Kind, job: u32, payload: impl Into<Vec<u8>>) -> Self {
        Self {
            kind,
            job,
            payload: payload.into(),
        }
    }

    /// Encodes the frame.
    pub fn encode(&self) -> Vec<u8> {
        let len = (5 + self.payload.len()) as u32;
        let mut out = Vec::with_capacity(4 + len as usize);
        out.extend_from_slice(&len.to_le_bytes());
        out.push(self.kind as u8);
        out.extend_from_slice(&self.job.to_le_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// Writes the frame in one call (callers serialize writers).
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.encode())
    }

    /// Reads one frame. `Err(Closed)` on a clean end of stream before a frame.
    pub fn read_from(r: &mut impl Read) -> Result<Frame, FrameError> {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge(len));
        }
        if len < 5 {
            return Err(FrameError::TooShort(len));
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        let kind = Kind::from_u8(body[0]).ok_or(FrameError::UnknownKind(body[0]))?;
        let job = u32::from_le_bytes([body[1], body[2], body[3], body[4]]);
        body.drain(..5);
        Ok(Frame {
            kind,
            job,
            payload: body,
        })
    }
}

/// What to start (the payload of a `Start` frame, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartSpec {
    pub argv: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    /// Extra environment (`KEY=VALUE`), on top of the supervisor's own clean environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Whether `Stdin` frames will follow (otherwise stdin is empty).
    #[serde(default)]
    pub stdin: bool,
    pub timeout_ms: u64,
    pub output_limit: u64,
    /// No `Started` frame: the client has no use for the pid (one frame, and one wake-up
    /// of the client, fewer per command). Older supervisors ignore it and send it anyway.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quiet: bool,
}

/// How a job ended (the payload of an `Exit` frame, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Shell-style: the exit status, or 128+N when killed by signal N; 124 on timeout.
    pub code: i32,
    pub timed_out: bool,
    pub truncated: bool,
    /// The out-of-memory killer ended it (the computer's memory limit was reached).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub oom_killed: bool,
}

/// What a supervisor that serves kept jobs answers to a ping (older ones echo the ping).
pub const PONG_JOBS: &[u8] = b"msc-supervisor jobs/1";
/// What a supervisor that serves kept jobs and files answers to a ping.
pub const PONG_FILES: &[u8] = b"msc-supervisor jobs/1 files/1";

/// Whether a pong announces kept jobs.
pub fn pong_serves_jobs(pong: &[u8]) -> bool {
    pong == PONG_JOBS || pong == PONG_FILES
}

/// Whether a pong announces files.
pub fn pong_serves_files(pong: &[u8]) -> bool {
    pong == PONG_FILES
}

/// A request about kept jobs: jobs that outlive the connection that started them, with
/// their output in a bounded buffer until it is read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum JobControl {
    /// Starts `spec` as kept job `job_id` (the server's unguessable id). Its output goes to a
    /// buffer of `buffer_bytes`; `spec.output_limit` is ignored. Answer: `Done` with its
    /// [`JobStatus`].
    Start {
        job_id: String,
        /// What to show in lists (the command line).
        command: String,
        spec: StartSpec,
        buffer_bytes: u64,
    },
    /// Output not read yet (at most `max_bytes`): answered at once when there is some or
    /// the job ended, else when some arrives or after `wait_ms`; with `until_exit`, only
    /// when the job ends or after `wait_ms`. Answer: `Stdout`/`Stderr` frames, then `Done`
    /// with the [`JobStatus`]. A status with `exit` is the last: the job is then forgotten.
    Read {
        job_id: String,
        wait_ms: u64,
        #[serde(default)]
        until_exit: bool,
        max_bytes: u64,
    },
    /// The newest output of each stream (at most `max_bytes` of each, and the ring's
    /// `RECENT`), read or not, taking nothing: a dashboard's tail. Answer: `Stdout`/`Stderr`
    /// frames, then `Done` with the [`JobStatus`], whose `running` is false and `exit` set
    /// once the program ended (unread output stays for a `Read`; the job is not forgotten).
    Peek {
        job_id: String,
        max_bytes: u64,
    },
    CloseStdin {
        job_id: String,
    },
    /// Sends `signal` to the job's whole process group.
    Signal {
        job_id: String,
        signal: i32,
    },
    /// Answer: `Done` with a JSON array of [`JobStatus`], oldest first.
    List {},
}

/// A kept job as the supervisor sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub job_id: String,
    pub command: String,
    /// Unix milliseconds.
    pub started_at_ms: u64,
    /// So far, or in all once it ended.
    pub duration_ms: u64,
    /// False once it ended and all its output was read.
    pub running: bool,
    /// How it ended; set on the read that took its last output.
    #[serde(default)]
    pub exit: Option<ExitInfo>,
    /// Output dropped (the oldest) since the previous read.
    #[serde(default)]
    pub dropped_bytes: u64,
    /// Unread output, in bytes.
    #[serde(default)]
    pub unread_bytes: u64,
    /// The job's timeout (what a timed-out exit says it hit).
    #[serde(default)]
    pub timeout_ms: u64,
}

/// Most file bytes in one `Data` or `FileData` frame.
pub const FILE_CHUNK: usize = MAX_FRAME - 5;

/// A file request (the payload of a `File` frame). Paths resolve inside the computer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum FileControl {
    /// At most `length` bytes of regular file `path` from `offset`: `Data` frames, then
    /// `Done` with [`FileAnswer`]`<`[`FileRead`]`>`. An offset at or past the end reads 0 bytes.
    Read {
        path: String,
        offset: u64,
        length: u64,
    },
    /// Begins an upload under this frame's job number; its bytes follow in `FileData`
    /// frames of the same number, then `WriteEnd`. Nothing is answered until `WriteEnd`
    /// (or `WriteAbort`).
    WriteBegin {
        path: String,
        /// Add to the end (creating the file if missing) instead of an atomic replace.
        #[serde(default)]
        append: bool,
        /// Refuse (`exists`), changing nothing, if the file exists.
        #[serde(default)]
        create_only: bool,
        /// Permission bits; `None`: 0644 for a new or replaced file, an appended one keeps its own.
        #[serde(default)]
        mode: Option<u32>,
        /// Create missing parent directories (0755).
        #[serde(default)]
        make_dirs: bool,
    },
    /// Ends the upload: answered by `Done` with [`FileAnswer`]`<`[`FileStored`]`>`.
    WriteEnd {},
    /// Drops the upload, leaving the old file as it was: `Done` with `{"ok": {}}`.
    WriteAbort {},
}

/// The `Done` of a file request: `{"ok": …}` or `{"error": {"kind", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileAnswer<T> {
    Ok(T),
    Error(FileFailure),
}

/// A file read's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRead {
    /// The file's size when read.
    pub size: u64,
    pub offset: u64,
    /// Bytes sent in `Data` frames.
    pub read: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Last modification, seconds since the epoch.
    pub mtime: i64,
    /// Nanoseconds past `mtime` (absent from an older supervisor: 0).
    #[serde(default)]
    pub mtime_nsec: u32,
}

/// A finished upload: the whole file's size and SHA-256 (lowercase hex) after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStored {
    pub size: u64,
    pub sha256: String,
}

/// The answer to an aborted upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aborted {}

/// Why a file request failed, changing nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFailure {
    pub kind: FileErrorKind,
    /// For the agent: what happened and what to do.
    pub message: String,
}

/// The kinds of file failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    /// The path, or a parent directory, does not exist.
    NotFound,
    IsDir,
    /// A parent is not a directory.
    NotDir,
    /// `create_only`, and the file exists.
    Exists,
    ReadOnly,
    /// The disk or a quota is full.
    NoSpace,
    Permission,
    Io,
}

/// The payload of a `JobStdin` frame.
pub fn job_stdin_payload(job_id: &str, bytes: &[u8]) -> Vec<u8> {
    let id = &job_id.as_bytes()[..job_id.len().min(255)];
    let mut out = Vec::with_capacity(1 + id.len() + bytes.len());
    out.push(id.len() as u8);
    out.extend_from_slice(id);
    out.extend_from_slice(bytes);
    out
}

/// Splits a `JobStdin` payload into the job id and the bytes.
pub fn split_job_stdin(payload: &[u8]) -> Option<(&str, &[u8])> {
    let (&n, rest) = payload.split_first()?;
    let n = usize::from(n);
    if rest.len() < n {
        return None;
    }
    let id = std::str::from_utf8(&rest[..n]).ok()?;
    Some((id, &rest[n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_stdin_payloads() {
        let p = job_stdin_payload("job-1", b"abc");
        assert_eq!(split_job_stdin(&p), Some(("job-1", &b"abc"[..])));
        assert_eq!(split_job_stdin(&[]), None);
        assert_eq!(split_job_stdin(&[9, b'a']), None);
        assert_eq!(split_job_stdin(&[1, 0xff]), None);
        assert_eq!(split_job_stdin(&[0]), Some(("", &b""[..])));
    }

    #[test]
    fn round_trip() {
        let f = Frame::new(Kind::Stdout, 7, b"hello".to_vec());
        let bytes = f.encode();
        assert_eq!(Frame::read_from(&mut &bytes[..]).unwrap(), f);
    }

    #[test]
    fn hostile_input_is_refused_not_panicked() {
        assert!(matches!(
            Frame::read_from(&mut &[][..]),
            Err(FrameError::Closed)
        ));
        let huge = (MAX_FRAME as u32 + 1).to_le_bytes();
        assert!(matches!(
            Frame::read_from(&mut &huge[..]),
            Err(FrameError::TooLarge(_))
        ));
        let short = [2u8, 0, 0, 0, 1, 0];
        assert!(matches!(
            Frame::read_from(&mut &short[..]),
            Err(FrameError::TooShort(2))
        ));
        let unknown = [5u8, 0, 0, 0, 99, 0, 0, 0, 0];
        assert!(matches!(
            Frame::read_from(&mut &unknown[..]),
            Err(FrameError::UnknownKind(99))
        ));
        let truncated = [9u8, 0, 0, 0, 17, 0, 0, 0, 0, b'x'];
        assert!(matches!(
            Frame::read_from(&mut &truncated[..]),
            Err(FrameError::Io(_))
        ));
        // Pseudo-random bytes never panic.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let mut buf = Vec::new();
            for _ in 0..(x % 40) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                buf.push((x & 0xff) as u8);
            }
            let _ = Frame::read_from(&mut &buf[..]);
            x = x.wrapping_add(1);
        }
    }
}
