//! Where a job's output and exit go: frames to the connection that started it, or the
//! bounded buffer of a kept job.

use crate::frame::{ExitInfo, Frame, Kind};
use crate::kept::Kept;
use crate::proc::{ConnJobs, Writer, send};
use crate::ring::Stream;
use std::sync::Arc;

/// Where a job's output and exit go.
#[derive(Clone)]
pub(crate) enum Sink {
    /// Streamed as frames to the connection that started it (a foreground command), which
    /// holds its controls in `jobs` until it ends.
    Stream { w: Writer, job: u32, jobs: ConnJobs },
    /// Kept in the job's bounded buffer until read (a kept job).
    Kept(Arc<Kept>),
}

impl Sink {
    pub(crate) fn output(&self, kind: Kind, bytes: &[u8]) {
        match self {
            Sink::Stream { w, job, .. } => send(w, &Frame::new(kind, *job, bytes.to_vec())),
            Sink::Kept(k) => k.push(
                if kind == Kind::Stderr {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                },
                bytes,
            ),
        }
    }

    /// Whether nobody keeps up with its output: a kept job whose buffer is dropping bytes.
    /// A streamed job's connection reads all it is sent.
    pub(crate) fn behind(&self) -> bool {
        match self {
            Sink::Stream { .. } => false,
            Sink::Kept(k) => k.behind(),
        }
    }

    pub(crate) fn exit(&self, info: ExitInfo) {
        match self {
            Sink::Stream { w, job, .. } => send(
                w,
                &Frame::new(
                    Kind::Exit,
                    *job,
                    serde_json::to_vec(&info).unwrap_or_default(),
                ),
            ),
            Sink::Kept(k) => k.end(info),
        }
    }
}
