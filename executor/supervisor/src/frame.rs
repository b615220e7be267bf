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
    Started = 16,
    Stdout = 17,
    Stderr = 18,
    Exit = 19,
    Error = 20,
    Pong = 21,
    /// The answer to a `Job` or `JobStdin` request (JSON, after any output frames).
    Done = 22,
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
            16 => Kind::Started,
            17 => Kind::Stdout,
            18 => Kind::Stderr,
            19 => Kind::Exit,
            20 => Kind::Error,
            21 => Kind::Pong,
            22 => Kind::Done,
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
}

/// How a job ended (the payload of an `Exit` frame, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// Shell-style: the exit status, or 128+N when killed by signal N; 124 on timeout.
    pub code: i32,
    pub timed_out: bool,
    pub truncated: bool,
}

/// What a supervisor that serves kept jobs answers to a ping (older ones echo the ping).
pub const PONG_JOBS: &[u8] = b"msc-supervisor jobs/1";

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
